"""Additive ensembles of perfect soft trees (Tree Ensemble Layer math).

``soft_tree_ensemble`` dispatches to the compiled conditional forward/backward
op when the Keras backend is TensorFlow and the op library is loaded, and to
``soft_tree_ensemble_reference`` (dense, ``keras.ops`` only) otherwise.
"""

from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.ops import _library
from keras_trees.ops.routing import get_activation, leaf_probabilities


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
    if tuple(leaf_weights.shape[:2]) != (trees, internal + 1):
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
    t = ops.einsum("bp,mnp->bmn", x, node_weights)
    if node_bias is not None:
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
    probs = soft_tree_leaf_probabilities(x, node_weights, node_bias, gamma, activation)
    return ops.einsum("bml,mlk->bk", probs, leaf_weights)


@keras_trees_export("keras_trees.ops")
def soft_tree_leaf_probabilities(x, node_weights, node_bias, gamma, activation="smooth_step"):
    """``(batch, num_trees, 2**depth)`` probability that each sample reaches each leaf."""
    s = get_activation(activation)(split_values(x, node_weights, node_bias), gamma)
    return leaf_probabilities(s)


def _check_finite_eager(x, gamma):
    """Input checks the reference path can make when values are concrete."""
    try:
        xv = ops.convert_to_numpy(x)
        gv = float(ops.convert_to_numpy(gamma))
    except Exception:  # symbolic tensors (graph mode): checked by the op or not at all
        return
    import numpy as np

    if not np.all(np.isfinite(xv)):
        raise ValueError("x contains NaN or Inf; the tree ensemble needs finite inputs")
    if not (np.isfinite(gv) and gv > 0):
        raise ValueError(f"gamma must be a finite number > 0, got {gv}")


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

    Same arguments and result as :func:`soft_tree_ensemble_reference`. With the
    TensorFlow backend and the custom ops loaded, the smooth-step ensemble runs
    the paper's conditional forward pass and conditional backward pass; it only
    touches the nodes each sample can reach. ``training=False`` skips recording
    the fractional trees (gradients are still available: the backward pass then
    re-runs the forward walk once).
    """
    x = ops.convert_to_tensor(x)
    node_weights = ops.convert_to_tensor(node_weights)
    leaf_weights = ops.convert_to_tensor(leaf_weights)
    node_bias = None if node_bias is None else ops.convert_to_tensor(node_bias)
    _validate_shapes(x, node_weights, node_bias, leaf_weights)
    if activation == "smooth_step" and _library.custom_ops_available():
        kernels = _library.binding("soft_tree")
        return kernels.soft_tree_ensemble(
            x, node_weights, node_bias, leaf_weights, gamma, with_trace=training
        )
    _check_finite_eager(x, gamma)
    return soft_tree_ensemble_reference(
        x, node_weights, node_bias, leaf_weights, gamma, activation
    )


@keras_trees_export("keras_trees.ops")
def mean_reachable_leaves(x, node_weights, node_bias, gamma, activation="smooth_step"):
    """Mean number of leaves with ``P(x -> l) > 0`` per sample and tree (paper Figure 2)."""
    x = ops.convert_to_tensor(x)
    node_weights = ops.convert_to_tensor(node_weights)
    if activation == "smooth_step" and _library.custom_ops_available():
        kernels = _library.binding("soft_tree")
    else:
        kernels = None
    if hasattr(kernels, "mean_reachable_leaves"):  # TensorFlow counts on the trace
        return kernels.mean_reachable_leaves(x, node_weights, node_bias, gamma)
    probs = soft_tree_leaf_probabilities(x, node_weights, node_bias, gamma, activation)
    return ops.mean(ops.sum(ops.cast(probs > 0, "float32"), axis=-1))
