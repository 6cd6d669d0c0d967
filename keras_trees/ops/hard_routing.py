"""Hard (deterministic) routing through forests of possibly unbalanced trees.

Topology and layout: `keras_trees.topology` (heap positions, ``is_split``
over the internal positions). ``hard_route`` dispatches to the compiled
``KerasTrees>HardRouting`` op (only the splits on each sample's path are
evaluated: at most ``depth`` dot products per sample and tree) and to
``hard_route_reference`` (``keras.ops``; evaluates every split densely) otherwise.
Routing is piecewise constant, so it has no gradient.

Two split forms share the engine: oblique splits ``<w, x> + b`` (weights
``(num_trees, internal, input_dim)``) and noisy-OR / convex polytope splits with
an experts axis (weights ``(num_trees, internal, K, input_dim)``, per-expert
bias, nonnegative per-expert weights ``r`` and a per-node ``threshold``):
``sum_k r_k softplus(<w_k, x> + b_k) - threshold`` (``KerasTrees>HardRoutingExperts``).
"""

from keras import ops

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.ops import _library
from keras_trees.validation import batched, tensors


# The error of a non-finite split value on a sample's path, on both paths (the
# kernels' kSplitValueOverflow in custom_ops/core/hard_routing.h).
SPLIT_VALUE_OVERFLOW = (
    "x: a split value on the path of a sample is not finite (<w, x> + b overflows the range "
    "of the dtype of x); the inputs or the split parameters are too large: scale the inputs (e.g. "
    "standardize them) or compute in float64"
)


def _validate_experts(x, split_weights, split_bias, is_split, expert_weights, threshold):
    if len(x.shape) != 2:
        raise ValueError(f"x must have rank 2 (batch, input_dim), got shape {tuple(x.shape)}")
    if expert_weights is None or threshold is None:
        raise ValueError(
            "split_weights of rank 4 (num_trees, 2**depth - 1, num_experts, input_dim) are noisy-OR "
            "splits: pass expert_weights (num_trees, 2**depth - 1, num_experts) and threshold "
            "(num_trees, 2**depth - 1)"
        )
    trees, internal, k, dim = split_weights.shape
    leaves = internal + 1
    if internal < 1 or leaves & (leaves - 1):
        raise ValueError(f"split_weights.shape[1] must be 2**depth - 1, got {internal}")
    if k < 1:
        raise ValueError("split_weights.shape[2] (the number of experts) must be >= 1")
    if x.shape[1] is not None and x.shape[1] != dim:
        raise ValueError(f"x has {x.shape[1]} features but split_weights expects input_dim={dim}")
    for name, t, shape in (
        ("split_bias", split_bias, (trees, internal, k)),
        ("expert_weights", expert_weights, (trees, internal, k)),
        ("threshold", threshold, (trees, internal)),
        ("is_split", is_split, (trees, internal)),
    ):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")


def _validate(x, split_weights, split_bias, is_split):
    if len(x.shape) != 2:
        raise ValueError(f"x must have rank 2 (batch, input_dim), got shape {tuple(x.shape)}")
    if len(split_weights.shape) != 3:
        raise ValueError(
            "split_weights must have shape (num_trees, 2**depth - 1, input_dim), "
            f"got {tuple(split_weights.shape)}"
        )
    trees, internal, dim = split_weights.shape
    leaves = internal + 1
    if internal < 1 or leaves & (leaves - 1):
        raise ValueError(f"split_weights.shape[1] must be 2**depth - 1, got {internal}")
    if x.shape[1] is not None and x.shape[1] != dim:
        raise ValueError(f"x has {x.shape[1]} features but split_weights expects input_dim={dim}")
    for name, t in (("split_bias", split_bias), ("is_split", is_split)):
        if tuple(t.shape) != (trees, internal):
            raise ValueError(f"{name} must have shape ({trees}, {internal}), got {tuple(t.shape)}")


