"""Convex polytope tree estimators (Armandpour & Zhou, AISTATS 2021)."""

import numbers

import keras
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval

from keras_trees.api_export import keras_trees_export
from keras_trees.estimators._base import (
    CLASS_WEIGHT_DOC,
    CUT_MIN_DEPTH,
    EXPLAIN_DOC,
    PREPROCESSING_DOC,
    SHARED_CONSTRAINTS,
    VERBOSE_DOC,
    TreeClassifierBase,
    TreeRegressorBase,
    parameters,
)
from keras_trees.layers import ConvexPolytopeTree, _polytope_training
from keras_trees.losses import GammaProcessPrior

# The recipe of tutorials/convex_polytope_trees (K = 20 experts per split,
# fit_greedy, Adam 0.05, batch 256, min_gain 0.01; depth 8, cut back on the
# validation data), with its annealing path in half the epochs: 30 epochs per
# level with lambda +0.2 per epoch instead of 60 with +0.1 (the same lambda at
# the end of each level): level in accuracy and AUC on the sets of
# benchmarks/peers.py with fits about half as long, and a higher regression
# R^2 (benchmarks/regressors.py); shorter still (20 epochs, +0.3) lost
# accuracy on the held-out groups. The paper tunes the epochs per data set by
# cross-validation. No gamma-process prior by default: at the weight 1 of its
# default hyperparameters it dominates the objective of the deep nodes, which
# few rows reach (on bupa the tree fell back to its root, a constant);
# without it accuracy and AUC are higher on every group of sets of
# benchmarks/peers.py, on letter (polytope_letter.py) and in regression.
DEFAULTS = dict(
    max_depth=8, num_experts=20, epochs_per_level=30, annealing_increment=0.2, min_samples_split=10,
    min_gain=0.01, finetune_epochs=0, prior_weight=0.0, learning_rate=0.05, batch_size=256,
    validation_fraction=0.1, min_frequency=None, max_categories=64, code_indicators=None, random_state=None, verbose=0, n_jobs=None,
)

_DOC = """{summary}

    The model is one [`keras_trees.layers.ConvexPolytopeTree`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree] on the
    preprocessed features (imputed with missing-value indicators, scaled,
    categoricals one-hot encoded), grown by its ``fit_greedy`` (Section
    3.3.2: each level's stumps train ``epochs_per_level`` epochs with Adam on
    {objective}, the best threshold is searched exactly, leaves are the
    training data's {leaves}), then optionally refined jointly for
    ``finetune_epochs`` (``fit_greedy``'s ``refine_epochs``). The held-out ``validation_fraction`` chooses the depth:
    the grown tree is cut back to the depth with the best validation
    {score} (ties: the shallowest; this family trains no epochs of
    ``model.fit``, so there is no early stopping), before the refinement. The defaults are the recipe of
    ``tutorials/convex_polytope_trees`` at depth 8 with its annealing in half
    the epochs (30 per level, ``lambda`` +0.2 per epoch), not tuned per data
    set; the paper tunes K, the epochs, the learning rate and the prior per
    data set.

    Args:
        max_depth: the tree's maximum depth.
        num_experts: K, linear experts per split (1: an oblique tree).
        epochs_per_level, annealing_increment, min_samples_split, min_gain,
            finetune_epochs: of ``fit_greedy`` (``finetune_epochs`` is its
            ``refine_epochs``: the end-to-end estimators' name for the joint
            training after growth; the deprecated name ``refine_epochs`` still
            works, with a warning).
        prior_weight: strength of the gamma-process prior (Eq. 14,
            [`keras_trees.losses.GammaProcessPrior`][keras_trees.losses.gamma_process_prior.GammaProcessPrior] with its default
            hyperparameters) against the likelihood; 0 (the default) trains
            without it, 1 is the paper's objective.
        learning_rate, batch_size: Adam's step size and mini-batch size.
        validation_fraction: share of the training data held out to choose
            the depth ({stratified}seeded by ``random_state``); 0: the full depth.
        """ + PREPROCESSING_DOC + """{class_weight}
        random_state: seeds the split, the tree and Keras
            (``keras.utils.set_random_seed``, global); an int makes ``fit``
            repeatable on the TensorFlow backend.
        {verbose}

    Attributes (after ``fit``): {attributes}{explain}``n_features_in_``, ``feature_names_in_``
    (frames), ``preprocessor_`` (the fitted scikit-learn transformer),
    ``model_`` (the Keras model on the transformed float32 features; outputs
    {outputs}), ``history_`` (the dict ``fit_greedy`` returns).
"""


