"""Every family seen the same way: a forest on the shared heap topology.

A :class:`ForestView` holds, as NumPy arrays, what a tree says independently of
how its family trains it: the topology (``node_state`` of
:mod:`keras_trees.topology`), one split test per internal position, one output
per leaf position, and how the trees' outputs are combined. Export, routing,
statistics and plots work on views only; a family joins them by registering an
adapter with :func:`register_family`.
"""

import dataclasses

import numpy as np
from keras import ops

from keras_trees import topology

_ADAPTERS = []


@dataclasses.dataclass
class ForestView:
    """A family-independent reading of a trained tree layer.

    Attributes:
        family: short family name (``"tree_ensemble"``, ``"hinge_forest"``, ...).
        node_state: ``(num_trees, 2**(D+1) - 1)`` topology codes (heap order).
        split_kind: ``"linear"`` (value ``<w, x> + b``), ``"axis_aligned"``
            (value ``x[feature] - threshold``) or ``"noisy_or"`` (convex
            polytope trees: value ``sum_k r_k softplus(<w_k, x> + b_k) - threshold``).
        weights, bias: ``(num_trees, 2**D - 1, input_dim)`` and
            ``(num_trees, 2**D - 1)`` for linear splits.
        feature, threshold: ``(num_trees, 2**D - 1)`` for axis-aligned splits
            (``threshold`` also for noisy-OR splits).
        expert_weights: ``(num_trees, 2**D - 1, K)`` ``r_k`` of noisy-OR splits,
            whose ``weights`` are ``(num_trees, 2**D - 1, K, input_dim)`` and
            ``bias`` ``(num_trees, 2**D - 1, K)``.
        right_if: ``"positive"`` (a sample goes right iff value > 0) or
            ``"negative"`` (right iff value < 0, e.g. the Tree Ensemble Layer,
            whose ``S(value)`` is the probability of going left).
        leaves: ``(num_trees, 2**(D+1) - 1, output_dim)`` outputs at leaf positions.
        aggregation: how tree outputs combine: ``"sum"``, ``"mean"`` or ``"none"``.
        leaf_output: one line on what a leaf's value means.
        input_dim: features the splits read.
        inputs: what the splits read (``"layer input"`` or a description).
        leaf_prediction: whether the layer's (inference) output is exactly the
            aggregated values of the leaves reached (false for soft or
            margin-scaled families).
        extra: family-specific facts (gamma, activation, ...), JSON-serializable.
    """

    family: str
    node_state: np.ndarray
    split_kind: str
    right_if: str
    leaves: np.ndarray
    aggregation: str
    leaf_output: str
    input_dim: int
    weights: np.ndarray = None
    bias: np.ndarray = None
    feature: np.ndarray = None
    threshold: np.ndarray = None
    expert_weights: np.ndarray = None
    inputs: str = "layer input"
    leaf_prediction: bool = True
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def num_trees(self):
        return self.node_state.shape[0]

    @property
    def max_depth(self):
        return topology.max_depth_from_positions(self.node_state.shape[1])

    def linear_form(self):
        """``(weights, bias)`` such that a sample goes right iff ``<w, x> + b > 0``."""
        if self.split_kind == "linear":
            w, b = self.weights, self.bias
        else:
            T, I = self.feature.shape
            w = np.zeros((T, I, self.input_dim), np.float32)
            np.put_along_axis(w, self.feature[..., None].astype(np.int64), 1.0, axis=-1)
            b = -self.threshold
        if self.right_if == "negative":
            w, b = -w, -b
        return np.asarray(w, np.float32), np.asarray(b, np.float32)

    def route(self, features):
        """``(batch, num_trees)`` heap position reached by each sample (compiled op)."""
        from keras_trees.ops import hard_routing

        is_split = self.node_state[:, : topology.num_internal(self.max_depth)] == topology.SPLIT
        x = np.asarray(features, np.float32)
        if self.split_kind == "noisy_or":
            node, _ = hard_routing.hard_route(
                x, self.weights, self.bias, is_split, with_path_values=False,
                expert_weights=self.expert_weights, threshold=self.threshold,
            )
        else:
            w, b = self.linear_form()
            node, _ = hard_routing.hard_route(x, w, b, is_split, with_path_values=False)
        return ops.convert_to_numpy(node)


def register_family(layer_class, adapter):
    """Makes ``adapter(layer) -> ForestView`` the reading of ``layer_class`` layers."""
    _ADAPTERS.insert(0, (layer_class, adapter))


def is_tree_layer(layer):
    return any(isinstance(layer, cls) for cls, _ in _ADAPTERS)


def view(layer):
    """The :class:`ForestView` of a keras-trees layer (built)."""
    for cls, adapter in _ADAPTERS:
        if isinstance(layer, cls):
            if not layer.built:
                raise ValueError(f"layer {layer.name!r} is not built yet: call it on data first")
            return adapter(layer)
    raise TypeError(f"{type(layer).__name__} is not a keras-trees tree layer")


def layer_features(layer, inputs):
    """What the layer's splits read, for the layer's own inputs ``inputs``."""
    if getattr(layer, "split_features", None) is not None:  # end-to-end trees behind an extractor
        return ops.convert_to_numpy(layer.features(inputs, training=False))
    x = np.asarray(ops.convert_to_numpy(inputs))
    return x.reshape(-1, x.shape[-1])