def _inputs(x, split_weights, split_bias, is_split, expert_weights=None, threshold=None, values=False):
    """Converts and checks what is known without the values: ``x`` as
    floating features (integers and booleans cast to the parameters' floating dtype), the split
    parameters in ``x``'s dtype (so mixed float32/float64 inputs compute in
    ``x``'s, on both paths), ``is_split`` as booleans, and the shapes; with
    ``values`` also `_check_values`. Under ``jax.jit`` the returned ``x``
    depends on one check call (`keras_trees.validation.tensors.jit_gathered`)."""
    with tensors.jit_gathered() as pending:
        x = tensors.features(x, "x", like=split_weights)
        dtype = tensors.dtype_name(x)
        split_weights = tensors.floating(split_weights, "split_weights", dtype)
        split_bias = tensors.floating(split_bias, "split_bias", dtype)
        is_split = split_flags(is_split)
        if len(split_weights.shape) == 4:
            if expert_weights is not None:
                expert_weights = tensors.floating(expert_weights, "expert_weights", dtype)
            threshold = None if threshold is None else tensors.floating(threshold, "threshold", dtype)
            _validate_experts(x, split_weights, split_bias, is_split, expert_weights, threshold)
        else:
            if expert_weights is not None or threshold is not None:
                raise ValueError("expert_weights and threshold need rank-4 split_weights (noisy-OR splits)")
            _validate(x, split_weights, split_bias, is_split)
        if values:
            _check_values(x, split_weights, split_bias, expert_weights, threshold)
    x = batched.require_all(pending, output=x)
    return x, split_weights, split_bias, is_split, expert_weights, threshold


def split_flags(is_split, name="is_split"):
    """``is_split`` as booleans: boolean tensors as they are; integer or float
    flags must be 0 or 1 (a topology value like 2 or 7 is refused, not read as
    True)."""
    is_split = tensors.as_tensor(is_split, name)
    if tensors.dtype_name(is_split) == "bool" or tensors.is_keras_symbolic(is_split):
        return ops.cast(is_split, "bool")
    tensors.require(ops.all(ops.logical_or(ops.equal(is_split, 0), ops.equal(is_split, 1))),
                    f"{name} must hold booleans (0 or 1): node_state == SPLIT over the internal positions")
    return ops.cast(is_split, "bool")


def _check_values(x, split_weights, split_bias, expert_weights=None, threshold=None):
    """Value checks of the ``keras.ops`` path (the compiled kernels make the
    same ones): eager, inside ``tf.function`` and under ``jax.jit``."""
    tensors.finite(x, "x", "hard routing needs finite inputs")
    tensors.finite(split_weights, "split_weights", "did training diverge?")
    tensors.finite(split_bias, "split_bias", "did training diverge?")
    if threshold is not None:
        tensors.finite(threshold, "threshold", "did training diverge?")
    if expert_weights is not None:
        tensors.nonnegative(expert_weights, "expert_weights", "noisy-OR rates r_k")


@keras_trees_export("keras_trees.ops")
def hard_route_reference(x, split_weights, split_bias, is_split, expert_weights=None, threshold=None):
    """Dense ``keras.ops`` reference: evaluates all splits, then walks the heap.

    With rank-4 ``split_weights`` (noisy-OR splits) the split value is
    ``sum_k expert_weights[..., k] * softplus(<w_k, x> + b_k) - threshold``.

    Finite inputs can still give a split value that overflows (``inf`` or
    ``inf - inf``): a non-finite value on a sample's path is refused with a
    ``ValueError`` on this path and by the kernels alike (only the splits
    on the path count: the kernels evaluate no others).

    Returns:
        ``(node, path_values)``: ``(batch, num_trees)`` int32 heap position where
        each sample stops, and ``(batch, num_trees, depth)`` split values along
        the path (0 after its end).
    """
    x, split_weights, split_bias, is_split, expert_weights, threshold = _inputs(
        x, split_weights, split_bias, is_split, expert_weights, threshold, values=True)
    if len(split_weights.shape) == 4:
        z = ops.einsum("bp,tikp->btik", x, split_weights) + split_bias[None]
        values = ops.sum(expert_weights[None] * ops.softplus(z), axis=-1) - threshold[None]
    else:
        values = ops.einsum("bp,tip->bti", x, split_weights) + split_bias[None]
    node, path = _walk(values, is_split)
    with tensors.jit_gathered() as pending:
        tensors.require(ops.all(ops.isfinite(path)), SPLIT_VALUE_OVERFLOW)
    return batched.require_all(pending, output=node), path


def _walk(values, is_split):
    """Follows ``values`` (``(batch, num_trees, internal)``, right iff > 0) down the heap."""
    internal = values.shape[-1]
    depth = topology.max_depth_from_internal(internal)
    mask = ops.broadcast_to(ops.cast(is_split, "bool")[None], ops.shape(values))
    node = ops.zeros(ops.shape(values)[:2], dtype="int32")
    path = []
    for _ in range(depth):
        at = ops.minimum(node, internal - 1)[..., None]
        v = ops.take_along_axis(values, at, axis=-1)[..., 0]
        active = ops.logical_and(node < internal, ops.take_along_axis(mask, at, axis=-1)[..., 0])
        path.append(ops.where(active, v, ops.zeros_like(v)))
        node = ops.where(active, 2 * node + 1 + ops.cast(v > 0, "int32"), node)
    return node, ops.stack(path, axis=-1)


