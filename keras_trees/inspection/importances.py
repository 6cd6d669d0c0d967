"""Feature importances for every family.

* :func:`feature_importances` reads a :class:`~keras_trees.forest.Forest` (hard
  routing): ``kind="split_usage"`` (how much the splits use each feature,
  weighted by the samples reaching them) or ``kind="gain"`` (impurity decrease,
  scikit-learn's ``feature_importances_``).
* :func:`routing_sensitivity`: mean ``|d output / d x_j|`` of a soft layer or
  any model (Tree Ensemble Layer, hinge forests: their output depends on the
  input only through routing).
* :func:`permutation_importance`: the drop of a score when one feature is
  shuffled, for anything that predicts.

All return ``(p,)`` NumPy arrays normalized to sum 1 (permutation importance:
raw score drops), in the order of the features; pair them with
:func:`keras_trees.inspection.names.resolve` for names.
"""

import numpy as np

from keras_trees import topology
from keras_trees.forest import class_ids
from keras_trees.api_export import keras_trees_export
from keras_trees.inspection import names as _names
from keras_trees.validation import arguments

KINDS = ("split_usage", "gain")
CRITERIA = ("gini", "entropy", "squared_error")


def _split_shares(forest, x=None):
    """``(T, I, p)``: how each split's test divides among the features (rows sum
    to 1 at splits that read any feature, else 0). Axis-aligned: its feature.
    Linear: ``|w_j|``; noisy-OR: ``sum_k r_k |w_kj|``; both times the standard
    deviation of feature ``j`` over ``x`` when given (a unit-free share)."""
    if forest.split_kind == "axis_aligned":
        shares = np.zeros(forest.feature.shape + (forest.input_dim,))
        np.put_along_axis(shares, forest.feature[..., None], 1.0, axis=-1)
    elif forest.split_kind == "linear":
        shares = np.abs(forest.weights).astype(np.float64)
    else:
        shares = np.einsum("tik,tikp->tip", forest.expert_weights, np.abs(forest.weights)).astype(np.float64)
    if x is not None and forest.split_kind != "axis_aligned":
        shares = shares * forest._rows(x).std(0)
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


def _impurity(stats, criterion, num_targets):
    if criterion == "squared_error":
        mean = np.nan_to_num(stats["target_mean"])
        return (mean[..., num_targets:] - mean[..., :num_targets] ** 2).mean(-1)
    counts = stats["class_counts"].astype(np.float64)
    prob = counts / np.maximum(counts.sum(-1, keepdims=True), 1)
    if criterion == "gini":
        return 1.0 - (prob ** 2).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(prob > 0, prob * np.log2(prob), 0.0).sum(-1)


def _gains(forest, x, y, criterion, num_classes):
    """``(T, I)`` impurity decrease ``n_i imp_i - n_left imp_left - n_right imp_right``
    of each split on ``x, y`` (hard routing)."""
    if criterion is None:
        classes = forest.num_classes is not None or num_classes is not None
        criterion = "gini" if classes else "squared_error"
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    y = _names.as_array(y)
    if criterion == "squared_error":
        if forest.num_classes is not None:
            raise ValueError("criterion='squared_error' needs a forest whose leaves are not class distributions")
        y = np.asarray(y, np.float64).reshape(len(y), -1)
        num_targets = y.shape[1]
        stats = forest.node_statistics(x, np.concatenate([y, y ** 2], 1))  # one routing: mean and mean square
    else:
        num_targets = None
        if num_classes is None and forest.num_classes is None:
            y = class_ids(y, np.inf, "y")  # labels checked before max(y) + 1 classes are assumed
            num_classes = int(y.max()) + 1 if len(y) else 1
        num_classes = forest.num_classes if num_classes is None else num_classes
        stats = forest.node_statistics(x, y, num_classes)
    weighted = stats["samples"] * _impurity(stats, criterion, num_targets)  # (T, N)
    I = topology.num_internal(forest.max_depth)
    i = np.arange(I)
    gains = weighted[:, i] - weighted[:, np.minimum(2 * i + 1, weighted.shape[1] - 1)] \
        - weighted[:, np.minimum(2 * i + 2, weighted.shape[1] - 1)]
    return np.where(topology.is_split_mask(forest.node_state), gains, 0.0)


