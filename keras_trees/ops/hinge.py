"""Random hinge trees and ferns (Lay et al. 2018).

A hinge tree routes a sample like a crisp decision tree (right when
``x[f_v] - t_v > 0``) and outputs the reached leaf's weight times the smallest
margin ``|r*|`` met on the path (Eq. 10 and Algorithm 3 of the paper). A hinge
fern of depth ``D`` has the same ``2**D`` leaves but only ``D`` decisions, one
per level, shared by every path.

Layouts (shared with the layers):

* trees: ``thresholds`` and ``feature_indices`` are ``(num_trees, 2**depth - 1)``
  in heap order (root ``0``, children of ``v`` are ``2v + 1`` left and
  ``2v + 2`` right);
* ferns: ``(num_trees, depth)``, level ``i`` tests ``x[f_i] - t_i``;
* ``leaf_weights``: ``(num_trees, 2**depth, units)``, leaves left to right
  (leaf index ``l = sum_i bit_i 2**(depth - 1 - i)`` with ``bit_i = 1`` for a
  right turn at level ``i``).

``hinge_forest`` and ``hinge_forest_traversal`` run the compiled op when the
Keras backend is TensorFlow and the op library is loaded, and
``hinge_forest_reference`` / ``hinge_traversal_reference`` (Algorithm 3 in
``keras.ops``) otherwise. ``hinge_forest_dense`` evaluates Eq. 10 literally,
every vertex and every leaf, for tests and speed comparisons.
"""

from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.ops import _library
from keras_trees.ops.routing import depth_from_internal_nodes
from keras_trees.validation import tensors

MAX_DEPTH = 24  # kMaxDepth of the kernels


@keras_trees_export("keras_trees.ops")
def hinge_depth(num_vertices, fern=False):
    """Depth of a hinge tree (``2**depth - 1`` vertices) or fern (``depth`` vertices)."""
    if num_vertices is None:
        raise ValueError("the number of vertices per tree (thresholds.shape[1]) must be known")
    num_vertices = int(num_vertices)
    if fern:
        depth = num_vertices
        if not 1 <= depth <= MAX_DEPTH:
            raise ValueError(
                f"a fern has one threshold per level, so thresholds.shape[1] is its depth and "
                f"must be in [1, {MAX_DEPTH}], got {num_vertices}"
            )
        return depth
    depth = depth_from_internal_nodes(num_vertices) if num_vertices >= 1 else 0
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"tree depth must be in [1, {MAX_DEPTH}], got {depth}")
    return depth


def _validate_shapes(x, thresholds, feature_indices, leaf_weights, fern):
    if len(x.shape) != 2:
        raise ValueError(f"x must have rank 2 (batch, num_features), got shape {tuple(x.shape)}")
    if len(thresholds.shape) != 2:
        raise ValueError(
            "thresholds must have shape (num_trees, num_vertices), got "
            f"{tuple(thresholds.shape)}"
        )
    if tuple(feature_indices.shape) != tuple(thresholds.shape):
        raise ValueError(
            f"feature_indices must have the shape of thresholds {tuple(thresholds.shape)}, "
            f"got {tuple(feature_indices.shape)}"
        )
    depth = hinge_depth(thresholds.shape[1], fern)
    if leaf_weights is not None:
        expected = (thresholds.shape[0], 2**depth)
        if len(leaf_weights.shape) != 3 or tuple(leaf_weights.shape[:2]) != expected:
            raise ValueError(
                f"leaf_weights must have shape ({expected[0]}, {expected[1]}, units) for "
                f"{'ferns' if fern else 'trees'} of depth {depth}, got {tuple(leaf_weights.shape)}"
            )
    return depth


def _check_values(x, thresholds, leaf_weights):
    """Value checks of the ``keras.ops`` path (the compiled kernels make the
    same ones): eager, inside ``tf.function`` and under ``jax.jit``."""
    tensors.finite(x, "x", "hinge trees need finite inputs")
    tensors.finite(thresholds, "thresholds", "did training diverge?")
    if leaf_weights is not None:
        tensors.finite(leaf_weights, "leaf_weights", "did training diverge?")


def _is_int32_tensor(t):
    """int32 ids (NumPy or backend): the kernels check their range themselves."""
    return hasattr(t, "dtype") and tensors.dtype_name(t) == "int32"


