"""End-to-end learned decision tree estimators (Hehn, Kooij & Hamprecht 2019)."""

import numbers

import keras
import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions

from keras_trees._arrays import to_numpy
from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.estimators._base import (
    CLASS_WEIGHT_DOC,
    CUT_MIN_DEPTH,
    EXPLAIN_DOC,
    PREPROCESSING_DOC,
    SHARED_CONSTRAINTS,
    VERBOSE_DOC,
    TreeClassifierBase,
    TreeRegressorBase,
    _EarlyStopping,
    _PREDICT_BATCH,
    cv_cart_depth,
    parameters,
)
from keras_trees.layers import EndToEndTree

# The recipe of tutorials/end_to_end_trees (its digits part): greedy level
# growth with 15 epochs per level, then 3 x 15 epochs of joint finetuning,
# EM leaves, steepness +0.1 per epoch, Adam 0.01, batch 200; depth 8.
# With validation data the trained tree is then cut back to the depth with
# the best validation error (the polytope estimators' rule; ties: log loss,
# which alone prefers shallow trees because EM leaves are nearly pure). On
# the classification sets of benchmarks/peers.py the cut gains against CART
# of depth 8 on the choosing and held-out sets and costs a little on the
# second held-out group (mostly one small set); it raises the regressors'
# mean R^2
# (benchmarks/regressors.py).
# split_screening (EndToEndTree's: each new stump reads only the features whose
# best single threshold on its node's rows gains at least that share of the
# best feature's) stays off by default: with 0.5 it raises AUC on every group
# of sets of benchmarks/peers.py and helps sets of one-hot columns, but lowers
# accuracy on most choosing sets (continuous columns). See docs/benchmarks.md
# ("Screened splits").
SPLIT_SCREENING = None
DEFAULTS = dict(
    max_depth=8, split_type="oblique", epochs_per_level=15, finetune_epochs=None, min_samples_split=2,
    annealing_increment=0.1, learning_rate=0.01, batch_size=200, patience=10, validation_fraction=0.1,
    min_frequency=None, code_indicators=None, random_state=None, verbose=0, n_jobs=None, depth_cap=None,
    split_screening=SPLIT_SCREENING,
)
# The classifier's leaves at the end of fit: the class frequencies of the rows
# each leaf receives plus this many pseudo-rows spread evenly over the classes
# (_EndToEnd._smoothed_leaves; an m-estimate with a uniform prior, Laplace's
# correction for two classes), so that the smoothing does not grow with the
# number of classes. On the classification sets of benchmarks/peers.py,
# against the trained EM leaves, accuracy is level and the mean AUC higher
# on every group (one pseudo-row per class gives about the same). Most sets
# that lose AUC have 4-15 classes: there the hard counts themselves rank
# worse than the soft EM leaves (the raw frequencies lose as much), not the
# smoothing.
LEAF_PSEUDO_ROWS = 2.0
# The regressor's leaves are fitted by the optimizer (no closed-form EM step):
# a node of fewer than 20 training rows stays a leaf (every node split fits
# the optimizer's leaves to too few rows: lower test R^2 on diabetes and
# Friedman 1 and 3 of benchmarks/regressors.py, level on Friedman 2).
# Its depth cut keeps at most the depth of CART tuned by 5-fold cross-validation
# (depth_cap="cv"): the MSE of a 10% validation part (35 rows on diabetes) can
# keep depths far deeper than CART's CV picks; the cap helps most on
# diabetes and changes little elsewhere (benchmarks/regressors.py).
REGRESSOR_DEFAULTS = {**DEFAULTS, "min_samples_split": 20, "depth_cap": "cv"}

