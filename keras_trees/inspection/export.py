"""Export trained trees of every family to a plain, documented dict / JSON.

Format ``keras_trees.inspection/1`` (one dict per tree layer)::

    {
      "format": "keras_trees.inspection/1",
      "family": "end_to_end_tree",          # or tree_ensemble, hinge_forest, ...
      "class_name": "EndToEndTree", "name": "end_to_end_tree",
      "num_trees": 1, "max_depth": 6, "input_dim": 16, "output_dim": 26,
      "inputs": "layer input",              # what split values are computed from
      "split_rule": "right if value > 0",   # or "right if value < 0"
      "aggregation": "mean",                # how tree outputs combine: sum / mean / none
      "leaf_output": "class distribution",
      "leaf_prediction": true,              # output == aggregated values of reached leaves
      "extra": {...},                       # family facts, e.g. gamma, activation
      "trees": [{
        "index": 0, "depth": 5, "num_leaves": 21, "num_splits": 20,
        "nodes": [                          # heap order: children of i are 2i+1, 2i+2
          {"id": 0, "depth": 0, "type": "split",
           "split": {"kind": "linear", "weights": [...], "bias": 0.1},
           # or {"kind": "axis_aligned", "feature": 3, "threshold": -0.5}
           # or {"kind": "noisy_or", "weights": [[...] per expert], "bias": [...],
           #     "expert_weights": [r_1, ...], "threshold": c}
           "left": 1, "right": 2, "samples": 1000},
          {"id": 1, "depth": 1, "type": "leaf", "value": [...], "samples": 420,
           "class_counts": [...]},          # with y for classification
          ...
        ]}]
    }

A linear split's value is ``<weights, x> + bias``, an axis-aligned one's
``x[feature] - threshold``, a noisy-OR one's (convex polytope trees)
``sum_k expert_weights[k] * softplus(<weights[k], x> + bias[k]) - threshold``; ``split_rule`` says which sign goes right. Only
present nodes are listed. ``samples`` (and ``class_counts`` / ``target_mean``)
appear when data is given: they count the samples routed deterministically
through each node. :func:`route_exported` walks the dict with NumPy alone, so
an exported tree can be evaluated without keras-trees.
"""

import json

import numpy as np

from keras_trees import topology
from keras_trees.inspection import _views

FORMAT = "keras_trees.inspection/1"


def tree_layers(model):
    """The keras-trees tree layers of a model (recursively), or ``[layer]``."""
    if _views.is_tree_layer(model):
        return [model]
    found = [layer for layer in model._flatten_layers(include_self=False, recursive=True)
             if _views.is_tree_layer(layer)]
    if not found:
        raise ValueError(f"{model.name!r} contains no keras-trees tree layer")
    return found


def layer_inputs(model, layer, x):
    """The inputs ``layer`` receives when ``model`` is called on ``x``."""
    if model is layer:
        return x
    from keras_trees.callbacks._common import layer_input_fn

    return layer_input_fn(model, layer)(x)


