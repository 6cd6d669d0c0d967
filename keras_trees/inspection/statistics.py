"""Size and conditional-computation statistics of trained tree layers."""

import numpy as np
from keras import ops

from keras_trees import topology
from keras_trees.inspection import _views
from keras_trees.inspection.export import layer_inputs, tree_layers


def layer_statistics(layer, features=None):
    """Statistics of one tree layer; ``features`` are what its splits read.

    Returns a dict with ``num_trees``, ``max_depth``, per-tree ``depth``,
    ``leaves`` and ``splits`` (lists), and with ``features``:
    ``split_evaluations`` (mean number of split functions evaluated per sample
    over all trees at inference: the path lengths for hard-routed families; for
    the Tree Ensemble Layer the internal nodes its conditional forward pass
    visits) and, for soft trees, ``reachable_leaves`` (mean per sample and tree).
    """
    view = _views.view(layer)
    state = view.node_state
    T = view.num_trees
    I = topology.num_internal(view.max_depth)
    stats = {
        "family": view.family,
        "num_trees": T,
        "max_depth": view.max_depth,
        "depth": [topology.tree_depth(state, t) for t in range(T)],
        "leaves": [int(v) for v in (state == topology.LEAF).sum(1)],
        "splits": [int(v) for v in (state[:, :I] == topology.SPLIT).sum(1)],
    }
    if features is None:
        return stats
    features = np.asarray(features, np.float32).reshape(len(features), -1)
    if view.family == "tree_ensemble":
        probs = ops.convert_to_numpy(layer.leaf_probabilities(features))  # (B, T, L)
        d = view.max_depth
        reach = probs > 0
        visited = 0.0
        for level in range(d):  # a node is evaluated iff one of its leaves is reachable
            groups = reach.reshape(*reach.shape[:2], 2**level, -1).any(-1)
            visited += groups.sum(-1).mean(0).sum()
        stats["split_evaluations"] = float(visited)
        stats["reachable_leaves"] = float(reach.sum(-1).mean())
    else:
        node = view.route(features)
        stats["split_evaluations"] = float(topology.position_depth(node).sum(1).mean())
    return stats


def tree_statistics(model, x=None):
    """:func:`layer_statistics` for every tree layer of ``model`` (inputs ``x``).

    >>> import keras, numpy as np
    >>> from keras_trees.layers import TreeEnsembleLayer
    >>> model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(2, 3, 1)])
    >>> s = tree_statistics(model, np.zeros((4, 3), "float32"))[0]
    >>> s["leaves"], s["split_evaluations"] <= 2 * 7
    ([8, 8], True)
    """
    out = []
    for layer in tree_layers(model):
        features = None
        if x is not None:
            features = _views.layer_features(layer, layer_inputs(model, layer, x))
        out.append(layer_statistics(layer, features))
    return out
