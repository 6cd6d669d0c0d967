"""Split screening for greedily grown end-to-end trees (``split_screening``).

A new stump of :class:`keras_trees.layers.EndToEndTree` reads every feature
(the paper's oblique split). With ``split_screening=r`` it reads only the
features whose best single threshold, searched exactly on the training rows
that reach the stump, gains at least ``r`` times what the best feature's
threshold gains (information gain for classes, variance reduction for
regression targets): a filter (univariate screening) per node. Where one
column carries a node's signal (a vote, a DNA position, one category of many)
the split is trained on it and a few near it instead of on hundreds of
one-hot columns; where many columns carry it (continuous data), most are
kept. The other features' weights are zero in the layer's ``feature_mask``,
so training, routing and the saved model all see the sparse split.
"""

import numpy as np

from keras_trees import streaming, topology

#: Rows x features of one chunk of the vectorized threshold search.
_CHUNK = 1 << 21


def best_split_gains(x, y, weights, num_classes=None):
    """Per feature (column of ``x``), the gain of its best threshold on the
    rows ``x``: the weighted information gain in nats (``num_classes`` given,
    integer ``y``; the parent's weight times its entropy minus the
    children's) or the weighted variance reduction (``y`` of shape ``(n,)``
    or ``(n, units)``), cutting between distinct values only. 0 for a
    constant feature.

    >>> import numpy as np
    >>> x = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 6.0], [3.0, 5.0]])
    >>> np.round(best_split_gains(x, np.array([0, 0, 1, 1]), np.ones(4), 2), 4)
    array([2.7726, 0.863 ])
    """
    x = np.asarray(x, np.float64)
    w = np.asarray(weights, np.float64)
    n, q = x.shape
    if num_classes is not None:
        stats = np.zeros((n, num_classes))
        stats[np.arange(n), np.asarray(y, np.int64)] = w
    else:
        y = np.asarray(y, np.float64).reshape(n, -1)
        stats = np.concatenate([w[:, None], w[:, None] * y, (w * (y * y).sum(1))[:, None]], 1)
    gains = np.zeros(q)
    if n < 2:
        return gains
    total = stats.sum(0)
    step = max(1, _CHUNK // (n * stats.shape[1]))
    for lo in range(0, q, step):
        cols = slice(lo, min(q, lo + step))
        order = np.argsort(x[:, cols], axis=0, kind="stable")
        xs = np.take_along_axis(x[:, cols], order, 0)
        left = np.cumsum(stats[order], axis=0)[:-1]  # (n - 1, c, s): the first i + 1 rows go left
        right = total - left
        cost = _impurity(left, num_classes) + _impurity(right, num_classes)
        cost = np.where(xs[1:] > xs[:-1], cost, np.inf)  # cut between distinct values only
        best = cost.min(0)
        parent = _impurity(total[None], num_classes)[0]
        gains[cols] = np.where(np.isfinite(best), np.maximum(parent - best, 0.0), 0.0)
    return gains


def _impurity(stats, num_classes):
    """Weighted impurity of the rows summarized by ``stats`` (last axis):
    mass times entropy (classes) or the within-part sum of squares."""
    if num_classes is not None:
        mass = stats.sum(-1)
        p = stats / np.maximum(mass, 1e-300)[..., None]
        return -(stats * np.log(np.where(p > 0, p, 1.0))).sum(-1)
    mass, sums, squares = stats[..., 0], stats[..., 1:-1], stats[..., -1]
    return squares - (sums * sums).sum(-1) / np.maximum(mass, 1e-300)


def _route(layer, a, t, feats):
    """Heap positions where ``feats`` stop in tree ``t`` of the growth arrays
    ``a`` (hard routing: right iff the split's value is > 0)."""
    state = a["state"][t]
    kernel = a["kernel"][t] * a["mask"][t]
    pos = np.zeros(len(feats), np.int64)
    for _ in range(layer.max_depth):
        inside = pos < layer.num_internal
        at = np.flatnonzero(inside)
        at = at[state[pos[at]] == topology.SPLIT]
        if not len(at):
            break
        value = np.einsum("ij,ij->i", feats[at], kernel[pos[at]]) + a["bias"][t, pos[at]]
        pos[at] = 2 * pos[at] + 1 + (value > 0)
    return pos


def screen_stumps(layer, growth, a, stumps, ratio):
    """Restricts the new stumps ``[(t, n, nodes)]`` of one growth round to
    their screened features (module docstring): one pass over the growth
    engine's data collects the rows that stop at each stump; its mask keeps
    the features of gain ``>= ratio * best``, its drawn direction is kept on
    them (renormalized) and its bias put through the mean of its rows."""
    num_workers, _ = streaming.workers(getattr(growth, "model", None))
    if num_workers > 1:
        raise ValueError(f"{layer.name!r}: split_screening needs every training row on one worker "
                         f"(this run has {num_workers}); use split_screening=None in a distributed run")
    wanted = {}
    for t, n, _ in stumps:
        wanted.setdefault(t, set()).add(n)
    rows = {key: [] for key in ((t, n) for t, n, _ in stumps)}
    for feats, targets, weights in growth._source():
        feats = np.asarray(feats, np.float64).reshape(len(feats), -1)
        weights = np.asarray(weights, np.float64)
        for t, nodes in wanted.items():
            pos = _route(layer, a, t, feats)
            for n in nodes:
                at = np.flatnonzero((pos == n) & (weights > 0))
                if len(at):
                    rows[(t, n)].append((feats[at], np.asarray(targets)[at], weights[at]))
    for (t, n), parts in rows.items():
        if not parts:
            continue
        x = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        w = np.concatenate([p[2] for p in parts])
        mask = a["mask"][t, n]
        gains = best_split_gains(x, y, w, layer.num_classes) * (mask > 0)
        if not gains.max() > 0:
            continue  # no feature separates the rows: the stump keeps its draw
        keep = (gains >= ratio * gains.max()).astype(mask.dtype)
        kernel = a["kernel"][t, n] * keep
        norm = np.linalg.norm(kernel)
        if norm == 0:  # the draw has no weight on the kept features: one of them
            kernel = keep / np.linalg.norm(keep)
        else:
            kernel = kernel / norm
        a["mask"][t, n] = mask * keep
        a["kernel"][t, n] = kernel
        a["bias"][t, n] = -float(np.average(x, axis=0, weights=w) @ kernel)
