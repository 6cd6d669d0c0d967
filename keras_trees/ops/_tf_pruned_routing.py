"""TensorFlow wrappers of the compiled pruned-routing ops and their registered
gradients. Imported only when the op library is loaded."""

import tensorflow as tf

from keras_trees.ops import _library

_SUPPORTED = (tf.float32, tf.float64)
_OBLIQUE = "KerasTrees>PrunedRouting"
_EXPERTS = "KerasTrees>PrunedRoutingExperts"


def _splits(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0):
    """``(out_dtype, x, split inputs...)`` cast to a supported dtype; the split
    inputs end with ``is_split`` (oblique: weights, bias, gamma; experts:
    weights, bias, expert weights, rate0, steepness)."""
    x = tf.convert_to_tensor(x)
    out_dtype = x.dtype if x.dtype.is_floating else tf.float32
    dtype = x.dtype if x.dtype in _SUPPORTED else tf.float32
    floats = [split_weights, split_bias] + ([] if expert_weights is None else [expert_weights, rate0]) + [gamma]
    return out_dtype, [tf.cast(x, dtype)] + [tf.cast(t, dtype) for t in floats] + [tf.cast(is_split, tf.bool)]


def _attrs(threshold, expert_weights, annealed):
    attrs = {"threshold": float(threshold)}
    if expert_weights is not None:
        attrs["annealed"] = bool(annealed)
    return attrs


def pruned_route(x, split_weights, split_bias, gamma, is_split, leaf_values, threshold,
                   expert_weights=None, rate0=None, annealed=True):
    """Raw op outputs ``(output, kept_leaves, split_evaluations, dropped_mass)``."""
    out_dtype, inputs = _splits(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0)
    v = tf.cast(leaf_values, inputs[0].dtype)
    module = _library.module()
    op = module.keras_trees_pruned_routing if expert_weights is None else module.keras_trees_pruned_routing_experts
    out, kept, evals, dropped = op(*inputs, v, **_attrs(threshold, expert_weights, annealed))
    return tf.cast(out, out_dtype), kept, evals, tf.cast(dropped, out_dtype)


def pruned_leaf_statistics(x, split_weights, split_bias, gamma, is_split, weights, threshold,
                           expert_weights=None, rate0=None, annealed=True):
    out_dtype, inputs = _splits(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0)
    r = tf.cast(weights, inputs[0].dtype)
    module = _library.module()
    op = (module.keras_trees_pruned_leaf_statistics if expert_weights is None
          else module.keras_trees_pruned_leaf_statistics_experts)
    return tf.cast(op(r, *inputs, **_attrs(threshold, expert_weights, annealed)), out_dtype)


def pruned_em_statistics(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight,
                         threshold):
    out_dtype, inputs = _splits(x, split_weights, split_bias, gamma, is_split, None, None)
    dtype = inputs[0].dtype
    counts = _library.module().keras_trees_pruned_em_statistics(
        *inputs, tf.cast(leaf_values, dtype), tf.cast(labels, tf.int32), tf.cast(sample_weight, dtype),
        threshold=float(threshold))
    return tf.cast(counts, out_dtype)


def _attrs_of(op, experts):
    attrs = {"threshold": op.get_attr("threshold")}
    if experts:
        attrs["annealed"] = op.get_attr("annealed")
    return attrs


def _skip_indices(op):
    """Inputs whose gradient the tape does not need (eager and tf.function
    tapes say so; graph-mode tf.gradients does not: compute everything)."""
    try:
        return op.skip_input_indices or ()
    except AttributeError:
        return ()


def _skips_x(op):
    # The inputs of a forest are often data; dL/dx costs as much as the weight gradients.
    return 0 in _skip_indices(op)


def _routing_grad(op, grad_output, experts):
    *inputs, leaf_values = op.inputs
    module = _library.module()
    grad = module.keras_trees_pruned_routing_experts_grad if experts else module.keras_trees_pruned_routing_grad
    skip_x = _skips_x(op)
    grads = grad(grad_output, *inputs, leaf_values, x_grad=not skip_x, **_attrs_of(op, experts))
    # No gradient for is_split (boolean topology).
    return [None if skip_x else grads[0]] + list(grads[1:-1]) + [None, grads[-1]]


@tf.RegisterGradient(_OBLIQUE)
def _pruned_routing_grad(op, grad_output, *unused_statistics_grads):
    # kept_leaves, split_evaluations and dropped_mass are statistics of the
    # walk, treated as constants.
    return _routing_grad(op, grad_output, experts=False)


@tf.RegisterGradient(_EXPERTS)
def _pruned_routing_experts_grad(op, grad_output, *unused_statistics_grads):
    return _routing_grad(op, grad_output, experts=True)


def _statistics_grad(op, grad_statistics, experts):
    # statistics[t, l] = sum_b mu_l(x_b) weights[b, t]: d/dweights[b, t] =
    # sum_l mu_l(x_b) G[t, l], the forward pass with leaf values G; the split
    # gradients are those of that forward pass contracted with the weights.
    weights, *inputs = op.inputs
    module = _library.module()
    attrs = _attrs_of(op, experts)
    forward = module.keras_trees_pruned_routing_experts if experts else module.keras_trees_pruned_routing
    grad = module.keras_trees_pruned_routing_experts_grad if experts else module.keras_trees_pruned_routing_grad
    grad_weights = forward(*inputs, grad_statistics, **attrs)[0]
    skip_x = 1 in _skip_indices(op)
    split_grads = grad(weights, *inputs, grad_statistics, x_grad=not skip_x, **attrs)[:-1]
    return [grad_weights, None if skip_x else split_grads[0]] + list(split_grads[1:]) + [None]


@tf.RegisterGradient("KerasTrees>PrunedLeafStatistics")
def _pruned_leaf_statistics_grad(op, grad_statistics):
    return _statistics_grad(op, grad_statistics, experts=False)


@tf.RegisterGradient("KerasTrees>PrunedLeafStatisticsExperts")
def _pruned_leaf_statistics_experts_grad(op, grad_statistics):
    return _statistics_grad(op, grad_statistics, experts=True)


# Counts for the EM M-step: statistics of the data, not differentiated.
tf.no_gradient("KerasTrees>PrunedEmStatistics")