def _counts(view, node, y, num_classes):
    """Per position: samples routed through it, and class counts or target sums."""
    T, N = view.node_state.shape
    D = view.max_depth
    samples = np.zeros((T, N), np.int64)
    classes = None if num_classes is None or y is None else np.zeros((T, N, num_classes), np.int64)
    targets = None
    if y is not None and classes is None:
        y = np.asarray(y, np.float64).reshape(len(y), -1)
        targets = np.zeros((T, N, y.shape[1]))
    for t in range(T):
        pos = node[:, t].astype(np.int64)
        for _ in range(D + 1):  # walk every sample from its stop position to the root
            valid = pos >= 0
            np.add.at(samples[t], pos[valid], 1)
            if classes is not None:
                np.add.at(classes[t], (pos[valid], y[valid]), 1)
            elif targets is not None:
                np.add.at(targets[t], pos[valid], y[valid])
            pos = np.where(pos > 0, (pos - 1) // 2, -1)
    return samples, classes, targets


def export_layer(layer, features=None, y=None):
    """Dict of one built tree layer; ``features`` are what its splits read."""
    view = _views.view(layer)
    T, N = view.node_state.shape
    I = topology.num_internal(view.max_depth)
    num_classes = getattr(layer, "num_classes", None)
    samples = classes = targets = None
    if features is not None:
        features = np.asarray(features, np.float32).reshape(len(features), -1)
        if y is not None and len(y) != len(features):
            raise ValueError(f"x has {len(features)} samples but y has {len(y)}")
        if y is not None and num_classes is None and view.family.startswith(("tree_ensemble", "hinge")):
            num_classes = view.leaves.shape[-1] if np.issubdtype(np.asarray(y).dtype, np.integer) else None
        samples, classes, targets = _counts(view, view.route(features), y, num_classes)
    rule = "right if value > 0" if view.right_if == "positive" else "right if value < 0"
    trees = []
    for t in range(T):
        nodes = []
        for i in np.flatnonzero(view.node_state[t] != topology.ABSENT):
            i = int(i)
            node = {"id": i, "depth": int(topology.position_depth(i))}
            if view.node_state[t, i] == topology.SPLIT:
                if view.split_kind == "linear":
                    split = {"kind": "linear", "weights": view.weights[t, i].tolist(),
                             "bias": float(view.bias[t, i])}
                elif view.split_kind == "noisy_or":
                    split = {"kind": "noisy_or", "weights": view.weights[t, i].tolist(),
                             "bias": view.bias[t, i].tolist(),
                             "expert_weights": view.expert_weights[t, i].tolist(),
                             "threshold": float(view.threshold[t, i])}
                else:
                    split = {"kind": "axis_aligned", "feature": int(view.feature[t, i]),
                             "threshold": float(view.threshold[t, i])}
                node.update(type="split", split=split, left=2 * i + 1, right=2 * i + 2)
            else:
                node.update(type="leaf", value=view.leaves[t, i].tolist())
            if samples is not None:
                node["samples"] = int(samples[t, i])
                if classes is not None:
                    node["class_counts"] = classes[t, i].tolist()
                if targets is not None and samples[t, i] > 0:
                    node["target_mean"] = (targets[t, i] / samples[t, i]).tolist()
            nodes.append(node)
        state = view.node_state
        trees.append({
            "index": t, "depth": topology.tree_depth(state, t),
            "num_leaves": int((state[t] == topology.LEAF).sum()),
            "num_splits": int((state[t, :I] == topology.SPLIT).sum()), "nodes": nodes,
        })
    return {
        "format": FORMAT, "family": view.family, "class_name": type(layer).__name__,
        "name": layer.name, "num_trees": T, "max_depth": view.max_depth,
        "input_dim": view.input_dim, "output_dim": int(view.leaves.shape[-1]),
        "inputs": view.inputs, "split_rule": rule, "aggregation": view.aggregation,
        "leaf_output": view.leaf_output, "leaf_prediction": view.leaf_prediction, "extra": view.extra, "trees": trees,
    }


def export_trees(model, x=None, y=None):
    """Export every tree layer of ``model`` (a model or a single tree layer).

    Args:
        model: a built Keras model containing keras-trees layers, or one layer.
        x: optional model inputs; nodes then carry the number of samples
            routed deterministically through them.
        y: optional labels (class ids, or regression targets) for per-node
            class counts or target means.

    Returns:
        A list with one dict per tree layer (format in this module's docstring).

    >>> import keras, numpy as np
    >>> from keras_trees.layers import EndToEndTree
    >>> model = keras.Sequential([keras.Input((2,)), EndToEndTree(max_depth=2, num_classes=2, seed=0)])
    >>> doc = export_trees(model, np.zeros((5, 2), "float32"))[0]
    >>> doc["family"], doc["trees"][0]["nodes"][0]["samples"]
    ('end_to_end_tree', 5)
    """
    docs = []
    for layer in tree_layers(model):
        features = None
        if x is not None:
            features = _views.layer_features(layer, layer_inputs(model, layer, x))
        docs.append(export_layer(layer, features, y))
    return docs


def to_json(model, path=None, x=None, y=None, indent=None):
    """:func:`export_trees` as a JSON string (also written to ``path`` if given)."""
    text = json.dumps(export_trees(model, x, y), indent=indent)
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text


def route_exported(doc, features):
    """Heap position reached in every tree of an exported layer, with NumPy only.

    Args:
        doc: one layer dict of :func:`export_trees` (or parsed from its JSON).
        features: ``(batch, input_dim)`` values the splits read (the layer's
            inputs, or its ``split_features`` output).

    Returns:
        ``(batch, num_trees)`` int array of heap positions (leaves).
    """
    x = np.asarray(features, np.float64).reshape(len(features), -1)
    if x.shape[1] != doc["input_dim"]:
        raise ValueError(f"features must have {doc['input_dim']} columns, got {x.shape[1]}")
    sign = 1.0 if doc["split_rule"] == "right if value > 0" else -1.0
    out = np.zeros((len(x), doc["num_trees"]), np.int64)
    for t, tree in enumerate(doc["trees"]):
        nodes = {n["id"]: n for n in tree["nodes"]}
        pos = np.zeros(len(x), np.int64)
        for _ in range(doc["max_depth"]):
            for i in np.unique(pos):
                node = nodes[int(i)]
                if node["type"] != "split":
                    continue
                rows = pos == i
                s = node["split"]
                if s["kind"] == "linear":
                    value = x[rows] @ np.asarray(s["weights"]) + s["bias"]
                elif s["kind"] == "noisy_or":
                    z = x[rows] @ np.asarray(s["weights"]).T + np.asarray(s["bias"])
                    value = np.logaddexp(0.0, z) @ np.asarray(s["expert_weights"]) - s["threshold"]
                else:
                    value = x[rows, s["feature"]] - s["threshold"]
                pos[rows] = np.where(sign * value > 0, node["right"], node["left"])
        out[:, t] = pos
    return out


def predict_exported(doc, features):
    """Prediction of an exported hard-routed layer with NumPy only: the values of
    the leaves reached, combined by ``aggregation``.

    Only for layers whose output is exactly that (``doc["leaf_prediction"]``:
    end-to-end trees and forests, ...); soft trees and hinge trees (whose leaves
    are scaled by a margin) raise ``ValueError``.
    """
    if not doc.get("leaf_prediction", False):
        raise ValueError(
            f"a {doc['family']} layer's output is not its reached leaves' values "
            "(leaf_prediction is false); use route_exported for the leaves"
        )
    node = route_exported(doc, features)
    values = []
    for t, tree in enumerate(doc["trees"]):
        leaves = {n["id"]: n["value"] for n in tree["nodes"] if n["type"] == "leaf"}
        values.append(np.asarray([leaves[int(i)] for i in node[:, t]]))
    values = np.stack(values, axis=1)
    if doc["aggregation"] == "mean":
        return values.mean(1)
    if doc["aggregation"] == "sum":
        return values.sum(1)
    return values
