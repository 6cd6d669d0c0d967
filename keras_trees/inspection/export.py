"""Export trained trees of every family to a plain, documented dict / JSON.

Each tree layer's [`keras_trees.forest.Forest`][keras_trees.forest.Forest] (``layer.to_forest()``)
is written by [`to_dict`][keras_trees.forest.Forest.to_dict] and read back by
[`from_dict`][keras_trees.forest.Forest.from_dict]. Format ``keras_trees.inspection/1``
(one dict per tree layer)::

    {
      "format": "keras_trees.inspection/1",
      "family": "end_to_end_tree",          # or tree_ensemble, hinge_forest, ...
      "class_name": "EndToEndTree", "name": "end_to_end_tree",   # export_trees only
      "num_trees": 1, "max_depth": 6, "input_dim": 16, "output_dim": 26,
      "inputs": "layer input",              # what split values are computed from
      "split_kind": "linear",               # or axis_aligned, noisy_or
      "split_rule": "right if value > 0",   # or "right if value < 0"
      "aggregation": "mean",                # how tree outputs combine: sum / mean / none
      "leaf_output": "class distribution",
      "leaf_prediction": true,              # output == aggregated values of reached leaves
      "num_classes": 26,                    # or null (leaves are not class distributions)
      "feature_names": null,                # or input_dim names
      "extra": {...},                       # family facts, e.g. steepness, activation
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
``sum_k expert_weights[k] * softplus(<weights[k], x> + bias[k]) - threshold``;
``split_rule`` says which sign goes right. Only present nodes are listed.
``samples`` (and ``class_counts`` / ``target_mean``) appear when data is
given: they count the samples routed deterministically through each node.
Nodes of converted trees may carry ``source_node`` (the node id in the source,
e.g. scikit-learn's). ``split_kind``, ``num_classes`` and ``feature_names``
were added after the first documents; documents without them still load.
[`route_exported`][keras_trees.inspection.export.route_exported] and [`predict_exported`][keras_trees.inspection.export.predict_exported] evaluate a document with
NumPy alone (through [`from_dict`][keras_trees.forest.Forest.from_dict]).
"""

import json
import os

import keras
import numpy as np

from keras_trees import streaming
from keras_trees.api_export import keras_trees_export
from keras_trees.forest import Forest
from keras_trees.inspection import names as _names
from keras_trees.layers._layer_inputs import identity, layer_input_fn


def is_tree_layer(layer):
    """Whether ``layer`` describes its trees as a [`Forest`][keras_trees.forest.Forest]
    (every keras-trees tree layer: ``to_forest()`` and ``forest_features(inputs)``)."""
    return callable(getattr(layer, "to_forest", None))


@keras_trees_export("keras_trees.inspection")
def tree_layers(model):
    """The keras-trees tree layers of a model (recursively), or ``[layer]``."""
    if is_tree_layer(model):
        return [model]
    found = [layer for layer in model._flatten_layers(include_self=False, recursive=True) if is_tree_layer(layer)]
    if not found:
        raise ValueError(f"{model.name!r} contains no keras-trees tree layer")
    return found


def forest_features(model, layer, x):
    """The rows the splits of ``layer.to_forest()`` read when ``model`` is called on ``x``."""
    return layer.forest_features(layer_input_fn(model, layer)(x))


def _num_classes(forest, y):
    num_classes = forest.num_classes
    if y is not None and num_classes is None and not forest.leaf_prediction \
            and np.issubdtype(np.asarray(y).dtype, np.integer):
        num_classes = forest.output_dim  # leaves of scores (soft or hinge trees): one per class
    return num_classes


def _layer_doc(layer, forest, doc):
    return {"format": doc.pop("format"), "family": doc.pop("family"), "class_name": type(layer).__name__,
            "name": layer.name, **doc}


