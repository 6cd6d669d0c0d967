"""Split screening for greedily grown end-to-end trees (``split_screening``).

A new stump of [`keras_trees.layers.EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree] reads every feature
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
from keras_trees.layers._polytope_training import best_threshold


def best_split_gains(x, y, weights, num_classes=None):
    """Per feature (column of ``x``), the gain of its best threshold on the
    rows ``x``: `keras_trees.layers._polytope_training.best_threshold`
    (the polytope tree's exact search: information gain in nats per unit of
    weight, or variance reduction for ``y`` of shape ``(n,)`` or
    ``(n, units)``) on each column; 0 where no cut exists (a constant column).

    >>> import numpy as np
    >>> x = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 6.0], [3.0, 5.0]])
    >>> np.round(best_split_gains(x, np.array([0, 0, 1, 1]), np.ones(4), 2), 4)
    array([0.6931, 0.2158])
    """
    x = np.asarray(x, np.float64)
    gains = [best_threshold(x[:, j], y, num_classes, 1, sample_weight=weights)[1] for j in range(x.shape[1])]
    return np.maximum(np.asarray(gains, np.float64), 0.0)


def screen_stumps(layer, growth, a, stumps, ratio):
    """Restricts the new stumps ``[(t, n, nodes)]`` of one growth round to
    their screened features (module docstring): one pass over the growth
    engine's data, routed by the layer (`route_rows`) through the
    round's splits, collects the rows that stop at each stump; its mask keeps
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
    # The layer's own hard routing, on the splits of this round (the new
    # stumps are leaves: rows stop at them).
    layer._write_growth(a)
    is_split = topology.is_split_mask(a["state"])
    for feats, targets, weights in growth._source():
        feats = np.asarray(feats, np.float64).reshape(len(feats), -1)
        targets, weights = np.asarray(targets), np.asarray(weights, np.float64)
        stops = layer.route_rows(feats, is_split, growth.batch_size)
        counted = weights > 0
        for t, nodes in wanted.items():
            pos = stops[:, t]
            for n in nodes:
                at = np.flatnonzero((pos == n) & counted)
                if len(at):
                    rows[(t, n)].append((feats[at], targets[at], weights[at]))
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
