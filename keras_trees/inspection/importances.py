"""Feature importances for every family.

* [`feature_importances`][keras_trees.inspection.importances.feature_importances] reads a [`Forest`][keras_trees.forest.Forest] (hard
  routing): ``kind="split_usage"`` (how much the splits use each feature,
  weighted by the samples reaching them) or ``kind="gain"`` (impurity decrease,
  scikit-learn's ``feature_importances_``).
* [`routing_sensitivity`][keras_trees.inspection.importances.routing_sensitivity]: mean ``|d output / d x_j|`` of a soft layer or
  any model (Tree Ensemble Layer, hinge forests: their output depends on the
  input only through routing).
* [`permutation_importance`][keras_trees.inspection.importances.permutation_importance]: the drop of a score when one feature is
  shuffled, for anything that predicts.

All return ``(p,)`` NumPy arrays normalized to sum 1 (permutation importance:
raw score drops), in the order of the features; pair them with
`keras_trees.inspection.names.resolve` for names.

Data: [`feature_importances`][keras_trees.inspection.importances.feature_importances] and [`routing_sensitivity`][keras_trees.inspection.importances.routing_sensitivity] are sums
over samples (node counts, class counts, target sums, feature moments, mean
derivatives): they also take a stream of ``(x, y)`` / ``(x, y,
sample_weight)`` batches (a batched ``tf.data.Dataset``, a
``keras.utils.PyDataset``, a list of batches or a function returning a fresh
iterable of them; `keras_trees.streaming`), accumulated batch by batch
(the data never has to fit in memory) and, in a distributed run, summed over
the workers (each reads its share; every worker must call them). Arrays are
used as given (not split among workers). [`permutation_importance`][keras_trees.inspection.importances.permutation_importance]
shuffles a column across all rows and needs arrays in memory (a stream raises
``TypeError``).
"""

import numpy as np

from keras_trees._arrays import to_numpy
from keras_trees import streaming, topology
from keras_trees.forest import class_ids, node_sums, targets
from keras_trees.api_export import keras_trees_export
from keras_trees.inspection import names as _names
from keras_trees.inspection.export import _is_stream, require_arrays
from keras_trees.validation import arguments

KINDS = ("split_usage", "gain")
CRITERIA = ("gini", "entropy", "squared_error")


def _split_shares(forest, std=None):
    """``(T, I, p)``: how each split's test divides among the features (rows sum
    to 1 at splits that read any feature, else 0). Axis-aligned: its feature.
    Linear: ``|w_j|``; noisy-OR: ``sum_k r_k |w_kj|``; both times ``std``, the
    ``(p,)`` standard deviations of the features over the data, when given (a
    unit-free share)."""
    if forest.split_kind == "axis_aligned":
        shares = np.zeros(forest.feature.shape + (forest.input_dim,))
        np.put_along_axis(shares, forest.feature[..., None], 1.0, axis=-1)
    elif forest.split_kind == "linear":
        shares = np.abs(forest.weights).astype(np.float64)
    else:
        shares = np.einsum("tik,tikp->tip", forest.expert_weights, np.abs(forest.weights)).astype(np.float64)
    if std is not None and forest.split_kind != "axis_aligned":
        shares = shares * std
    shares *= topology.is_split_mask(forest.node_state)[..., None]
    total = shares.sum(-1, keepdims=True)
    return np.divide(shares, total, out=np.zeros_like(shares), where=total > 0)


def _normalized_mean(per_tree):
    """Mean over trees of each tree's ``(p,)`` row normalized to sum 1 (trees
    whose row sums to 0 are left out), as scikit-learn's forests do."""
    total = per_tree.sum(-1, keepdims=True)
    used = total[:, 0] != 0
    if not used.any():
        return np.zeros(per_tree.shape[-1])
    return (per_tree[used] / total[used]).mean(0)