def _convert(x, thresholds, feature_indices, leaf_weights, compiled=False):
    """Tensors in ``x``'s floating dtype (integer and boolean ``x`` cast to
    the parameters' floating dtype) and int32 ``feature_indices`` checked in ``[0, num_features)``
    before the cast (int64 ids beyond int32 and fractional floats are refused,
    not wrapped or truncated). The compiled kernels check int32 ids
    themselves, so ``compiled`` skips that one runtime check."""
    x = tensors.features(x, "x", layout="(batch, num_features)", like=thresholds)
    dtype = tensors.dtype_name(x)
    thresholds = tensors.floating(thresholds, "thresholds", dtype)
    if not (compiled and _is_int32_tensor(feature_indices)):
        feature_indices = tensors.indices(feature_indices, "feature_indices", upper=x.shape[1])
    if leaf_weights is not None:
        leaf_weights = tensors.floating(leaf_weights, "leaf_weights", dtype)
    return x, thresholds, feature_indices, leaf_weights


@keras_trees_export("keras_trees.ops")
def hinge_traversal_reference(x, thresholds, feature_indices, fern=False):
    """Algorithm 3 in ``keras.ops``: ``(leaf, margin, vertex)``, each ``(batch, num_trees)``.

    ``leaf`` (int32) is the leaf reached; ``margin`` is the signed margin
    ``r* = x[f_v*] - t_v*`` of smallest magnitude along the path (the vertex
    nearest the root on ties) and is differentiable with respect to ``x`` and
    ``thresholds``; ``vertex`` (int32) is ``v*``. A sample goes right when
    ``x[f_v] - t_v > 0``.
    """
    x, thresholds, feature_indices, _ = _convert(x, thresholds, feature_indices, None)
    depth = _validate_shapes(x, thresholds, feature_indices, None, fern)
    _check_values(x, thresholds, None)
    trees, vertices = thresholds.shape
    f_flat = ops.reshape(feature_indices, (-1,))
    t_flat = ops.reshape(thresholds, (-1,))
    offsets = ops.arange(trees, dtype="int32")[None, :] * vertices

    def margin_at(vertex):  # vertex: (batch, trees) int32
        idx = offsets + vertex
        return ops.take_along_axis(x, ops.take(f_flat, idx), axis=1) - ops.take(t_flat, idx)

    r = ops.take(x, feature_indices[:, 0], axis=1) - thresholds[None, :, 0]
    best_abs = ops.abs(r)
    zero = ops.zeros_like(r, dtype="int32")
    best_v = zero
    bit = ops.cast(r > 0, "int32")
    node = bit if fern else 1 + bit  # fern: the leaf code so far; tree: the next vertex
    for level in range(1, depth):
        vertex = zero + level if fern else node
        r = margin_at(vertex)
        closer = ops.abs(r) < best_abs
        best_abs = ops.where(closer, ops.abs(r), best_abs)
        best_v = ops.where(closer, vertex, best_v)
        bit = ops.cast(r > 0, "int32")
        node = 2 * node + bit if fern else 2 * node + 1 + bit
    leaf = node if fern else node - (2**depth - 1)
    best_v = ops.stop_gradient(best_v)
    return leaf, margin_at(best_v), best_v


