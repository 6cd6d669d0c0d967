"""Size and conditional-computation statistics of trained tree layers."""

import keras
import numpy as np

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.inspection.export import forest_features, tree_layers


@keras_trees_export("keras_trees.inspection")
def layer_statistics(layer, features=None):
    """Statistics of one tree layer; ``features`` are what its splits read.

    Returns a dict with ``num_trees``, ``max_depth``, per-tree ``depth``,
    ``leaves`` and ``splits`` (lists), and with ``features``:
    ``split_evaluations`` (mean number of split functions evaluated per sample
    over all trees at inference: the path lengths of the hard-routed
    :class:`~keras_trees.forest.Forest`; for soft trees, the Tree Ensemble
    Layer, the internal nodes its conditional forward pass visits) and, for
    soft trees, ``reachable_leaves`` (mean per sample and tree). An empty
    batch of ``features`` raises ``ValueError``: these are means over samples.
    """
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
    """:func:`layer_statistics` for every tree layer of ``model`` (inputs ``x``).

    >>> import keras, numpy as np
    >>> from keras_trees.layers import TreeEnsembleLayer
    >>> model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(2, 3, 1)])
    >>> s = tree_statistics(model, np.zeros((4, 3), "float32"))[0]
    >>> s["leaves"], s["split_evaluations"] <= 2 * 7
    ([8, 8], True)
    """
    if x is not None:
        _require_samples(x, "x")
    return [layer_statistics(layer, None if x is None else forest_features(model, layer, x))
            for layer in tree_layers(model)]


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