def _impurity(stats, criterion):
    """``(T, N)`` impurity of every node from its (weighted) sums."""
    if criterion == "squared_error":
        sums, count = stats["target_sums"], stats["samples"][..., None]
        u = sums.shape[-1] // 2
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.nan_to_num(sums / count)
        return (mean[..., u:] - mean[..., :u] ** 2).mean(-1)
    counts = stats["class_counts"]
    total = counts.sum(-1, keepdims=True)
    prob = np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)
    if criterion == "gini":
        return np.where(total[..., 0] > 0, 1.0 - (prob ** 2).sum(-1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(prob > 0, prob * np.log2(prob), 0.0).sum(-1)


def _criterion(forest, criterion, num_classes):
    if criterion is None:
        classes = forest.num_classes is not None or num_classes is not None
        criterion = "gini" if classes else "squared_error"
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if criterion == "squared_error" and forest.num_classes is not None:
        raise ValueError("criterion='squared_error' needs a forest whose leaves are not class distributions")
    return criterion


def _gains(forest, stats, criterion):
    """``(T, I)`` impurity decrease ``n_i imp_i - n_left imp_left - n_right imp_right``
    of each split (``n``: the weighted samples reaching a node, hard routing)."""
    weighted = stats["samples"] * _impurity(stats, criterion)  # (T, N)
    I = topology.num_internal(forest.max_depth)
    i = np.arange(I)
    gains = weighted[:, i] - weighted[:, np.minimum(2 * i + 1, weighted.shape[1] - 1)] \
        - weighted[:, np.minimum(2 * i + 2, weighted.shape[1] - 1)]
    return np.where(topology.is_split_mask(forest.node_state), gains, 0.0)


class _Moments:
    """Weighted count, mean and sum of squared deviations of ``(p,)`` rows,
    merged batch by batch (Chan et al.'s pairwise update: no cancellation of
    a sum of squares against a squared sum)."""

    def __init__(self, p):
        self.n, self.mean, self.m2 = 0.0, np.zeros(p), np.zeros(p)

    def add(self, rows, w=None):
        if w is None:
            nb = float(len(rows))
            if nb == 0:
                return
            mb = rows.mean(0)
            m2b = ((rows - mb) ** 2).sum(0)
        else:
            nb = float(w.sum())
            if nb <= 0:
                return
            mb = (w[:, None] * rows).sum(0) / nb
            m2b = (w[:, None] * (rows - mb) ** 2).sum(0)
        self.merge(nb, mb, m2b)

    def merge(self, nb, mb, m2b):
        if nb <= 0:
            return
        n = self.n + nb
        d = mb - self.mean
        self.mean = self.mean + d * (nb / n)
        self.m2 = self.m2 + m2b + d * d * (self.n * nb / n)
        self.n = n

    def stacked(self, num_workers, index):
        """``(num_workers, 1 + 2p)``: this worker's row filled, the others 0 (summed
        over the workers, every worker then holds every worker's moments)."""
        out = np.zeros((num_workers, 1 + 2 * len(self.mean)))
        out[index] = np.concatenate([[self.n], self.mean, self.m2])
        return out

    @classmethod
    def std_of(cls, stacked):
        """The standard deviations (``ddof=0``) of the workers' rows together,
        merged in worker order (the same result on every worker)."""
        p = (stacked.shape[1] - 1) // 2
        total = cls(p)
        for row in stacked:
            total.merge(row[0], row[1:1 + p], row[1 + p:])
        return np.sqrt(np.maximum(total.m2, 0.0) / total.n) if total.n > 0 else np.zeros(p)


def _largest(width, num_workers, index, reduce):
    """The largest ``width`` over the workers (a worker without data says 0)."""
    stack = np.zeros(num_workers)
    stack[index] = width
    return int(round(float(reduce([stack])[0].max())))


def _weights(sample_weight, n, where):
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, np.float64)
    if w.ndim == 2 and w.shape[1] == 1:
        w = w[:, 0]
    if w.shape != (n,):
        raise ValueError(f"{where}: sample_weight must have shape ({n},), got {w.shape}")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise ValueError(f"{where}: sample_weight must be finite and nonnegative")
    return w


def _data(x, y, sample_weight, where, model=None):
    """``(batches, reduce, (num_workers, worker_index))``: the ``(x, y, w)``
    batches of arrays (one batch: as given, every worker uses all of it) or of
    a stream (this worker's share, summed over workers by ``reduce``)."""
    if _is_stream(x):
        if y is not None or sample_weight is not None:
            raise ValueError(f"{where}: x is a stream of (x, y[, sample_weight]) batches: its labels and "
                             "weights are in the batches; y and sample_weight must be None")
        data = streaming.stream(x, name=where, model=model)
        return data, lambda arrays: streaming.all_reduce_sum(arrays, model=model), \
            (data.num_workers, data.worker_index)
    x = _names.as_array(x)
    if np.ndim(x) == 0:
        raise ValueError(f"{where}: x must be samples (n, p), got a scalar")
    y = None if y is None else _names.as_array(y)
    return [(x, y, _weights(sample_weight, len(x), where))], lambda arrays: arrays, (1, 0)


def _forest_sums(forest, batches, reduce, workers, kind, criterion, num_classes, moments):
    """The sums [`feature_importances`][keras_trees.inspection.importances.feature_importances] needs, accumulated batch by batch
    and summed over the workers: ``samples`` ``(T, N)`` weighted node counts,
    with ``kind="gain"`` ``class_counts`` ``(T, N, K)`` or ``target_sums``
    ``(T, N, 2U)`` (targets and their squares), with ``moments`` ``std``."""
    where = "feature_importances"
    N = forest.node_state.shape[1]
    T = forest.num_trees
    gain = kind == "gain"
    classes = gain and criterion != "squared_error"
    K = (num_classes if num_classes is not None else forest.num_classes) if classes else None
    samples = np.zeros((T, N))
    labels = None  # (T, N, K) class counts or (T, N, 2U) target sums; K or U grow when not known
    mom = _Moments(forest.input_dim) if moments else None
    for xb, yb, wb in batches:
        rows = forest._rows(xb)
        n = len(rows)
        if n == 0:
            continue
        leaf = forest.route(rows)
        samples += node_sums(leaf, np.ones(n), N, weights=wb, subtrees=True)[..., 0]
        if mom is not None:
            mom.add(rows, wb)
        if not gain:
            continue
        if yb is None:
            raise ValueError("kind='gain' needs samples x and labels y")
        if classes:
            ids = class_ids(yb, np.inf if K is None else K, "y")
            if len(ids) != n:
                raise ValueError(f"{where}: x has {n} samples but y has {len(ids)}")
            width = max(K or 0, int(ids.max()) + 1, 0 if labels is None else labels.shape[-1])
            values = np.zeros((n, width))
            values[np.arange(n), ids] = 1.0
        else:
            t = targets(yb, n, "y")
            values = np.concatenate([t, t ** 2], 1)
            if labels is not None and labels.shape[-1] != values.shape[1]:
                raise ValueError(f"{where}: the targets of the batches differ in shape")
        sums = node_sums(leaf, values, N, weights=wb, subtrees=True)
        if labels is not None and labels.shape[-1] < sums.shape[-1]:  # a class seen first in this batch
            labels = np.concatenate([labels, np.zeros(labels.shape[:-1] + (sums.shape[-1] - labels.shape[-1],))], -1)
        labels = sums if labels is None else labels + sums
    arrays = [samples]
    if gain:
        width = 0 if labels is None else labels.shape[-1]
        if classes and K is not None:
            total_width = K
        else:  # classes inferred (max(y) + 1 over all workers) or the targets' width
            total_width = _largest(width, *workers, reduce)
        mismatch = labels is not None and not classes and width != total_width
        if labels is None or width < total_width:
            labels = np.zeros((T, N, total_width)) if labels is None else \
                np.concatenate([labels, np.zeros((T, N, total_width - width))], -1)
        if mismatch:
            labels = np.zeros((T, N, total_width))
        arrays += [labels, np.array([float(mismatch)])]
    if mom is not None:
        arrays.append(mom.stacked(*workers))
    arrays = list(reduce(arrays))
    stats = {"samples": arrays.pop(0)}
    if gain:
        labels, mismatch = arrays.pop(0), arrays.pop(0)
        if mismatch[0] > 0:
            raise ValueError(f"{where}: the targets of the workers' batches differ in shape")
        stats["class_counts" if classes else "target_sums"] = labels
    if mom is not None:
        stats["std"] = _Moments.std_of(arrays.pop(0))
    return stats


@keras_trees_export("keras_trees.inspection")
def feature_importances(forest, x=None, y=None, kind="split_usage", criterion=None, num_classes=None,
                        sample_weight=None):
    """``(p,)`` importance of each feature the splits of ``forest`` read, summing to 1.

    Args:
        forest: a [`Forest`][keras_trees.forest.Forest], an exported layer dict,
            a tree layer or a fitted scikit-learn tree.
        x: ``(n, p)`` rows the splits read (``layer.forest_features(inputs)``;
            a pandas DataFrame is fine), routed hard ([`Forest.route`][keras_trees.forest.Forest.route]);
            or a stream of ``(x, y)`` / ``(x, y, sample_weight)`` batches of
            such rows (``y`` and ``sample_weight`` None then; see the module
            documentation): the node counts, label sums and feature moments
            are summed batch by batch and over the workers, giving the
            importances of the arrays holding all the batches.
        y: labels for ``kind="gain"``: class ids or regression targets.
        kind: ``"split_usage"``: each split adds the samples of ``x`` reaching
            it (1 per split without ``x``), shared among features as the split
            reads them: all to its feature for axis-aligned splits; by
            ``|w_j| * std(x_j)`` for oblique (linear) splits and by
            ``sum_k r_k |w_kj| * std(x_j)`` for noisy-OR splits (``|w_j|``
            alone without ``x``). ``"gain"``: each split adds its impurity
            decrease ``n_i imp_i - n_left imp_left - n_right imp_right`` on
            ``x, y``, shared the same way: scikit-learn's
            ``feature_importances_`` when ``x, y`` are its training data. On
            other data a decrease can be negative.
        criterion: ``"gini"`` (default for classes), ``"entropy"`` or
            ``"squared_error"`` (default for regression: variance, averaged
            over targets).
        num_classes: classes of ``y``; default the forest's, else ``max(y) + 1``.
        sample_weight: optional ``(n,)`` nonnegative weights of array ``x``
            (a stream carries them in its batches): every sample counts with
            its weight (node counts, class counts, targets, the standard
            deviations), as scikit-learn's ``feature_importances_`` of a tree
            fitted with these weights.

    Forests: each tree's importances are normalized, then averaged over trees
    (as scikit-learn's random forests); all zeros when no split uses a feature.

    A fitted keras-trees estimator: the importances of its ``forest_`` summed
    over the design columns of each input column (one-hot columns into their
    categorical, a missing-value indicator into its column), ``(n_features_in_,)``
    in the order of ``feature_names_in_``; without ``x`` its
    ``feature_importances_`` (split usage on its training rows); ``x`` and ``y``
    are then what its ``fit`` takes (any label type), in memory.

    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> x = np.random.default_rng(0).normal(size=(300, 3))
    >>> cart = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, x[:, 1] > 0)
    >>> imp = feature_importances(cart, x, x[:, 1] > 0, kind="gain")
    >>> bool(np.allclose(imp, cart.feature_importances_)), int(imp.argmax())
    (True, 1)
    """
    if _names.is_estimator(forest):
        return _estimator_importances(forest, x, y, kind, criterion, num_classes, sample_weight)
    forest = _names.as_forest(forest)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if x is None:
        if kind == "gain":
            raise ValueError("kind='gain' needs samples x and labels y")
        if sample_weight is not None:
            raise ValueError("feature_importances: sample_weight needs samples x")
        weight = topology.is_split_mask(forest.node_state).astype(np.float64)
        return _normalized_mean(np.einsum("ti,tip->tp", weight, _split_shares(forest)))
    if kind == "gain":
        criterion = _criterion(forest, criterion, num_classes)
        if y is None and not _is_stream(x):
            raise ValueError("kind='gain' needs samples x and labels y")
    batches, reduce, workers = _data(x, y, sample_weight, "feature_importances")
    stats = _forest_sums(forest, batches, reduce, workers, kind, criterion, num_classes,
                         moments=forest.split_kind != "axis_aligned")
    if workers != (1, 0) or not isinstance(batches, list):
        if stats["samples"][:, 0].sum() <= 0:
            raise ValueError("feature_importances: the data is empty (no sample of positive weight)")
    shares = _split_shares(forest, stats.get("std"))
    if kind == "split_usage":
        weight = stats["samples"][:, : shares.shape[1]]
    else:
        weight = _gains(forest, stats, criterion)
    return _normalized_mean(np.einsum("ti,tip->tp", weight, shares))


def _estimator_importances(estimator, x, y, kind, criterion, num_classes, sample_weight):
    """[`feature_importances`][keras_trees.inspection.importances.feature_importances] of a fitted keras-trees estimator, per input column."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if num_classes is not None:
        raise ValueError("feature_importances: num_classes is the estimator's (classes_); pass None")
    if x is None:
        if kind == "gain":
            raise ValueError("kind='gain' needs samples x and labels y")
        if sample_weight is not None:
            raise ValueError("feature_importances: sample_weight needs samples x")
        return estimator.feature_importances_
    if kind == "gain" and y is None:
        raise ValueError("kind='gain' needs samples x and labels y")
    forest, rows = _names.from_estimator(estimator, x, None, "feature_importances")
    if kind == "gain":
        criterion = _criterion(forest, criterion, len(estimator.classes_)
                               if estimator._task == "classification" else None)
    return estimator._importances_on(rows, _names.estimator_labels(estimator, y), sample_weight, kind=kind,
                                     criterion=criterion, aggregate=True, forest=forest)


def _predict_fn(model, batch_size):
    """``x -> (n, ...)`` NumPy predictions of a Keras model or layer, a Forest,
    anything with ``predict`` or a callable."""
    import keras

    if isinstance(model, keras.Model):
        return lambda x: np.asarray(model.predict(x, verbose=0, batch_size=batch_size))
    if isinstance(model, keras.layers.Layer):
        return lambda x: np.concatenate([to_numpy(model(x[i: i + batch_size]))
                                         for i in range(0, len(x), batch_size)])
    if hasattr(model, "predict"):
        return lambda x: np.asarray(model.predict(x))
    if callable(model):
        return lambda x: np.asarray(model(x))
    raise TypeError(f"model must be a Keras model or layer, have predict, or be callable; got {type(model).__name__}")


@keras_trees_export("keras_trees.inspection")
def routing_sensitivity(model, x, step=1e-3, batch_size=4096, sample_weight=None):
    """``(p,)`` mean ``|d output / d x_j|`` over samples and outputs, normalized to sum 1.

    For the soft families, the Tree Ensemble Layer and hinge forests / ferns,
    the output depends on an input only through routing (probabilities, or
    the margin ``|r*|``), so this measures how strongly each feature moves the
    routing. Derivatives are central finite differences
    ``(f(x + h e_j) - f(x - h e_j)) / 2h`` with ``h = step * std(x_j)`` (``step``
    where the feature is constant), through the model's own forward pass: any
    Keras backend, any model, layer or callable (2 passes over ``x`` per
    feature). ``x`` is what ``model`` takes (a DataFrame is fine), ``(n, p)``.
    All zeros when the output does not move (a hard tree off its thresholds).

    ``x`` may also be a stream of ``(x, y)`` / ``(x, y, sample_weight)``
    batches (the labels are not used; see the module documentation): it is
    read twice (the standard deviations, then the derivatives), summed batch
    by batch and over the workers, so it must be re-iterable (not a
    generator). ``sample_weight``: optional ``(n,)`` nonnegative weights of
    array ``x`` (a stream carries them in its batches) for the means and the
    standard deviations.
    """
    import keras

    step = arguments.positive_float("step", step)
    batch_size = arguments.positive_int("batch_size", batch_size)
    where = "routing_sensitivity"
    streamed = _is_stream(x)
    if not streamed:
        x = _numeric_rows(x)
        if x.ndim != 2:
            raise ValueError(f"x must have shape (n, p), got {x.shape}")
    predict = _predict_fn(model, batch_size)
    batches, reduce, workers = _data(x, None, sample_weight, where,
                                     model=model if isinstance(model, keras.Model) else None)

    def rows_of(xb):
        rows = _numeric_rows(xb)
        if rows.ndim != 2:
            raise ValueError(f"x must have shape (n, p), got {rows.shape}")
        return rows

    # Pass 1: the (weighted) standard deviation of every feature.
    mom, p = None, 0
    for xb, _, wb in batches:
        rows = rows_of(xb)
        if mom is None:
            mom, p = _Moments(rows.shape[1]), rows.shape[1]
        elif rows.shape[1] != p:
            raise ValueError(f"{where}: the batches differ in their number of features ({p} and {rows.shape[1]})")
        mom.add(rows.astype(np.float64), wb)
    if streamed:
        p_all = _largest(p, *workers, reduce)
        mismatch = p not in (0, p_all)
        if mom is None or mismatch:
            mom = _Moments(p_all)
        stacked, flag = reduce([mom.stacked(*workers), np.array([float(mismatch)])])
        if flag[0] > 0:
            raise ValueError(f"{where}: the workers' batches differ in their number of features")
        p = p_all
        scale = _Moments.std_of(stacked)
    else:
        scale = np.sqrt(np.maximum(mom.m2, 0.0) / mom.n) if mom.n > 0 else np.zeros(p)
    h = step * np.where(scale > 0, scale, 1.0)
    # Pass 2: the (weighted) sums over samples of the mean |f(x + h e_j) - f(x - h e_j)| over outputs.
    sums, total = np.zeros(p), 0.0
    for xb, _, wb in batches:
        rows = rows_of(xb)
        n = len(rows)
        if n == 0:
            continue
        if rows.shape[1] != p:
            raise ValueError(f"{where}: the batches differ in their number of features ({p} and {rows.shape[1]})")
        for j in range(p):
            both = np.concatenate([rows, rows])
            both[:n, j] += h[j]
            both[n:, j] -= h[j]
            out = predict(both).reshape(2, n, -1).astype(np.float64)
            per_sample = np.abs(out[0] - out[1]).mean(1)
            sums[j] += per_sample.sum() if wb is None else (wb * per_sample).sum()
        total += n if wb is None else float(wb.sum())
    sums, total = reduce([sums, np.array([total])])
    if total[0] <= 0:
        raise ValueError(f"{where}: the data is empty (no sample of positive weight)")
    sens = sums / total[0] / (2 * h)
    total = sens.sum()
    return sens / total if total > 0 else sens


def _numeric_rows(x):
    x = _names.as_array(x)
    if x.dtype.kind not in "biuf":
        raise TypeError(f"x must be real numbers, got dtype {x.dtype}")
    return x.astype(np.float32)


def _default_metric(y, pred):
    """Accuracy for class labels (integer or boolean ``y``), else R^2."""
    y = np.asarray(y)
    pred = np.asarray(pred)
    pred = pred.reshape(len(pred), -1)
    if y.dtype.kind in "biu" and y.reshape(len(y), -1).shape[1] == 1:
        if pred.shape[1] > 1:  # class scores
            guess = pred.argmax(1)
        elif np.all(pred == np.round(pred)):  # class labels
            guess = pred[:, 0]
        else:  # one score of the positive class: a probability, or a logit
            guess = pred[:, 0] > (0.5 if pred.min() >= 0 and pred.max() <= 1 else 0.0)
        return float((guess == y.reshape(-1)).mean())
    y = y.reshape(len(y), -1).astype(np.float64)
    pred = pred.astype(np.float64)
    return float(1.0 - ((y - pred) ** 2).sum() / max(((y - y.mean(0)) ** 2).sum(), 1e-300))


def _with_column(x, j, values, order=None):
    """``x`` with column ``j`` replaced by ``values``; a DataFrame takes its own
    column in ``order`` instead (keeping the column's dtype: categoricals,
    strings, booleans)."""
    if _names.is_frame(x):
        x = x.copy()
        if order is not None:
            column = x.iloc[order, j]
            column.index = x.index
            x.isetitem(j, column)
        else:
            x.iloc[:, j] = values
        return x
    x = x.copy()
    x[:, j] = values
    return x


@keras_trees_export("keras_trees.inspection")
def permutation_importance(model, x, y, metric=None, n_repeats=5, seed=0, batch_size=4096):
    """Drop of ``metric`` when feature ``j`` of ``x`` is shuffled, for any model.

    Args:
        model: a Keras model or layer, anything with ``predict(x)`` (a
            scikit-learn estimator, a [`Forest`][keras_trees.forest.Forest]) or a
            callable. A fitted keras-trees estimator shuffles its input columns
            (a categorical column as a whole) and scores with its own loss
            by default, negated: the log loss of ``predict_proba`` (any label
            type) for a classifier, the mean squared error for a regressor.
        x: ``(n, p)`` inputs (a pandas DataFrame is shuffled column by column,
            each column keeping its dtype, and passed on as a DataFrame).
        y: targets.
        metric: ``metric(y, predictions) -> float``, higher is better (pass a
            loss negated). Default: for integer or boolean ``y`` the accuracy
            of the predictions (``argmax`` of ``(n, K)`` scores; labels; one
            score: above 0.5 for values in ``[0, 1]``, else above 0), else R^2.
        n_repeats, seed: shuffles per feature, and their seed.

    Needs arrays in memory: a column is shuffled across all rows, so a stream
    of batches raises ``TypeError``.

    Returns:
        A dict (as scikit-learn's ``permutation_importance``):
        ``importances_mean``, ``importances_std`` ``(p,)``, ``importances``
        ``(p, n_repeats)``, the unshuffled ``baseline`` score and
        ``feature_names`` (a DataFrame's columns, else an estimator's
        ``feature_names_in_``, else None).

    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeRegressor
    >>> x = np.random.default_rng(0).normal(size=(200, 3))
    >>> r = permutation_importance(DecisionTreeRegressor(max_depth=4).fit(x, x[:, 2]), x, x[:, 2])
    >>> int(np.argmax(r["importances_mean"]))
    2
    """
    require_arrays(x, "x", "permutation_importance",
                   "it shuffles a feature's column across all rows (not a sum over samples)")
    estimator = _names.is_estimator(model)
    own_loss = metric is None and estimator
    if metric is None:
        metric = _estimator_metric(model) if estimator else _default_metric
    if not callable(metric):
        raise TypeError(f"metric must be a function metric(y, predictions) -> float, got {type(metric).__name__}")
    n_repeats = arguments.positive_int("n_repeats", n_repeats)
    batch_size = arguments.positive_int("batch_size", batch_size)
    frame = _names.is_frame(x)
    values = _names.as_array(x)
    if not frame:
        x = values
    if values.ndim != 2:
        raise ValueError(f"x must have shape (n, p), got {values.shape}")
    if np.ndim(y) == 0 or len(y) != len(values):
        raise ValueError(f"y must have one entry per sample of x ({len(values)}), got shape {np.shape(y)}")
    predict = _predict_fn(model, batch_size)
    if own_loss and model._task == "classification":
        predict = lambda rows: np.asarray(model.predict_proba(rows))  # noqa: E731 (the log loss reads probabilities)
    baseline = float(metric(y, predict(x)))
    rng = np.random.default_rng(seed)
    drops = np.zeros((values.shape[1], n_repeats))
    for j in range(values.shape[1]):
        for r in range(n_repeats):
            order = rng.permutation(len(values))
            shuffled = _with_column(x, j, values[order, j], order if estimator else None)
            drops[j, r] = baseline - float(metric(y, predict(shuffled)))
    names = _names.frame_names(x)
    if names is None and estimator and hasattr(model, "feature_names_in_"):
        names = [str(n) for n in model.feature_names_in_]
    return {"importances_mean": drops.mean(1), "importances_std": drops.std(1), "importances": drops,
            "baseline": baseline, "feature_names": names}


def _estimator_metric(estimator):
    """An estimator's own loss, negated (higher is better): the log loss of its
    ``predict_proba`` (any label type, the classes of ``fit``) for a classifier,
    the mean squared error of ``predict`` for a regressor. Unlike accuracy, the
    loss moves when a column that shifts the probabilities is shuffled, also
    on an imbalanced set whose predicted classes are all the majority."""
    from sklearn.metrics import log_loss, mean_squared_error

    if estimator._task == "classification":
        classes = estimator.classes_
        return lambda y, proba: -log_loss(y, np.clip(proba, 1e-15, 1.0), labels=classes)
    return lambda y, pred: -mean_squared_error(y, pred)