@keras_trees_export("keras_trees.inspection")
def export_layer(layer, features=None, y=None, feature_names=None):
    """Dict of one built tree layer; ``features`` are what its splits read
    (``layer.forest_features(inputs)``), ``y`` optional labels,
    ``feature_names`` optional names of the features (``input_dim`` of them)."""
    forest = layer.to_forest()
    if feature_names is not None:
        forest.feature_names = _names.resolve(forest.input_dim, feature_names)
    return _layer_doc(layer, forest, forest.to_dict(features, y, _num_classes(forest, y)))


def _is_stream(x):
    """Whether ``x`` is a data source of ``(x, y[, sample_weight])`` batches
    (`keras_trees.streaming`) rather than model inputs (arrays, tensors,
    a DataFrame, or a dict/list of them)."""
    if keras.ops.is_tensor(x) or hasattr(x, "shape") or streaming.is_array_like(x):
        return False
    if isinstance(x, (list, tuple)):  # a list of (x, y[, w]) batches, not nested lists of numbers
        return bool(x) and all(isinstance(b, (list, tuple)) and 2 <= len(b) <= 3 and
                               (hasattr(b[0], "shape") or isinstance(b[0], dict)) for b in x)
    return streaming._is_dataset(x) or isinstance(x, keras.utils.PyDataset) or callable(x) or \
        (hasattr(x, "__iter__") and not isinstance(x, (str, bytes, dict)))


def require_arrays(value, argument, where, reason):
    """Refuses a stream of batches where ``where`` needs its data in memory:
    a ``TypeError`` naming ``argument`` and saying why (``reason``)."""
    if value is not None and _is_stream(value):
        raise TypeError(
            f"{where} needs arrays in memory: {argument} is a stream of batches "
            f"({type(value).__name__}), but {reason}; pass the arrays (e.g. a sample of the data)")


def _streamed_docs(model, layers, data):
    """Per layer, the node statistics of a stream of batches, summed batch by
    batch and over the workers, in [`export_layer`][keras_trees.inspection.export.export_layer] documents."""
    data = streaming.stream(data, name="export_trees", model=model)
    forests = [layer.to_forest() for layer in layers]
    sums, kinds = [None] * len(layers), [None] * len(layers)
    for xb, yb, _ in data:
        for i, (layer, forest) in enumerate(zip(layers, forests)):
            stats = forest.node_statistics(forest_features(model, layer, xb), yb, _num_classes(forest, yb))
            if "target_mean" in stats:  # back to sums: additive over batches
                stats["target_mean"] = np.nan_to_num(stats["target_mean"]) * stats["samples"][..., None]
            parts = [stats[k].astype(np.float64) for k in ("samples", "class_counts", "target_mean") if k in stats]
            if sums[i] is None:
                sums[i], kinds[i] = parts, [k for k in ("samples", "class_counts", "target_mean") if k in stats]
            elif [p.shape for p in parts] != [p.shape for p in sums[i]]:
                raise ValueError("export_trees: the labels of the data's batches differ in kind or shape")
            else:
                sums[i] = [a + b for a, b in zip(sums[i], parts)]
    if any(s is None for s in sums):
        raise ValueError("export_trees: the data is empty")
    flat = streaming.all_reduce_sum([a for s in sums for a in s], model=model)
    docs = []
    for layer, forest, kind in zip(layers, forests, kinds):
        parts, flat = flat[:len(kind)], flat[len(kind):]
        stats = dict(zip(kind, parts))
        stats["samples"] = np.rint(stats["samples"]).astype(np.int64)
        if "class_counts" in stats:
            stats["class_counts"] = np.rint(stats["class_counts"]).astype(np.int64)
        if "target_mean" in stats:
            with np.errstate(invalid="ignore", divide="ignore"):
                stats["target_mean"] = stats["target_mean"] / stats["samples"][..., None]
        docs.append(_layer_doc(layer, forest, forest.to_dict(statistics=stats)))
    return docs


