"""Size and conditional-computation statistics of trained tree layers."""

import keras
import numpy as np

from keras_trees import streaming, topology
from keras_trees.api_export import keras_trees_export
from keras_trees.inspection.export import forest_features, _is_stream, require_arrays, tree_layers


@keras_trees_export("keras_trees.inspection")
def layer_statistics(layer, features=None):
    """Statistics of one tree layer; ``features`` are what its splits read.

    Returns a dict with ``num_trees``, ``max_depth``, per-tree ``depth``,
    ``leaves`` and ``splits`` (lists), and with ``features``:
    ``split_evaluations`` (mean number of split functions evaluated per sample
    over all trees at inference: the path lengths of the hard-routed
    [`Forest`][keras_trees.forest.Forest]; for soft trees, the Tree Ensemble
    Layer, the internal nodes its conditional forward pass visits) and, for
    soft trees, ``reachable_leaves`` (mean per sample and tree). An empty
    batch of ``features`` raises ``ValueError``: these are means over samples.
    ``features`` are arrays; for a stream of batches use
    [`tree_statistics`][keras_trees.inspection.statistics.tree_statistics] (``tree_statistics(layer, stream)``).
    """
    require_arrays(features, "features", "layer_statistics",
                   "it takes one batch of split features; tree_statistics(layer, stream) sums a stream's batches")
    forest = layer.to_forest()
    stats = {
        "family": forest.family,
        "num_trees": forest.num_trees,
        "max_depth": forest.max_depth,
        "depth": forest.tree_depths().tolist(),
        "leaves": forest.num_leaves().tolist(),
        "splits": forest.num_splits().tolist(),
    }
    if features is None:
        return stats
    _require_samples(features, "features")
    if hasattr(layer, "mean_reachable_leaves"):  # soft routing: the layer's own forward pass
        stats["split_evaluations"] = layer.split_evaluations(features)
        stats["reachable_leaves"] = layer.mean_reachable_leaves(features)
    else:
        stats["split_evaluations"] = float(topology.position_depth(forest.route(features)).sum(1).mean())
    return stats


@keras_trees_export("keras_trees.inspection")
def tree_statistics(model, x=None):
    """[`layer_statistics`][keras_trees.inspection.statistics.layer_statistics] for every tree layer of ``model`` (inputs ``x``).

    ``x`` may also be a stream of ``(x, y)`` or ``(x, y, sample_weight)``
    batches (a batched ``tf.data.Dataset``, a ``keras.utils.PyDataset``, a
    list of such tuples or a function returning a fresh iterable of them; the
    labels and weights are not used): the per-sample statistics are then
    summed batch by batch (the data never has to fit in memory) and, in a
    distributed run, over the workers (each reads its share;
    [`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum]), then divided by the number
    of samples: the same means as for the arrays.

    >>> import keras, numpy as np
    >>> from keras_trees.layers import TreeEnsembleLayer
    >>> model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(2, 3, 1)])
    >>> s = tree_statistics(model, np.zeros((4, 3), "float32"))[0]
    >>> s["leaves"], s["split_evaluations"] <= 2 * 7
    ([8, 8], True)
    """
    layers = tree_layers(model)
    if x is not None and _is_stream(x):
        return _streamed_statistics(model, layers, x)
    if x is not None:
        _require_samples(x, "x")
    return [layer_statistics(layer, None if x is None else forest_features(model, layer, x))
            for layer in layers]


def _streamed_statistics(model, layers, data):
    data = streaming.stream(data, name="tree_statistics", model=model)
    soft = [hasattr(layer, "mean_reachable_leaves") for layer in layers]
    forests = [None if soft[i] else layer.to_forest() for i, layer in enumerate(layers)]
    # Per layer: the sums over rows of split evaluations and reachable leaves, and the rows.
    sums = np.zeros((len(layers), 3))
    for xb, yb, _ in data:
        n = len(yb)
        if n == 0:
            continue
        for i, layer in enumerate(layers):
            features = forest_features(model, layer, xb)
            if soft[i]:  # the layer's means over the batch's rows (n per batch up to a constant factor)
                sums[i] += [n * layer.split_evaluations(features), n * layer.mean_reachable_leaves(features), n]
            else:
                depth = topology.position_depth(forests[i].route(features)).sum(1)
                sums[i] += [depth.sum(), 0.0, len(depth)]
    sums, = streaming.all_reduce_sum([sums], model=model)
    if not np.all(sums[:, 2] > 0):
        raise ValueError("tree_statistics: the data is empty: split_evaluations and reachable_leaves are means "
                         "over samples; pass at least one sample, or x=None for the size statistics alone")
    out = []
    for i, layer in enumerate(layers):
        stats = layer_statistics(layer)
        stats["split_evaluations"] = float(sums[i, 0] / sums[i, 2])
        if soft[i]:
            stats["reachable_leaves"] = float(sums[i, 1] / sums[i, 2])
        out.append(stats)
    return out


def _require_samples(x, name):
    """The per-sample statistics are means over samples: an empty batch has none
    (a ValueError rather than NaN, or a reshape error from deeper down)."""
    if isinstance(x, (dict, list, tuple)):  # a multi-input model's inputs
        leaves = keras.tree.flatten(x)
        x = leaves[0] if leaves else np.zeros(())
    shape = np.shape(x) if not hasattr(x, "shape") else tuple(x.shape)
    if len(shape) == 0:
        raise ValueError(f"{name} must be a batch of samples (n, ...), got a scalar")
    if shape[0] == 0:
        raise ValueError(
            f"{name} is an empty batch: split_evaluations and reachable_leaves are means over "
            f"samples; pass at least one sample, or {name}=None for the size statistics alone")