@keras_trees_export("keras_trees.inspection")
def feature_importances(forest, x=None, y=None, kind="split_usage", criterion=None, num_classes=None):
    """``(p,)`` importance of each feature the splits of ``forest`` read, summing to 1.

    Args:
        forest: a :class:`~keras_trees.forest.Forest`, an exported layer dict,
            a tree layer or a fitted scikit-learn tree.
        x: ``(n, p)`` rows the splits read (``layer.forest_features(inputs)``;
            a pandas DataFrame is fine), routed hard (:meth:`Forest.route`).
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

    Forests: each tree's importances are normalized, then averaged over trees
    (as scikit-learn's random forests); all zeros when no split uses a feature.

    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> x = np.random.default_rng(0).normal(size=(300, 3))
    >>> cart = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, x[:, 1] > 0)
    >>> imp = feature_importances(cart, x, x[:, 1] > 0, kind="gain")
    >>> bool(np.allclose(imp, cart.feature_importances_)), int(imp.argmax())
    (True, 1)
    """
    forest = _names.as_forest(forest)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    x = None if x is None else _names.as_array(x)
    shares = _split_shares(forest, x)
    if kind == "split_usage":
        if x is None:
            weight = topology.is_split_mask(forest.node_state).astype(np.float64)
        else:
            weight = forest.node_statistics(x)["samples"][:, : shares.shape[1]].astype(np.float64)
    else:
        if x is None or y is None:
            raise ValueError("kind='gain' needs samples x and labels y")
        weight = _gains(forest, x, y, criterion, num_classes)
    return _normalized_mean(np.einsum("ti,tip->tp", weight, shares))


def _predict_fn(model, batch_size):
    """``x -> (n, ...)`` NumPy predictions of a Keras model or layer, a Forest,
    anything with ``predict`` or a callable."""
    import keras

    if isinstance(model, keras.Model):
        return lambda x: np.asarray(model.predict(x, verbose=0, batch_size=batch_size))
    if isinstance(model, keras.layers.Layer):
        return lambda x: np.concatenate([np.asarray(keras.ops.convert_to_numpy(model(x[i: i + batch_size])))
                                         for i in range(0, len(x), batch_size)])
    if hasattr(model, "predict"):
        return lambda x: np.asarray(model.predict(x))
    if callable(model):
        return lambda x: np.asarray(model(x))
    raise TypeError(f"model must be a Keras model or layer, have predict, or be callable; got {type(model).__name__}")


@keras_trees_export("keras_trees.inspection")
def routing_sensitivity(model, x, step=1e-3, batch_size=4096):
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
    """
    step = arguments.positive_float("step", step)
    batch_size = arguments.positive_int("batch_size", batch_size)
    x = _numeric_rows(x)
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, p), got {x.shape}")
    predict = _predict_fn(model, batch_size)
    scale = x.std(0)
    h = step * np.where(scale > 0, scale, 1.0)
    sens = np.zeros(x.shape[1])
    for j in range(x.shape[1]):
        both = np.concatenate([x, x])
        both[: len(x), j] += h[j]
        both[len(x):, j] -= h[j]
        out = predict(both).reshape(2, len(x), -1).astype(np.float64)
        sens[j] = np.abs(out[0] - out[1]).mean() / (2 * h[j])
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


def _with_column(x, j, values):
    if _names.is_frame(x):
        x = x.copy()
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
            scikit-learn estimator, a :class:`~keras_trees.forest.Forest`) or a
            callable.
        x: ``(n, p)`` inputs (a pandas DataFrame is shuffled column by column
            and passed on as a DataFrame).
        y: targets.
        metric: ``metric(y, predictions) -> float``, higher is better (pass a
            loss negated). Default: for integer or boolean ``y`` the accuracy
            of the predictions (``argmax`` of ``(n, K)`` scores; labels; one
            score: above 0.5 for values in ``[0, 1]``, else above 0), else R^2.
        n_repeats, seed: shuffles per feature, and their seed.

    Returns:
        A dict (as scikit-learn's ``permutation_importance``):
        ``importances_mean``, ``importances_std`` ``(p,)``, ``importances``
        ``(p, n_repeats)``, the unshuffled ``baseline`` score and
        ``feature_names`` (a DataFrame's columns, else None).

    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeRegressor
    >>> x = np.random.default_rng(0).normal(size=(200, 3))
    >>> r = permutation_importance(DecisionTreeRegressor(max_depth=4).fit(x, x[:, 2]), x, x[:, 2])
    >>> int(np.argmax(r["importances_mean"]))
    2
    """
    metric = _default_metric if metric is None else metric
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
    baseline = float(metric(y, predict(x)))
    rng = np.random.default_rng(seed)
    drops = np.zeros((values.shape[1], n_repeats))
    for j in range(values.shape[1]):
        for r in range(n_repeats):
            shuffled = _with_column(x, j, values[rng.permutation(len(values)), j])
            drops[j, r] = baseline - float(metric(y, predict(shuffled)))
    return {"importances_mean": drops.mean(1), "importances_std": drops.std(1), "importances": drops,
            "baseline": baseline, "feature_names": _names.frame_names(x)}
