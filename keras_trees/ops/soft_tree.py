"""Additive ensembles of perfect soft trees (Tree Ensemble Layer math).

``soft_tree_ensemble`` dispatches to the compiled conditional forward/backward
op when the Keras backend is TensorFlow and the op library is loaded, and to
``soft_tree_ensemble_reference`` (dense, ``keras.ops`` only) otherwise.
"""

from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.ops import _library
from keras_trees.ops.routing import get_activation, leaf_probabilities
from keras_trees.validation import batched, tensors


def _inputs(x, node_weights, node_bias, leaf_weights=None, gamma=1.0, values=False):
    """Converts and checks what is known without the values: ``x`` as
    floating features (integers and booleans cast to the parameters' floating dtype), the parameters
    in ``x``'s dtype, shapes, and ``gamma`` (Python numbers at once); with
    ``values`` also `_check_values`. Under ``jax.jit`` the returned ``x``
    depends on one check call (`keras_trees.validation.tensors.jit_gathered`)."""
    with tensors.jit_gathered() as pending:
        x = tensors.features(x, "x", like=node_weights)
        dtype = tensors.dtype_name(x)
        node_weights = tensors.floating(node_weights, "node_weights", dtype)
        node_bias = None if node_bias is None else tensors.floating(node_bias, "node_bias", dtype)
        if leaf_weights is not None:
            leaf_weights = tensors.floating(leaf_weights, "leaf_weights", dtype)
        gamma = tensors.positive_scalar(gamma, "gamma")
        _validate_shapes(x, node_weights, node_bias, leaf_weights)
        if values:
            _check_values(x, node_weights, node_bias, leaf_weights)
    x = batched.require_all(pending, output=x)
    return x, node_weights, node_bias, leaf_weights, gamma


def _check_values(x, node_weights, node_bias, leaf_weights):
    """Value checks of the ``keras.ops`` path (the compiled kernels make the
    same ones): eager, inside ``tf.function`` and under ``jax.jit``."""
    tensors.finite(x, "x", "the tree ensemble needs finite inputs")
    for name, t in (("node_weights", node_weights), ("node_bias", node_bias), ("leaf_weights", leaf_weights)):
        if t is not None:
            tensors.finite(t, name, "did training diverge?")


def _validate_shapes(x, node_weights, node_bias, leaf_weights):
    if len(x.shape) != 2:
        raise ValueError(f"x must have rank 2 (batch, input_dim), got shape {tuple(x.shape)}")
    if len(node_weights.shape) != 3:
        raise ValueError(
            "node_weights must have shape (num_trees, 2**depth - 1, input_dim), "
            f"got {tuple(node_weights.shape)}"
        )
    trees, internal, dim = node_weights.shape
    if x.shape[1] is not None and dim != x.shape[1]:
        raise ValueError(
            f"x has {x.shape[1]} features but node_weights expects input_dim={dim}"
        )
    if leaf_weights is not None and (len(leaf_weights.shape) != 3 or tuple(leaf_weights.shape[:2]) != (trees, internal + 1)):
        raise ValueError(
            f"leaf_weights must have shape ({trees}, {internal + 1}, units), "
            f"got {tuple(leaf_weights.shape)}"
        )
    if node_bias is not None and tuple(node_bias.shape) != (trees, internal):
        raise ValueError(
            f"node_bias must have shape ({trees}, {internal}), got {tuple(node_bias.shape)}"
        )


@keras_trees_export("keras_trees.ops")
def split_values(x, node_weights, node_bias=None):
    """``t[b, m, i] = <w_{m,i}, x_b> + bias_{m,i}`` for every node of every tree."""
    x = tensors.floating(x, "x")
    node_weights = tensors.floating(node_weights, "node_weights", tensors.dtype_name(x))
    tensors.rank(x, 2, "x", "(batch, input_dim)")
    tensors.rank(node_weights, 3, "node_weights", "(num_trees, num_internal, input_dim)")
    if x.shape[1] is not None and node_weights.shape[2] is not None and x.shape[1] != node_weights.shape[2]:
        raise ValueError(f"x has {x.shape[1]} features but node_weights expects input_dim={node_weights.shape[2]} "
                         f"(shape (num_trees, num_internal, input_dim) = {tuple(node_weights.shape)})")
    t = ops.einsum("bp,mnp->bmn", x, node_weights)
    if node_bias is not None:
        node_bias = tensors.floating(node_bias, "node_bias", tensors.dtype_name(x))
        want, got = tuple(node_weights.shape[:2]), tuple(node_bias.shape)
        if None not in want + got and got != want:
            raise ValueError(f"node_bias must have shape (num_trees, num_internal) = {want}, got {got}")
        t = t + node_bias[None]
    return t