@keras_trees_export("keras_trees.inspection")
def export_trees(model, x=None, y=None, feature_names=None):
    """Export every tree layer of ``model`` (a model or a single tree layer).

    Args:
        model: a built Keras model containing keras-trees layers, or one layer.
        x: optional model inputs; nodes then carry the number of samples
            routed deterministically through them. A pandas DataFrame names
            the features of the layers that read the model inputs. ``x`` may
            also be a stream of ``(x, y)`` / ``(x, y, sample_weight)`` batches
            (a batched ``tf.data.Dataset``, a ``keras.utils.PyDataset``, a
            list of batches or a function returning a fresh iterable of them;
            ``y`` None, the batches' labels are used, weights are not): the
            node statistics are summed batch by batch (the data never has to
            fit in memory) and, in a distributed run, over the workers (each
            reads its share; [`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum]).
        y: optional labels (class ids, or regression targets) for per-node
            class counts or target means.
        feature_names: names of the model's input features, for the layers
            whose splits read the model inputs as they are (others keep
            their own names).

    Returns:
        A list with one dict per tree layer (format in this module's docstring).

    >>> import keras, numpy as np
    >>> from keras_trees.layers import EndToEndTree
    >>> model = keras.Sequential([keras.Input((2,)), EndToEndTree(max_depth=2, num_classes=2, seed=0)])
    >>> doc = export_trees(model, np.zeros((5, 2), "float32"))[0]
    >>> doc["family"], doc["trees"][0]["nodes"][0]["samples"]
    ('end_to_end_tree', 5)
    """
    if x is not None and y is None and _is_stream(x):
        layers = tree_layers(model)
        docs = _streamed_docs(model, layers, x)
        for layer, doc in zip(layers, docs):
            if feature_names is not None and layer_input_fn(model, layer) is identity \
                    and len(feature_names) == doc["input_dim"]:
                doc["feature_names"] = [str(name) for name in feature_names]
        return docs
    names = feature_names if feature_names is not None else _names.frame_names(x)
    x = None if x is None else _names.as_array(x)
    docs = []
    for layer in tree_layers(model):
        doc = export_layer(layer, None if x is None else forest_features(model, layer, x), y)
        if names is not None and layer_input_fn(model, layer) is identity and len(names) == doc["input_dim"]:
            doc["feature_names"] = [str(name) for name in names]
        docs.append(doc)
    return docs


@keras_trees_export("keras_trees.inspection")
def to_json(model, path=None, x=None, y=None, indent=None, feature_names=None):
    """[`export_trees`][keras_trees.inspection.export.export_trees] as a JSON string (also written to ``path`` if given)."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (str or os.PathLike), got {type(path).__name__}")
    text = json.dumps(export_trees(model, x, y, feature_names), indent=indent)
    if path is not None:
        with open(path, "w") as f:
            f.write(text)
    return text


@keras_trees_export("keras_trees.inspection")
def route_exported(doc, features):
    """``(batch, num_trees)`` heap positions (leaves) reached in every tree of an
    exported layer ``doc`` (a dict of [`export_trees`][keras_trees.inspection.export.export_trees], or parsed from its
    JSON) by ``features`` ``(batch, input_dim)``, the values its splits read:
    [`Forest.from_dict(doc).route(features)`][keras_trees.forest.Forest.route]."""
    return Forest.from_dict(doc).route(features)


@keras_trees_export("keras_trees.inspection")
def predict_exported(doc, features):
    """Prediction of an exported hard-routed layer: the values of the leaves
    reached, combined by ``aggregation``
    ([`predict`][keras_trees.forest.Forest.predict]).

    Only for layers whose output is exactly that (``doc["leaf_prediction"]``:
    end-to-end trees and forests, ...); soft trees and hinge trees (whose leaves
    are scaled by a margin) raise ``ValueError``.
    """
    if not doc.get("leaf_prediction", False):
        raise ValueError(
            f"a {doc['family']} layer's output is not its reached leaves' values "
            "(leaf_prediction is false); use route_exported for the leaves"
        )
    return Forest.from_dict(doc).predict(features)