@keras_trees_export("keras_trees.ops")
def hard_route(x, split_weights, split_bias, is_split, with_path_values=True, expert_weights=None,
               threshold=None):
    """Routes every sample down one path per tree (compiled op where available).

    Args:
        x: ``(batch, input_dim)`` finite inputs.
        split_weights: ``(num_trees, 2**depth - 1, input_dim)`` oblique split
            weights in heap order (zero entries give axis-aligned or
            feature-subset splits).
        split_bias: ``(num_trees, 2**depth - 1)``.
        is_split: ``(num_trees, 2**depth - 1)`` booleans (``node_state == SPLIT``
            over the internal positions). A sample goes right iff
            ``<w, x> + b > 0`` and stops at the first non-split position.
        with_path_values: also return the split values along the path.
        expert_weights, threshold: only for noisy-OR (convex polytope) splits,
            given by rank-4 ``split_weights`` ``(num_trees, 2**depth - 1, K,
            input_dim)`` and ``split_bias`` ``(num_trees, 2**depth - 1, K)``:
            ``expert_weights`` ``(num_trees, 2**depth - 1, K)`` (``r_k >= 0``)
            and ``threshold`` ``(num_trees, 2**depth - 1)``; a sample goes right
            iff ``sum_k r_k softplus(<w_k, x> + b_k) > threshold``.

    Returns:
        ``(node, path_values)`` as in [`hard_route_reference`][keras_trees.ops.hard_routing.hard_route_reference];
        ``path_values`` has last dimension 0 when ``with_path_values`` is false.

    >>> import numpy as np
    >>> w = np.array([[[1.0], [0.0], [0.0]]], "float32"); b = np.zeros((1, 3), "float32")
    >>> node, _ = hard_route(np.array([[-1.0], [2.0]], "float32"), w, b, np.array([[True, False, False]]))
    >>> np.asarray(node).ravel().tolist()
    [1, 2]
    """
    x, split_weights, split_bias, is_split, expert_weights, threshold = _inputs(
        x, split_weights, split_bias, is_split, expert_weights, threshold)
    if _library.custom_ops_available("hard_routing"):  # the kernels check the values
        kernels = _library.binding("hard_routing")
        if expert_weights is not None:
            return kernels.hard_route_experts(
                x, split_weights, split_bias, expert_weights, threshold, is_split, with_path_values
            )
        return kernels.hard_route(x, split_weights, split_bias, is_split, with_path_values)
    node, path = hard_route_reference(x, split_weights, split_bias, is_split, expert_weights, threshold)
    if not with_path_values:
        path = path[..., :0]
    return node, path


def split_mask(node_state):
    """``(num_trees, 2**depth - 1)`` booleans ``node_state == SPLIT`` over the
    internal positions: the ``is_split`` argument of [`hard_route`][keras_trees.ops.hard_routing.hard_route] (tensor
    version of [`keras_trees.topology.is_split_mask`][keras_trees.topology.is_split_mask])."""
    node_state = ops.convert_to_tensor(node_state)
    internal = topology.num_internal(topology.max_depth_from_positions(node_state.shape[1]))
    return ops.equal(node_state[:, :internal], topology.SPLIT)


def route_to_leaves(x, split_weights, split_bias, node_state, expert_weights=None, threshold=None):
    """``(batch, num_trees)`` int32 heap position of the leaf every sample
    reaches in trees of topology ``node_state`` ([`hard_route`][keras_trees.ops.hard_routing.hard_route] through the
    present splits, without path values): the routing of every heap layer."""
    node, _ = hard_route(x, split_weights, split_bias, split_mask(node_state), with_path_values=False,
                         expert_weights=expert_weights, threshold=threshold)
    return node


@keras_trees_export("keras_trees.ops")
def path_lengths(node):
    """Number of splits evaluated on each path: the depth of the stop position.

    Domain: ``node`` whole numbers >= 0 (heap positions); a tensor position
    < 0 gives an undefined length.
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").
    """
    tensors.host_domain(node, "node", "heap positions (whole numbers >= 0)", lambda a: (a >= 0) & (a % 1 == 0))
    node = ops.cast(tensors.as_tensor(node, "node"), "float32")
    return ops.cast(ops.floor(ops.log2(node + 1.0) + 1e-6), "int32")