def _np(v):
    return np.asarray(ops.convert_to_numpy(v))


def _perfect_leaves(values, depth):
    """``(T, 2**depth, K)`` leaves left to right -> ``(T, positions, K)`` heap slots."""
    T, L, K = values.shape
    out = np.zeros((T, topology.num_positions(depth), K), values.dtype)
    out[:, L - 1:] = values
    return out


def _tree_ensemble(layer):
    d = layer.depth
    bias = _np(layer.node_bias) if layer.use_bias else np.zeros(layer.node_weights.shape[:2], np.float32)
    return ForestView(
        family="tree_ensemble",
        node_state=topology.perfect(layer.num_trees, d),
        split_kind="linear",
        weights=_np(layer.node_weights),
        bias=bias,
        right_if="negative",
        leaves=_perfect_leaves(_np(layer.leaf_weights), d),
        aggregation="sum",
        leaf_output="added to the output with the probability of reaching the leaf",
        input_dim=int(layer.node_weights.shape[-1]),
        leaf_prediction=False,
        extra={"activation": layer.activation, "gamma": float(_np(layer.gamma)),
               "left_probability": f"{layer.activation}(value, gamma)"},
    )


def _hinge(layer):
    d = layer.depth
    feature, threshold = _np(layer.feature_indices), _np(layer.thresholds)
    if layer._fern:  # one decision per level: every position of level k uses it
        level = topology.position_depth(np.arange(topology.num_internal(d)))
        feature, threshold = feature[:, level], threshold[:, level]
    return ForestView(
        family="hinge_fern" if layer._fern else "hinge_forest",
        node_state=topology.perfect(layer.num_trees, d),
        split_kind="axis_aligned",
        feature=feature,
        threshold=threshold,
        right_if="positive",
        leaves=_perfect_leaves(_np(layer.leaf_weights), d),
        aggregation=layer.reduction,
        leaf_output="multiplied by |r*|, the smallest margin |x[feature] - threshold| on the path",
        input_dim=int(layer.input_spec.axes[-1]),
        leaf_prediction=False,
    )


def _end_to_end(layer):
    return ForestView(
        family="end_to_end_forest" if layer.num_trees > 1 else "end_to_end_tree",
        node_state=_np(layer.node_state),
        split_kind="linear",
        weights=_np(layer.effective_kernel()),
        bias=_np(layer.split_bias),
        right_if="positive",
        leaves=_np(layer.leaf_values),
        aggregation="mean",
        leaf_output="class distribution" if layer.is_classifier else "regression value",
        input_dim=int(layer.feature_dim),
        inputs="layer input" if layer.split_features is None else "split_features output (flattened)",
        extra={"gamma": _np(layer.gamma).tolist()} if layer.num_trees * layer.num_internal <= 4096 else {},
    )


def _polytope(layer):
    return ForestView(
        family="convex_polytope_tree",
        node_state=_np(layer.node_state),
        split_kind="noisy_or",
        weights=_np(layer.expert_kernel),
        bias=_np(layer.expert_bias),
        expert_weights=_np(layer.expert_weights()),
        threshold=_np(layer.threshold),
        right_if="positive",
        leaves=_np(layer.leaf_values),
        aggregation="mean",
        leaf_output="class distribution" if layer.is_classifier else "regression value",
        input_dim=int(layer.feature_dim),
        extra={"probability_right": "1 - exp(-sum_k r_k softplus(<w_k, x> + b_k))"},
    )


def _non_greedy(layer):
    d, p = layer.depth, layer.input_dim
    rows = _np(layer.split_weights)
    values = _np(layer.leaf_values)
    if layer.is_classifier:  # leaves hold logits; the model predicts their softmax
        values = np.exp(values - values.max(-1, keepdims=True))
        values = values / values.sum(-1, keepdims=True)
    return ForestView(
        family="non_greedy_tree",
        node_state=_np(layer.node_state),
        split_kind="linear",
        weights=rows[None, :, :p],
        bias=rows[None, :, p],
        right_if="positive",
        leaves=_perfect_leaves(values[None], d),
        aggregation="mean",
        leaf_output="class distribution (softmax of the leaf parameters)" if layer.is_classifier
        else "regression value",
        input_dim=int(p),
        extra={"nu": float(layer.nu)},
    )


def _register_builtin():
    from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree
    from keras_trees.layers.end_to_end_forest import EndToEndForest
    from keras_trees.layers.end_to_end_tree import EndToEndTree
    from keras_trees.layers.hinge_forest import HingeFern, HingeForest
    from keras_trees.layers.non_greedy_tree import NonGreedyTree
    from keras_trees.layers.tree_ensemble import TreeEnsembleLayer

    register_family(TreeEnsembleLayer, _tree_ensemble)
    register_family(HingeForest, _hinge)
    register_family(HingeFern, _hinge)
    register_family(EndToEndTree, _end_to_end)
    register_family(EndToEndForest, _end_to_end)
    register_family(ConvexPolytopeTree, _polytope)
    register_family(NonGreedyTree, _non_greedy)


_register_builtin()
