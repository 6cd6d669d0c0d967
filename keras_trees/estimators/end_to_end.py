"""End-to-end learned decision tree estimators (Hehn, Kooij & Hamprecht 2019)."""

import numbers

import keras
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions

from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.estimators._base import (
    CLASS_WEIGHT_DOC,
    SHARED_CONSTRAINTS,
    TreeClassifierBase,
    TreeRegressorBase,
    _EarlyStopping,
    parameters,
)
from keras_trees.layers import EndToEndTree

# The recipe of tutorials/end_to_end_trees (its digits part): greedy level
# growth with 15 epochs per level, then 3 x 15 epochs of joint finetuning,
# EM leaves, steepness +0.1 per epoch, Adam 0.01, batch 200; depth 8.
DEFAULTS = dict(
    max_depth=8, split_type="oblique", epochs_per_level=15, finetune_epochs=None, min_samples_split=2,
    annealing=0.1, learning_rate=0.01, batch_size=200, patience=10, validation_fraction=0.1,
    min_frequency=None, random_state=None, verbose=0,
)
# The regressor's leaves are fitted by the optimizer (no closed-form EM step):
# a node of fewer than 20 training rows stays a leaf. On diabetes and Friedman
# #1-#3 (benchmarks/regressors.py, seeds 0-2) the mean test R^2 rises from
# 0.508 (every node split) to 0.619: higher on three sets, level on friedman2.
REGRESSOR_DEFAULTS = {**DEFAULTS, "min_samples_split": 20}

_DOC = """{summary}

    The model is one :class:`keras_trees.layers.EndToEndTree` on the
    preprocessed features (imputed with missing-value indicators, scaled,
    categoricals one-hot encoded; oblique splits on all of them), trained
    inside ``model.fit`` with :class:`keras_trees.callbacks.GreedyLevelGrowth`
    (level by level from a root stump, ``epochs_per_level`` epochs per level,
    then ``finetune_epochs`` of joint finetuning; default 3 x
    ``epochs_per_level``), {em}:class:`keras_trees.callbacks.SteepnessAnnealing`
    (``annealing`` per epoch) and Adam on {loss}. Early stopping watches the
    validation loss of a held-out ``validation_fraction`` during finetuning
    only (a partly grown tree is no candidate) and restores the best
    finetuned weights. Prediction routes every sample down one path. The
    defaults are the recipe of ``tutorials/end_to_end_trees`` at depth 8, not
    tuned per data set.

    Args:
        max_depth: the tree's maximum depth.
        split_type: ``"oblique"`` or ``"axis_aligned"``.
        epochs_per_level, finetune_epochs: of ``GreedyLevelGrowth`` (the
            number of epochs follows from them: training stops when growth
            and finetuning are done). An epoch is at least 16 mini-batches:
            a smaller training set is repeated (shuffled) within it, so that
            every stump gets enough steps on small data.
        min_samples_split: a node reached by fewer training samples is not
            split (``GreedyLevelGrowth``'s; default 2 for the classifier, 20
            for the regressor, whose leaves the optimizer fits).
        annealing: steepness increment per epoch (0: none).
        learning_rate, batch_size: Adam's step size and mini-batch size.
        patience: finetuning epochs without a better validation loss before stopping.
        validation_fraction: share of the training data held out for early
            stopping ({stratified}seeded by ``random_state``); 0: none.
        min_frequency: ``OneHotEncoder``'s ``min_frequency`` for categorical columns.{class_weight}
        random_state: seeds the split, the tree's random splits and Keras
            (``keras.utils.set_random_seed``, global); an int makes ``fit``
            repeatable on the TensorFlow backend.
        verbose: Keras' ``fit`` verbosity (0, 1, 2); 1 or 2 also prints a line per grown level.

    Attributes (after ``fit``): {attributes}``n_features_in_``, ``feature_names_in_``
    (frames), ``preprocessor_`` (the fitted scikit-learn transformer),
    ``model_`` (the Keras model on the transformed float32 features; outputs
    {outputs}), ``history_`` (the ``fit`` history dict).
"""


class _FinetuneEarlyStopping(_EarlyStopping):
    """``EarlyStopping`` that ignores the epochs in which ``GreedyLevelGrowth``
    is still growing (it writes ``growth_phase`` for the next epoch into the
    logs: 1 growing, 2 finetuning, 3 done); list it after the growth callback."""

    def on_epoch_end(self, epoch, logs=None):
        if (logs or {}).get("growth_phase", 3) < 2:
            return
        super().on_epoch_end(epoch, logs)


class _EndToEnd:
    _outputs_probabilities = True  # class distributions at the leaves
    _parameter_constraints = {
        **SHARED_CONSTRAINTS,
        "max_depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "split_type": [StrOptions({"oblique", "axis_aligned"})],
        "epochs_per_level": [Interval(numbers.Integral, 1, None, closed="left")],
        "finetune_epochs": [Interval(numbers.Integral, 0, None, closed="left"), None],
        "min_samples_split": [Interval(numbers.Integral, 1, None, closed="left")],
        "annealing": [Interval(numbers.Real, 0, None, closed="left")],
    }

    def _build_model(self, n_features, n_outputs, seed):
        task = {"num_classes": n_outputs} if self._task == "classification" else {"units": n_outputs}
        return keras.Sequential([
            keras.Input((n_features,)),
            EndToEndTree(max_depth=self.max_depth, split_type=self.split_type, seed=seed, **task),
        ])

    def _early_stopping(self, initial=None):
        return _FinetuneEarlyStopping(self._monitor, mode="min", patience=self.patience,
                                      restore_best_weights=True, initial=initial)

    def _callbacks(self, x, y, sample_weight, early_stopping):
        growth = GreedyLevelGrowth(x, y, epochs_per_level=self.epochs_per_level,
                                   finetune_epochs=self.finetune_epochs, min_samples_split=self.min_samples_split,
                                   sample_weight=sample_weight,
                                   verbose=int(self.verbose > 0))
        # Early stopping after growth (it reads the growth phase from the logs)
        # and before EMLeafUpdate, whose last update at the end of training
        # then sees the restored splits.
        callbacks = [growth] + ([early_stopping] if early_stopping is not None else [])
        if self._task == "classification":
            callbacks.append(EMLeafUpdate(x, y, sample_weight=sample_weight))
        return callbacks + [SteepnessAnnealing(self.annealing)]

    def _epochs(self, callbacks):
        return callbacks[0].max_epochs(self.max_depth)


@keras_trees_export("keras_trees.estimators")
@parameters(**DEFAULTS, class_weight=None)
class EndToEndTreeClassifier(ClassifierMixin, _EndToEnd, TreeClassifierBase):
    __doc__ = _DOC.format(
        summary="An end-to-end learned decision tree classifier (greedy growth, then finetuning).",
        em=":class:`keras_trees.callbacks.EMLeafUpdate` (closed-form leaf distributions), ",
        loss="the cross-entropy of the leaf distributions", stratified="stratified, ",
        class_weight=CLASS_WEIGHT_DOC, attributes="``classes_``, ", outputs="class probabilities")


@keras_trees_export("keras_trees.estimators")
@parameters(**REGRESSOR_DEFAULTS)
class EndToEndTreeRegressor(RegressorMixin, _EndToEnd, TreeRegressorBase):
    __doc__ = _DOC.format(
        summary="An end-to-end learned decision tree regressor (greedy growth, then finetuning).",
        em="", loss="the mean squared error of the standardized targets (leaves trained by the optimizer)",
        stratified="", class_weight="", attributes="",
        outputs="the standardized targets; ``predict`` maps them back")