_DOC = """{summary}

    The model is one :class:`keras_trees.layers.EndToEndTree` on the
    preprocessed features (imputed with missing-value indicators, scaled,
    categoricals one-hot encoded; oblique splits on all of them), trained
    inside ``model.fit`` with :class:`keras_trees.callbacks.GreedyLevelGrowth`
    (level by level from a root stump, ``epochs_per_level`` epochs per level,
    then ``finetune_epochs`` of joint finetuning; default 3 x
    ``epochs_per_level``), {em}:class:`keras_trees.callbacks.SteepnessAnnealing`
    (``annealing_increment`` per epoch) and Adam on {loss}. Early stopping watches the
    validation loss of a held-out ``validation_fraction`` during finetuning
    only (a partly grown tree is no candidate) and restores the best
    finetuned weights. Then the tree is cut back to the depth with the best
    validation {cut_score} (``max_depth`` is an upper bound, as in the
    convex polytope estimators): cutting at depth ``d`` turns the splits on
    level ``d`` into leaves holding the {cut_leaves} of the training rows
    that reach them.{smoothed} Prediction routes every sample down one path. The
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
        annealing_increment: steepness increment per epoch (0: none; the
            deprecated name ``annealing`` still works, with a warning).
        learning_rate, batch_size: Adam's step size and mini-batch size.
        patience: the most finetuning epochs without a better validation loss
            before stopping; fewer, ``ceil(best_epoch / 2) + 10`` (epochs of
            growth included), while the best epoch so far is early.
        validation_fraction: share of the training data held out for early
            stopping and the depth ({stratified}seeded by ``random_state``);
            0: none (the full depth).
        depth_cap: the deepest tree the validation cut may keep: ``"cv"``,
            the depth (1 to ``max_depth``) that scikit-learn's CART picks by
            5-fold cross-validation ({cv_score}) on the training part, as a
            user tunes CART (``depth_cap_`` is that depth); None:
            ``max_depth``. Default: {depth_cap_default}.
        split_screening: each new stump reads only the features whose best
            single threshold on the training rows reaching it gains at least
            this share of what the best feature's gains (``EndToEndTree``'s
            ``split_screening``: sparse oblique splits where one column
            carries a node's signal, such as one-hot columns; 0.5 raised
            accuracy there and AUC on average, and cost accuracy on
            continuous columns); None: every feature (the paper's split).
            Default: {screening_default}.
        """ + PREPROCESSING_DOC + """{class_weight}
        random_state: seeds the split, the tree's random splits and Keras
            (``keras.utils.set_random_seed``, global); an int makes ``fit``
            repeatable on the TensorFlow backend.
        {verbose}

    Attributes (after ``fit``): {attributes}{explain}``n_features_in_``, ``feature_names_in_``
    (frames), ``preprocessor_`` (the fitted scikit-learn transformer),
    ``model_`` (the Keras model on the transformed float32 features; outputs
    {outputs}), ``history_`` (the ``fit`` history dict; with validation
    data also ``depth_scores``, the validation score of every depth, and
    ``depth``, the kept one; the validation metrics are NaN in the epochs
    inside a level of growth, which early stopping does not read and which
    are therefore not scored).
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
    # The convex polytope estimators' (and fit_greedy's) name for the same increment.
    _renamed_arguments = {"annealing": "annealing_increment"}
    _parameter_constraints = {
        **SHARED_CONSTRAINTS,
        "max_depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "split_type": [StrOptions({"oblique", "axis_aligned"})],
        "epochs_per_level": [Interval(numbers.Integral, 1, None, closed="left")],
        "finetune_epochs": [Interval(numbers.Integral, 0, None, closed="left"), None],
        "min_samples_split": [Interval(numbers.Integral, 1, None, closed="left")],
        "annealing_increment": [Interval(numbers.Real, 0, None, closed="left")],
        "depth_cap": [StrOptions({"cv"}), None],
        "split_screening": [Interval(numbers.Real, 0, 1, closed="right"), None],
    }

    def _build_model(self, n_features, n_outputs, seed):
        task = {"num_classes": n_outputs} if self._task == "classification" else {"units": n_outputs}
        return keras.Sequential([
            keras.Input((n_features,)),
            EndToEndTree(max_depth=self.max_depth, split_type=self.split_type, seed=seed,
                         split_screening=self.split_screening, **task),
        ])

    def _early_stopping(self, initial=None):
        return _FinetuneEarlyStopping(self._monitor, mode="min", patience=self.patience,
                                      restore_best_weights=True, initial=initial,
                                      adaptive=self._adaptive_patience)

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
        return callbacks + [SteepnessAnnealing(self.annealing_increment)]

    def _epochs(self, callbacks):
        return callbacks[0].max_epochs(self.max_depth)

    def _validation_needed(self, callbacks):
        """Growth's :meth:`GreedyLevelGrowth.may_end_growth`: early stopping
        reads the validation loss from the epoch that ends growth on
        (:class:`_FinetuneEarlyStopping`), so the epochs inside a level are not
        scored (their ``val_*`` entries in ``history_`` are NaN). On 5,000 x 20
        about 120 of a fit's 130 epochs are growth epochs."""
        return callbacks[0].may_end_growth

    def _fit_model(self, model, x, y, sample_weight, validation):
        history = super()._fit_model(model, x, y, sample_weight, validation)
        if validation is not None:
            self.depth_cap_ = (self.max_depth if self.depth_cap is None else
                               cv_cart_depth(self._task, x, y, sample_weight, self.max_depth, self._seed))
            history["depth_scores"], history["depth"] = self._select_depth(
                model.layers[-1], x, y, sample_weight, validation, self.depth_cap_)
        else:
            self.__dict__.pop("depth_cap_", None)
        if self._task == "classification":
            rows = [(x, y, sample_weight)] + ([validation] if validation is not None else [])
            self._smoothed_leaves(model.layers[-1], *(np.concatenate(part) for part in zip(*rows)))
        return history

    def _smoothed_leaves(self, tree, x, y, sample_weight):
        """Sets every leaf that rows of ``x`` reach to the smoothed class
        frequencies of those rows, ``(n_k + 2 / K) / (n + 2)``: two pseudo-rows
        spread evenly over the ``K`` classes (for two classes Laplace's
        correction, ``(n_k + 1) / (n + 2)``; more classes do not smooth
        more). Counts are weighted by ``sample_weight`` scaled to a mean of 1;
        the training and validation parts together. Within a leaf the order
        of the classes is that of the counts, so the predicted class is the
        majority of the rows the leaf receives; across leaves a leaf of few
        rows no longer claims certainty (one row: 2/3 for two classes, where
        the raw frequency says 1), which ranks the rows of a hard tree better
        (Provost & Domingos 2003, "Tree induction for probability-based
        ranking"). Leaves no row reaches keep their trained values."""
        leaves = tree.leaves_numpy()[0]
        reached = _route(tree, x)
        counts = np.zeros_like(leaves)
        w = np.asarray(sample_weight, dtype=np.float64)
        w = w * (len(w) / w.sum())  # counts in rows: the correction does not depend on the weights' scale
        np.add.at(counts, (reached, np.asarray(y)), w)
        total = counts.sum(-1, keepdims=True)
        num_classes = leaves.shape[-1]
        leaves = np.where(total > 0, (counts + LEAF_PSEUDO_ROWS / num_classes) / (total + LEAF_PSEUDO_ROWS), leaves)
        tree.set_leaf_values(leaves[None])

    def _select_depth(self, tree, x, y, sample_weight, validation, cap=None):
        """Cuts the trained tree back to the depth with the best validation score
        (:meth:`_score_outputs`: error, then log loss; the squared error of a
        regressor; ties: the deeper tree), never to the root of a tree that
        has a split (``CUT_MIN_DEPTH``) and at most to depth ``cap``. Cutting at depth ``d`` turns the
        splits on level ``d`` into leaves holding the training data that
        reaches them (class distributions with the layer's smoothing, or mean
        targets); every other leaf keeps its trained value. Returns the scores
        per depth and the chosen depth."""
        state = to_numpy(tree.node_state)
        leaves = tree.leaves_numpy()[0]
        reached, reached_val = _route(tree, x), _route(tree, validation[0])
        y = np.asarray(y)
        w = np.asarray(sample_weight, dtype=np.float64)

        def table(depth):
            """Leaf values of the tree cut at ``depth``, indexed by position."""
            values = leaves.copy()
            cut = [n for n in topology.splits(state, 0) if topology.position_depth(n) == depth]
            if cut:
                at = topology.ancestor_at_depth(reached, depth)
                weight = np.bincount(at, weights=w, minlength=len(values))
                if self._task == "classification":
                    stats = np.zeros_like(values)
                    np.add.at(stats, (at, y), w)
                    stats = tree.leaf_distributions(stats)
                else:
                    stats = np.zeros_like(values)
                    np.add.at(stats, at, w[:, None] * y.reshape(len(y), -1))
                    stats /= np.maximum(weight, 1e-300)[:, None]
                cut = [n for n in cut if weight[n] > 0]  # no training data: the value stays
                values[cut] = stats[cut]
            return values

        full = topology.tree_depth(state, 0)
        scores = {d: self._score_outputs(table(d)[topology.ancestor_at_depth(reached_val, d)], *validation[1:])
                  for d in range(full + 1)}
        deepest = full if cap is None else min(cap, full)
        best = min(range(min(CUT_MIN_DEPTH, deepest), deepest + 1), key=lambda d: (scores[d], -d))
        if best < full:
            values = table(best)
            tree.node_state.assign(topology.cut_at_depth(state, 0, best))
            tree.set_leaf_values(values[None])
        return {d: list(score) for d, score in scores.items()}, best


