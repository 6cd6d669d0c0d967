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
    _outputs,
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
    min_frequency=None, max_categories=64, code_indicators=None, random_state=None, verbose=0, n_jobs=None, depth_cap=None,
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
# Hard and soft predictions of an annealed tree agree; where the softly routed
# regressor validates at half the squared error of the hard one or better, its
# splits were not annealed far enough and it ships routed softly (said in the
# verbose summary and history_["routing"]).
SOFT_ROUTING_RATIO = 0.5
REGRESSOR_DEFAULTS = {**DEFAULTS, "min_samples_split": 20, "depth_cap": "cv"}

_DOC = """{summary}

    The model is one [`keras_trees.layers.EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree] on the
    preprocessed features (imputed with missing-value indicators, scaled,
    categoricals one-hot encoded; oblique splits on all of them), trained
    inside ``model.fit`` with [`keras_trees.callbacks.GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth]
    (level by level from a root stump, ``epochs_per_level`` epochs per level,
    then ``finetune_epochs`` of joint finetuning; default 3 x
    ``epochs_per_level``), {em}[`keras_trees.callbacks.SteepnessAnnealing`][keras_trees.callbacks.steepness_annealing.SteepnessAnnealing]
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


class _ShippedValidation(keras.callbacks.Callback):
    """Replaces each scored epoch's validation loss (``monitor``) by the loss of
    the tree as the estimator would return it now (``score(model) -> (error,
    loss)``: hard routing, leaves fitted to the training rows), so that early
    stopping chooses the epoch on the predictions ``predict`` makes."""

    def __init__(self, score, monitor):
        super().__init__()
        self.score, self.monitor = score, monitor

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self.monitor in logs and np.isfinite(float(logs[self.monitor])):
            logs[self.monitor] = float(self.score(self.model)[1])


def _growth(callbacks):
    return next(c for c in callbacks if isinstance(c, GreedyLevelGrowth))


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
        validation = getattr(self, "_fit_validation", None)
        if early_stopping is not None and validation is not None:
            # First, right after the validation scores: every reader of the
            # logs (growth's lines, early stopping, history_) sees the score of
            # the tree as it would be returned.
            callbacks.insert(0, _ShippedValidation(
                lambda model: self._shipped_score(model.layers[-1], x, y, sample_weight, validation),
                self._monitor))
        if self._task == "classification":
            callbacks.append(EMLeafUpdate(x, y, sample_weight=sample_weight))
        return callbacks + [SteepnessAnnealing(self.annealing_increment)]

    def _epochs(self, callbacks):
        return _growth(callbacks).max_epochs(self.max_depth)

    def _validation_needed(self, callbacks):
        """Growth's [`GreedyLevelGrowth.may_end_growth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth.may_end_growth]: early stopping
        reads the validation loss from the epoch that ends growth on
        (`_FinetuneEarlyStopping`), so the epochs inside a level are not
        scored (their ``val_*`` entries in ``history_`` are NaN). On 5,000 x 20
        about 120 of a fit's 130 epochs are growth epochs."""
        return _growth(callbacks).may_end_growth

    def _fit_model(self, model, x, y, sample_weight, validation):
        history = super()._fit_model(model, x, y, sample_weight, validation)
        tree = model.layers[-1]
        if validation is not None:
            self._soft_trained = (
                self._score_outputs(_soft_outputs(tree, validation[0]), *validation[1:]),
                (np.array(to_numpy(tree.node_state)), tree.leaves_numpy()[0].copy()))
            self.depth_cap_ = (self.max_depth if self.depth_cap is None else
                               cv_cart_depth(self._task, x, y, sample_weight, self.max_depth, self._seed))
            history["depth_scores"], history["depth"] = self._select_depth(
                tree, x, y, sample_weight, validation, self.depth_cap_)
            history["routing"] = self._select_routing(model, x, y, sample_weight, validation, history)
            self.__dict__.pop("_soft_trained", None)
        else:
            self.__dict__.pop("depth_cap_", None)
            if self._task == "regression":
                self._set_shipped_leaves(tree, x, y, sample_weight)
        if self._task == "classification" and tree.inference_routing == "hard":
            rows = [(x, y, sample_weight)] + ([validation] if validation is not None else [])
            self._smoothed_leaves(tree, *(np.concatenate(part) for part in zip(*rows)))
        return history

    # GreedyLevelGrowth prints a line per grown level; progress lines come by time only.
    _progress_by_epochs = False

    def _worse_than_constant_advice(self):
        return ("more annealing before the tree is shipped (a larger annealing_increment, more "
                "epochs_per_level or finetune_epochs), a smaller learning_rate, a larger validation part "
                "(validation_fraction or eval_set)")

    def _leaf_table(self, tree, leaves, reached, y, w, depth):
        """The leaf values the tree cut at ``depth`` ships, indexed by heap
        position: every leaf that training rows reach (``reached``: their
        leaves in the uncut tree) holds their smoothed class frequencies
        (`_smoothed_leaves`' formula, training rows only) or their mean
        target; leaves no row reaches keep their trained ``leaves``. These are
        the values ``predict`` routes to, so the depth and the epoch are
        chosen on the predictions the estimator returns."""
        values = leaves.copy()
        at = topology.ancestor_at_depth(reached, depth)
        w = np.asarray(w, dtype=np.float64)
        weight = np.bincount(at, weights=w, minlength=len(values))
        stats = np.zeros_like(values)
        if self._task == "classification":
            w = w * (len(w) / max(w.sum(), 1e-300))
            np.add.at(stats, (at, np.asarray(y)), w)
            total = stats.sum(-1, keepdims=True)
            stats = (stats + LEAF_PSEUDO_ROWS / values.shape[-1]) / (total + LEAF_PSEUDO_ROWS)
        else:
            np.add.at(stats, at, w[:, None] * np.asarray(y).reshape(len(y), -1))
            stats /= np.maximum(weight, 1e-300)[:, None]
        values[weight > 0] = stats[weight > 0]
        return values

    def _shipped_score(self, tree, x, y, sample_weight, validation):
        """The validation `_score_outputs` of the tree as it would be
        shipped now (hard routing, leaves from the training rows; a
        regressor's trained leaves too, the better of the two)."""
        leaves = tree.leaves_numpy()[0]
        reached, reached_val = _route(tree, x), _route(tree, validation[0])
        full = topology.tree_depth(to_numpy(tree.node_state), 0)
        score = self._score_outputs(self._leaf_table(tree, leaves, reached, y, sample_weight, full)[reached_val],
                                    *validation[1:])
        if self._task == "regression":
            score = min(score, self._score_outputs(leaves[reached_val], *validation[1:]))
        return score

    def _set_shipped_leaves(self, tree, x, y, sample_weight):
        """A regressor without validation data: the reached leaves become the mean
        targets of the training rows routed to them (what hard routing predicts best on them)."""
        depth = topology.tree_depth(to_numpy(tree.node_state), 0)
        tree.set_leaf_values(self._leaf_table(tree, tree.leaves_numpy()[0], _route(tree, x), y, sample_weight,
                                              depth)[None])

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
        depth = topology.tree_depth(to_numpy(tree.node_state), 0)
        tree.set_leaf_values(self._leaf_table(tree, leaves, _route(tree, x), y, sample_weight, depth)[None])

    def _select_depth(self, tree, x, y, sample_weight, validation, cap=None):
        """Cuts the trained tree back to the depth with the best validation score
        (`_score_outputs`: error, then log loss; the squared error of a
        regressor; ties: the deeper tree), never to the root of a tree that
        has a split (``CUT_MIN_DEPTH``) and at most to depth ``cap``. Each
        depth is scored with the leaves it ships (`_leaf_table`: the
        training rows' smoothed class frequencies or mean targets; a
        regressor also with its trained leaves below the cut, the better of
        the two). Returns the scores per depth and the chosen depth."""
        state = to_numpy(tree.node_state)
        leaves = tree.leaves_numpy()[0]
        reached, reached_val = _route(tree, x), _route(tree, validation[0])

        def trained(depth):
            """A regressor's trained leaves, mean targets only on the cut level."""
            values = leaves.copy()
            cut = [n for n in topology.splits(state, 0) if topology.position_depth(n) == depth]
            if cut:
                means = self._leaf_table(tree, leaves, reached, y, sample_weight, depth)
                values[cut] = means[cut]
            return values

        full = topology.tree_depth(state, 0)
        tables, scores = {}, {}
        for d in range(full + 1):
            options = [self._leaf_table(tree, leaves, reached, y, sample_weight, d)]
            if self._task == "regression":
                options.append(trained(d))
            rated = [(self._score_outputs(t[topology.ancestor_at_depth(reached_val, d)], *validation[1:]), -i, t)
                     for i, t in enumerate(options)]
            score, _, tables[d] = min(rated, key=lambda r: (r[0], r[1]))
            scores[d] = score
        deepest = full if cap is None else min(cap, full)
        best = min(range(min(CUT_MIN_DEPTH, deepest), deepest + 1), key=lambda d: (scores[d], -d))
        leaves_kept = len(topology.leaves(topology.cut_at_depth(state, 0, best), 0))
        self._say(f"validation kept depth {best} of the {full} grown ({leaves_kept} leaves), validation "
                  f"{'error' if self._task == 'classification' else 'squared error'} {scores[best][0]:.4g}"
                  + (f" (the deepest allowed: depth_cap {cap})" if cap is not None and cap < full else ""))
        if best < full:
            tree.node_state.assign(topology.cut_at_depth(state, 0, best))
        tree.set_leaf_values(tables[best][None])
        return {d: list(score) for d, score in scores.items()}, best

    def _select_routing(self, model, x, y, sample_weight, validation, history):
        """``"hard"`` (the default: one path per row, the tree read as a tree), or
        ``"soft"`` where the trained tree routed softly (the predictor training
        optimized, before the cut) validates clearly better than the cut hard
        tree: a regressor's squared error at most ``SOFT_ROUTING_RATIO`` times
        the hard tree's, or (any task) the hard tree worse than the constant
        prediction and the soft one better than both. A barely annealed split
        is a smooth function that, snapped to two leaves, can fit worse than
        the mean. The layer's ``inference_routing`` is set accordingly, so
        ``predict`` returns what was validated."""
        tree = model.layers[-1]
        soft = getattr(self, "_soft_trained", None)
        if soft is None:
            return tree.inference_routing
        hard = self._score_outputs(_outputs(model, validation[0]), *validation[1:])
        constant = self._constant_score(y, sample_weight, validation)
        # A regressor's soft tree that halves the hard tree's squared error was
        # not annealed far enough to be read as a tree.
        mismatch = self._task == "regression" and soft[0][1] <= SOFT_ROUTING_RATIO * hard[1]
        if mismatch or (hard[1] > constant[1] and soft[0][1] < min(hard[1], constant[1])):
            state, leaves = soft[1]
            tree.node_state.assign(state)
            tree.set_leaf_values(leaves[None])
            tree.inference_routing = "soft"
            self._say(f"the tree routed hard validates at loss {hard[1]:.4g} (constant prediction "
                      f"{constant[1]:.4g}), routed softly at {soft[0][1]:.4g}: its splits were not annealed "
                      "far enough to be read as a tree, so predictions route softly (inference_routing='soft'; "
                      "a larger annealing_increment or more epochs give a hard tree)")
            history["depth"] = topology.tree_depth(state, 0)
        return tree.inference_routing


def _soft_outputs(tree, x):
    """The tree's softly routed outputs on ``x`` (the predictor training optimizes), in batches."""
    parts = [np.asarray(to_numpy(tree(x[i:i + _PREDICT_BATCH], training=False, routing="soft")))
             for i in range(0, len(x), _PREDICT_BATCH)]
    return np.concatenate(parts)


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
        em="[`keras_trees.callbacks.EMLeafUpdate`][keras_trees.callbacks.em_leaf_update.EMLeafUpdate] (closed-form leaf distributions), ",
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
