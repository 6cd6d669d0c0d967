"""Random hinge forest and fern estimators (Lay et al. 2018)."""

import numbers

import keras
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions

from keras_trees.api_export import keras_trees_export
from keras_trees.estimators._base import (
    CLASS_WEIGHT_DOC,
    EXPLAIN_DOC,
    PREPROCESSING_DOC,
    SHARED_CONSTRAINTS,
    VERBOSE_DOC,
    TreeClassifierBase,
    TreeRegressorBase,
    parameters,
)
from keras_trees.layers import HingeBatchNormalization, HingeFern, HingeForest

# The recipe of tutorials/hinge_forests (the paper's Figure 2 architecture):
# 100 learned inner-product features -> HingeBatchNormalization -> 100 trees,
# Adam 0.005, batch 32, early stopping with patience 30 (its regression part),
# at depth 8 (tutorial 6, paper 10).
DEFAULTS = dict(
    kind="forest", num_trees=100, max_depth=8, num_features=100,
    learning_rate=0.005, batch_size=32, max_epochs=200, patience=30, validation_fraction=0.1,
    min_frequency=None, max_categories=64, code_indicators=None, random_state=None, verbose=0, n_jobs=None,
)

_DOC = """{summary}

    The model is ``Dense(num_features, use_bias=False)`` (learned
    inner-product features; ``num_features=0`` feeds the inputs directly) ->
    [`keras_trees.layers.HingeBatchNormalization`][keras_trees.layers.hinge_batch_norm.HingeBatchNormalization] ->
    [`keras_trees.layers.HingeForest`][keras_trees.layers.hinge_forest.HingeForest] (``kind="forest"``) or
    [`keras_trees.layers.HingeFern`][keras_trees.layers.hinge_forest.HingeFern] (``kind="fern"``) with the trees'
    outputs {reduction}, on the preprocessed features (imputed with
    missing-value indicators, scaled, categoricals one-hot encoded), trained
    with Adam on {loss}, with early stopping on the validation loss of a
    held-out ``validation_fraction`` (best weights restored). The defaults are
    the recipe of ``tutorials/hinge_forests`` (100 trees over 100 learned
    features, Adam 0.005, batch 32, patience 30) at depth 8, not tuned per
    data set.

    Args:
        kind: ``"forest"`` or ``"fern"``.
        num_trees, max_depth: of the forest (ferns).
        num_features: learned inner-product features in front (0: none).
        reduction: how the trees' outputs combine, ``"sum"`` or ``"mean"``.
        learning_rate, batch_size: Adam's step size and mini-batch size.
        max_epochs: most training epochs (an epoch is at least 16
            mini-batches: a smaller training set is repeated, shuffled, within it).
        patience: the most epochs without a better validation loss before
            stopping; fewer, ``ceil(best_epoch / 2) + 10``, while the best
            epoch so far is early (adaptive patience).
        validation_fraction: share of the training data held out for early
            stopping ({stratified}seeded by ``random_state``); 0 trains
            ``max_epochs`` without early stopping.
        """ + PREPROCESSING_DOC + """{class_weight}
        random_state: seeds the split, the forest's feature draws and Keras
            (``keras.utils.set_random_seed``, global); an int makes ``fit``
            repeatable on the TensorFlow backend.
        {verbose}

    Attributes (after ``fit``): {attributes}{explain}``n_features_in_``, ``feature_names_in_``
    (frames), ``preprocessor_`` (the fitted scikit-learn transformer),
    ``model_`` (the Keras model on the transformed float32 features; outputs
    {outputs}), ``history_`` (the ``fit`` history dict).
"""


class _HingeForest:
    _parameter_constraints = {
        **SHARED_CONSTRAINTS,
        "kind": [StrOptions({"forest", "fern"})],
        "num_trees": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "num_features": [Interval(numbers.Integral, 0, None, closed="left")],
        "reduction": [StrOptions({"sum", "mean"})],
    }

    def _build_model(self, n_features, n_outputs, seed):
        layers = [keras.Input((n_features,))]
        if self.num_features:
            layers.append(keras.layers.Dense(self.num_features, use_bias=False, name="inner_product_features"))
        layer = HingeForest if self.kind == "forest" else HingeFern
        layers += [
            HingeBatchNormalization(),
            layer(self.num_trees, max_depth=self.max_depth, units=n_outputs, reduction=self.reduction, seed=seed),
        ]
        return keras.Sequential(layers)


@keras_trees_export("keras_trees.estimators")
@parameters(**DEFAULTS, reduction="sum", class_weight=None)
class HingeForestClassifier(ClassifierMixin, _HingeForest, TreeClassifierBase):
    __doc__ = _DOC.format(
        verbose=VERBOSE_DOC.format(stages='no stages but training'), explain=EXPLAIN_DOC,
        summary="A random hinge forest (or fern) classifier.", reduction="summed into class logits",
        loss="the cross-entropy of the logits", stratified="stratified, ", class_weight=CLASS_WEIGHT_DOC,
        attributes="``classes_``, ", outputs="class logits")


@keras_trees_export("keras_trees.estimators")
@parameters(**DEFAULTS, reduction="mean")
class HingeForestRegressor(RegressorMixin, _HingeForest, TreeRegressorBase):
    __doc__ = _DOC.format(
        verbose=VERBOSE_DOC.format(stages='no stages but training'), explain=EXPLAIN_DOC,
        summary="A random hinge forest (or fern) regressor.", reduction="averaged (the tutorial's regression)",
        loss="the mean squared error of the standardized targets", stratified="", class_weight="",
        attributes="", outputs="the standardized targets; ``predict`` maps them back")