def _route(tree, x):
    """Heap position of the leaf each row of ``x`` reaches (the one tree), in batches."""
    parts = [np.asarray(to_numpy(tree.route(x[i:i + _PREDICT_BATCH])))[:, 0]
             for i in range(0, len(x), _PREDICT_BATCH)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@keras_trees_export("keras_trees.estimators")
@parameters(**DEFAULTS, class_weight=None)
class EndToEndTreeClassifier(ClassifierMixin, _EndToEnd, TreeClassifierBase):
    __doc__ = _DOC.format(
        verbose=VERBOSE_DOC.format(stages='a line per grown level'), explain=EXPLAIN_DOC,
        summary="An end-to-end learned decision tree classifier (greedy growth, then finetuning).",
        em=":class:`keras_trees.callbacks.EMLeafUpdate` (closed-form leaf distributions), ",
        loss="the cross-entropy of the leaf distributions", stratified="stratified, ",
        cut_score="error rate, ties broken by log loss,", cut_leaves="class distributions",
        class_weight=CLASS_WEIGHT_DOC, attributes="``classes_``, ", outputs="class probabilities",
        cv_score="accuracy", depth_cap_default="None", screening_default=repr(DEFAULTS["split_screening"]),
        smoothed=(" Finally every leaf that rows of ``X`` reach (training and\n    validation parts) is set to "
                 "their smoothed class frequencies,\n    ``(n_k + 2 / K) / (n + 2)`` (Laplace's correction for two "
                 "classes):\n    the predicted class is their majority, and a leaf of few rows claims\n    no certainty, "
                 "which ranks the samples better (higher AUC) than the\n    raw frequencies."))


@keras_trees_export("keras_trees.estimators")
@parameters(**REGRESSOR_DEFAULTS)
class EndToEndTreeRegressor(RegressorMixin, _EndToEnd, TreeRegressorBase):
    __doc__ = _DOC.format(
        verbose=VERBOSE_DOC.format(stages='a line per grown level'), explain=EXPLAIN_DOC,
        summary="An end-to-end learned decision tree regressor (greedy growth, then finetuning).",
        em="", loss="the mean squared error of the standardized targets (leaves trained by the optimizer)",
        stratified="", class_weight="", attributes="", cut_score="squared error", cut_leaves="mean targets",
        outputs="the standardized targets; ``predict`` maps them back", cv_score="R^2",
        depth_cap_default='``"cv"``', smoothed="",
        screening_default=repr(REGRESSOR_DEFAULTS["split_screening"]))