@keras_trees_export("keras_trees.ops")
def hinge_forest_reference(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Per-tree outputs ``w_leaf * |r*|`` via Algorithm 3 in ``keras.ops``.

    Args:
        x: ``(batch, num_features)``.
        thresholds: ``(num_trees, 2**depth - 1)`` (trees) or ``(num_trees, depth)`` (ferns).
        feature_indices: int, same shape as ``thresholds``, values in ``[0, num_features)``.
        leaf_weights: ``(num_trees, 2**depth, units)``.
        fern: evaluate ferns instead of trees.

    Returns:
        ``(batch, num_trees, units)``. Autodiff gives the paper's sparse gradients
        (Eq. 11-12): only ``x[f_v*]``, ``t_v*`` and the reached leaf get gradient.
    """
    x, thresholds, feature_indices, leaf_weights = _convert(
        x, thresholds, feature_indices, leaf_weights
    )
    depth = _validate_shapes(x, thresholds, feature_indices, leaf_weights, fern)
    tensors.finite(leaf_weights, "leaf_weights", "did training diverge?")
    leaf, margin, _ = hinge_traversal_reference(x, thresholds, feature_indices, fern)
    trees, leaves, units = leaf_weights.shape
    flat = ops.reshape(leaf_weights, (trees * leaves, units))
    rows = ops.arange(trees, dtype="int32")[None, :] * (2**depth) + leaf
    return ops.take(flat, rows, axis=0) * ops.abs(margin)[..., None]


@keras_trees_export("keras_trees.ops")
def hinge_forest_dense(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Eq. 10 evaluated literally: every vertex, every leaf, then a dense sum.

    ``h(x) = sum_l w_l min_{(d, v) in l} ReLU(d (x[f_v] - t_v))`` with the
    ``min`` over the path to leaf ``l``. Cost ``O(2**depth * units)`` per sample
    and tree; same result as [`hinge_forest_reference`][keras_trees.ops.hinge.hinge_forest_reference]. Used to check the
    sparse implementations and as the dense baseline of ``benchmarks/hinge_speed.py``.
    """
    x, thresholds, feature_indices, leaf_weights = _convert(
        x, thresholds, feature_indices, leaf_weights
    )
    depth = _validate_shapes(x, thresholds, feature_indices, leaf_weights, fern)
    _check_values(x, thresholds, leaf_weights)
    trees = thresholds.shape[0]
    batch = ops.shape(x)[0]
    r = ops.take(x, feature_indices, axis=1) - thresholds[None]  # (batch, trees, vertices)
    left, right = ops.relu(-r), ops.relu(r)
    member = None
    for level in range(depth):
        if fern:
            lo, hi = level, level + 1
        else:
            lo, hi = 2**level - 1, 2 ** (level + 1) - 1
        go_left, go_right = left[..., lo:hi], right[..., lo:hi]
        if member is not None:
            # where, not ops.minimum: Keras promotes float64 to float32 there on PyTorch.
            go_left = ops.where(go_left < member, go_left, member)
            go_right = ops.where(go_right < member, go_right, member)
        member = ops.reshape(ops.stack([go_left, go_right], axis=-1), (batch, trees, 2 ** (level + 1)))
    return ops.einsum("bml,mlk->bmk", member, leaf_weights)


@keras_trees_export("keras_trees.ops")
def hinge_forest(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Per-tree hinge-forest outputs ``(batch, num_trees, units)``.

    Same arguments and result as [`hinge_forest_reference`][keras_trees.ops.hinge.hinge_forest_reference]. With the
    TensorFlow backend and the custom ops loaded, runs the compiled
    multi-threaded traversal and its sparse backward pass.
    """
    if _library.custom_ops_available("hinge"):
        # The kernel checks the values (x, thresholds, leaf_weights, int32 ids).
        x, thresholds, feature_indices, leaf_weights = _convert(
            x, thresholds, feature_indices, leaf_weights, compiled=True
        )
        _validate_shapes(x, thresholds, feature_indices, leaf_weights, fern)
        kernels = _library.binding("hinge")
        return kernels.hinge_forest(x, thresholds, feature_indices, leaf_weights, fern)
    return hinge_forest_reference(x, thresholds, feature_indices, leaf_weights, fern)


@keras_trees_export("keras_trees.ops")
def hinge_forest_traversal(x, thresholds, feature_indices, fern=False):
    """``(leaf, margin, vertex)`` of Algorithm 3, each ``(batch, num_trees)``.

    See [`hinge_traversal_reference`][keras_trees.ops.hinge.hinge_traversal_reference]; dispatches to the compiled op where
    available.
    """
    if _library.custom_ops_available("hinge"):
        x, thresholds, feature_indices, _ = _convert(x, thresholds, feature_indices, None, compiled=True)
        depth = _validate_shapes(x, thresholds, feature_indices, None, fern)
        kernels = _library.binding("hinge")
        no_units = ops.zeros((thresholds.shape[0], 2**depth, 0), dtype=x.dtype)
        _, leaf, margin, vertex = kernels.hinge_forest_traversal(
            x, thresholds, feature_indices, no_units, fern
        )
        return leaf, margin, vertex
    return hinge_traversal_reference(x, thresholds, feature_indices, fern)