@keras_trees_export("keras_trees.ops")
def soft_tree_ensemble_reference(
    x, node_weights, node_bias, leaf_weights, gamma, activation="smooth_step"
):
    """Dense soft-tree ensemble in ``keras.ops`` (Eq. 1-4): evaluates every node.

    Args:
        x: ``(batch, input_dim)``.
        node_weights: ``(num_trees, 2**depth - 1, input_dim)``, heap order.
        node_bias: ``(num_trees, 2**depth - 1)`` or None.
        leaf_weights: ``(num_trees, 2**depth, units)``, leaves left to right.
        gamma: smooth-step width (or logistic scale), > 0.
        activation: ``"smooth_step"`` or ``"logistic"``.

    Returns:
        ``(batch, units)``: sum over trees of ``sum_l P(x -> l) o_l``.
    """
    x, node_weights, node_bias, leaf_weights, gamma = _inputs(x, node_weights, node_bias, leaf_weights, gamma,
                                                              values=True)
    probs = _leaf_probabilities(x, node_weights, node_bias, gamma, activation)
    return ops.einsum("bml,mlk->bk", probs, leaf_weights)


@keras_trees_export("keras_trees.ops")
def soft_tree_leaf_probabilities(x, node_weights, node_bias, gamma, activation="smooth_step"):
    """``(batch, num_trees, 2**depth)`` probability that each sample reaches each leaf."""
    x, node_weights, node_bias, _, gamma = _inputs(x, node_weights, node_bias, None, gamma, values=True)
    return _leaf_probabilities(x, node_weights, node_bias, gamma, activation)


def _leaf_probabilities(x, node_weights, node_bias, gamma, activation):
    s = get_activation(activation)(split_values(x, node_weights, node_bias), gamma)
    return leaf_probabilities(s)


@keras_trees_export("keras_trees.ops")
def soft_tree_ensemble(
    x,
    node_weights,
    node_bias,
    leaf_weights,
    gamma,
    activation="smooth_step",
    training=True,
):
    """Soft-tree ensemble output with conditional computation where available.

    Same arguments and result as [`soft_tree_ensemble_reference`][keras_trees.ops.soft_tree.soft_tree_ensemble_reference]. With the
    TensorFlow backend and the custom ops loaded, the smooth-step ensemble runs
    the paper's conditional forward pass and conditional backward pass; it only
    touches the nodes each sample can reach. ``training=False`` skips recording
    the fractional trees (gradients are still available: the backward pass then
    re-runs the forward walk once).
    """
    get_activation(activation)
    if activation == "smooth_step" and _library.custom_ops_available("soft_tree"):
        # The kernel checks the values (x, the parameters and gamma).
        x, node_weights, node_bias, leaf_weights, gamma = _inputs(x, node_weights, node_bias, leaf_weights, gamma)
        kernels = _library.binding("soft_tree")
        return kernels.soft_tree_ensemble(
            x, node_weights, node_bias, leaf_weights, gamma, with_trace=training
        )
    return soft_tree_ensemble_reference(
        x, node_weights, node_bias, leaf_weights, gamma, activation
    )


@keras_trees_export("keras_trees.ops")
def mean_reachable_leaves(x, node_weights, node_bias, gamma, activation="smooth_step"):
    """Mean number of leaves with ``P(x -> l) > 0`` per sample and tree (paper
    Figure 2); 0 for an empty batch."""
    get_activation(activation)
    if activation == "smooth_step" and _library.custom_ops_available("soft_tree"):
        kernels = _library.binding("soft_tree")
    else:
        kernels = None
    counted = hasattr(kernels, "mean_reachable_leaves")  # TensorFlow counts on the trace (the kernel checks)
    x, node_weights, node_bias, _, gamma = _inputs(x, node_weights, node_bias, None, gamma, values=not counted)
    if counted:
        return kernels.mean_reachable_leaves(x, node_weights, node_bias, gamma)
    probs = _leaf_probabilities(x, node_weights, node_bias, gamma, activation)
    reached = ops.sum(ops.cast(probs > 0, "float32"), axis=-1)  # (batch, trees)
    pairs = ops.cast(ops.shape(reached)[0] * ops.shape(reached)[1], "float32")
    return ops.sum(reached) / ops.maximum(pairs, 1.0)