class _ConvexPolytope:
    # The end-to-end estimators' name for the joint training after growth.
    _renamed_arguments = {"refine_epochs": "finetune_epochs"}
    _outputs_probabilities = True  # empirical class distributions at the leaves
    _parameter_constraints = {
        **SHARED_CONSTRAINTS,
        "max_depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "num_experts": [Interval(numbers.Integral, 1, None, closed="left")],
        "epochs_per_level": [Interval(numbers.Integral, 1, None, closed="left")],
        "annealing_increment": [Interval(numbers.Real, 0, None, closed="left")],
        "min_samples_split": [Interval(numbers.Integral, 2, None, closed="left")],
        "min_gain": [Interval(numbers.Real, 0, None, closed="left")],
        "finetune_epochs": [Interval(numbers.Integral, 0, None, closed="left")],
        "prior_weight": [Interval(numbers.Real, 0, None, closed="left")],
    }

    def _build_model(self, n_features, n_outputs, seed):
        task = {"num_classes": n_outputs} if self._task == "classification" else {"units": n_outputs}
        return keras.Sequential([
            keras.Input((n_features,)),
            ConvexPolytopeTree(max_depth=self.max_depth, num_experts=self.num_experts, seed=seed,
                               prior=GammaProcessPrior.weighted(self.prior_weight), **task),
        ])

    def _fit_model(self, model, x, y, sample_weight, validation):
        tree = model.layers[-1]
        # Grown to full depth, cut back to the depth with the best validation
        # score (error rate, then log loss; the layer's ``select_depth``) but
        # never to the root (CUT_MIN_DEPTH), then the optional refinement.
        history = tree.fit_greedy(
            x, y, epochs=self.epochs_per_level, batch_size=self.batch_size,
            learning_rate=self.learning_rate, annealing_increment=self.annealing_increment,
            min_samples_split=self.min_samples_split, min_gain=self.min_gain,
            refine_epochs=0, verbose=self.verbose, sample_weight=sample_weight,
        )
        if validation is not None:
            history["validation"] = _polytope_training.select_depth(tree, *validation, min_depth=CUT_MIN_DEPTH)
        if self.finetune_epochs:
            history["refine"] = tree.refine(
                x, y, validation_data=validation, epochs=self.finetune_epochs, batch_size=self.batch_size,
                learning_rate=self.learning_rate * 0.1, annealing_increment=self.annealing_increment,
                verbose=self.verbose, sample_weight=sample_weight,
            )
        history["depth"] = tree.depth()
        history["leaves"] = tree.num_leaves()
        return history


@keras_trees_export("keras_trees.estimators")
@parameters(**DEFAULTS, class_weight=None)
class ConvexPolytopeTreeClassifier(ClassifierMixin, _ConvexPolytope, TreeClassifierBase):
    __doc__ = _DOC.format(
        verbose=VERBOSE_DOC.format(stages='a line per grown level'), explain=EXPLAIN_DOC,
        summary="A convex polytope tree classifier (splits are noisy-ORs of K linear experts).",
        objective="the conditional entropy (with the gamma-process prior when ``prior_weight`` > 0)",
        leaves="class distributions",
        score="""error rate, ties broken by the log loss (on
    imbalanced data every depth may predict the majority class, and the
    accuracy alone, shallowest on ties, would keep the root, a constant)""",
        stratified="stratified, ", class_weight=CLASS_WEIGHT_DOC,
        attributes="``classes_``, ", outputs="class probabilities")


@keras_trees_export("keras_trees.estimators")
@parameters(**DEFAULTS)
class ConvexPolytopeTreeRegressor(RegressorMixin, _ConvexPolytope, TreeRegressorBase):
    __doc__ = _DOC.format(
        verbose=VERBOSE_DOC.format(stages='a line per grown level'), explain=EXPLAIN_DOC,
        summary="A convex polytope tree regressor (splits are noisy-ORs of K linear experts).",
        objective="the leaf variance (with the gamma-process prior when ``prior_weight`` > 0)",
        leaves="mean (standardized) targets",
        score="mean squared error", stratified="", class_weight="", attributes="",
        outputs="the standardized targets; ``predict`` maps them back")
