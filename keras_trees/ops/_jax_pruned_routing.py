"""JAX (XLA FFI) wrappers of the compiled pruned-routing kernels, with
``jax.custom_vjp`` gradients calling the backward core (which walks the kept
paths again: nothing is stored between the passes). Same functions and
results as ``_tf_pruned_routing``. Imported only under the JAX backend with the
kernels loaded."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import CustomVJPPrimal, SymbolicZero

from keras_trees.ops import _jax_common as common


def _attrs(threshold, experts, annealed):
    return {"threshold": np.float32(threshold), "experts": bool(experts), "annealed": bool(annealed)}


def _forward(attrs, x, splits, is_split, leaf_values):
    batch, trees, units = x.shape[0], is_split.shape[0], leaf_values.shape[2]
    pairs = (batch, trees)
    return common.call(
        "KerasTreesPrunedRouting",
        (common.shape((batch, trees, units), x.dtype), common.shape(pairs, "int32"),
         common.shape(pairs, "int32"), common.shape(pairs, x.dtype)),
        x, *splits, is_split, leaf_values, **attrs,
    )


def _backward(attrs, grad_output, x, splits, is_split, leaf_values, x_grad):
    """``(grad_x or None, split grads, leaf grads)``; without ``x_grad`` the
    kernel skips dL/dx, which costs as much as the weight gradients."""
    shapes = [common.shape(a.shape, x.dtype) for a in (x, *splits, leaf_values)]
    grads = common.call("KerasTreesPrunedRoutingGrad", tuple(shapes),
                        grad_output.astype(x.dtype), x, *splits, is_split, leaf_values, x_grad=bool(x_grad), **attrs)
    return grads[0] if x_grad else None, tuple(grads[1:-1]), grads[-1]


def _primals(*primals):
    """Values of ``jax.custom_vjp`` primals under ``symbolic_zeros=True``, and
    whether x (the first) is differentiated: the inputs of a forest are often
    data, whose gradient nobody asks for."""
    values = jax.tree.map(lambda p: p.value, primals, is_leaf=lambda p: isinstance(p, CustomVJPPrimal))
    return values, bool(primals[0].perturbed)


def _dense(cotangent, like):
    if isinstance(cotangent, SymbolicZero):
        return jnp.zeros(like.shape, like.dtype)
    return cotangent


def _residuals(x_grad, *arrays):
    # Whether x is differentiated is static: it is kept in the residuals'
    # structure (a key), not as a value.
    return {"x_grad" if x_grad else "x_constant": arrays}


def _unpack(residuals):
    (key, arrays), = residuals.items()
    return key == "x_grad", arrays


def _statistics(attrs, weights, x, splits, is_split):
    trees, internal = is_split.shape
    shape = common.shape((trees, 2 * internal + 1, weights.shape[2]), x.dtype)
    return common.call("KerasTreesPrunedLeafStatistics", shape, weights, x, *splits, is_split, **attrs)


# attrs (a hashable tuple of items) is static; is_split is a boolean input (no gradient).
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _routing(attrs, x, splits, is_split, leaf_values):
    return tuple(_forward(dict(attrs), x, splits, is_split, leaf_values))


def _routing_fwd(attrs, x, splits, is_split, leaf_values):
    (x, splits, is_split, leaf_values), x_grad = _primals(x, splits, is_split, leaf_values)
    outputs = _routing(attrs, x, splits, is_split, leaf_values)
    return outputs, _residuals(x_grad, x, splits, is_split, leaf_values)


def _routing_bwd(attrs, residuals, cotangents):
    x_grad, (x, splits, is_split, leaf_values) = _unpack(residuals)
    # kept_leaves, split_evaluations and dropped_mass are statistics of the walk:
    # constants, as in TensorFlow.
    grad_output = _dense(cotangents[0], jax.ShapeDtypeStruct((x.shape[0], is_split.shape[0], leaf_values.shape[2]),
                                                             x.dtype))
    gx, gsplits, gv = _backward(dict(attrs), grad_output, x, splits, is_split, leaf_values, x_grad)
    return gx, gsplits, None, gv


_routing.defvjp(_routing_fwd, _routing_bwd, symbolic_zeros=True)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _leaf_statistics(attrs, weights, x, splits, is_split):
    return _statistics(dict(attrs), weights, x, splits, is_split)


def _leaf_statistics_fwd(attrs, weights, x, splits, is_split):
    (x, weights, splits, is_split), x_grad = _primals(x, weights, splits, is_split)
    statistics = _leaf_statistics(attrs, weights, x, splits, is_split)
    return statistics, _residuals(x_grad, weights, x, splits, is_split)


def _leaf_statistics_bwd(attrs, residuals, grad_statistics):
    # statistics[t, l] = sum_b mu_l(x_b) weights[b, t]: d/dweights[b, t] is the
    # forward pass with leaf values G; the split gradients are those of that
    # forward pass contracted with the weights.
    x_grad, (weights, x, splits, is_split) = _unpack(residuals)
    attrs = dict(attrs)
    g = _dense(grad_statistics, jax.ShapeDtypeStruct((is_split.shape[0], 2 * is_split.shape[1] + 1,
                                                      weights.shape[2]), x.dtype)).astype(x.dtype)
    grad_weights = _forward(attrs, x, splits, is_split, g)[0]
    gx, gsplits, _ = _backward(attrs, weights, x, splits, is_split, g, x_grad)
    return grad_weights, gx, gsplits, None


_leaf_statistics.defvjp(_leaf_statistics_fwd, _leaf_statistics_bwd, symbolic_zeros=True)


def _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0):
    """``(out_dtype, x, split inputs, is_split)`` in a supported dtype; the split
    inputs are (weights, bias, gamma) or (weights, bias, expert weights, rate0,
    steepness gamma), the kernels' order."""
    x = jnp.asarray(x)
    out = common.out_dtype(x)
    dtype = common.compute_dtype(x)
    floats = [split_weights, split_bias] + ([] if expert_weights is None else [expert_weights, rate0]) + [gamma]
    x, *splits = common.cast(dtype, x, *floats)
    return out, x, tuple(splits), jnp.asarray(is_split).astype(bool)


def pruned_route(x, split_weights, split_bias, gamma, is_split, leaf_values, threshold,
                   expert_weights=None, rate0=None, annealed=True):
    """Kernel outputs ``(output, kept_leaves, split_evaluations, dropped_mass)``."""
    out, x, splits, is_split = _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0)
    attrs = tuple(sorted(_attrs(threshold, expert_weights is not None, annealed).items()))
    v = jnp.asarray(leaf_values).astype(x.dtype)
    output, kept, evaluations, dropped = _routing(attrs, x, splits, is_split, v)
    return output.astype(out), kept, evaluations, jax.lax.stop_gradient(dropped).astype(out)


def pruned_leaf_statistics(x, split_weights, split_bias, gamma, is_split, weights, threshold,
                           expert_weights=None, rate0=None, annealed=True):
    out, x, splits, is_split = _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0)
    attrs = tuple(sorted(_attrs(threshold, expert_weights is not None, annealed).items()))
    r = jnp.asarray(weights).astype(x.dtype)
    return _leaf_statistics(attrs, r, x, splits, is_split).astype(out)


def pruned_em_statistics(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight,
                         threshold):
    """EM counts (no gradient: the inputs are cut from autodiff)."""
    out, x, splits, is_split = _prepare(x, split_weights, split_bias, gamma, is_split, None, None)
    v, w = common.cast(x.dtype, leaf_values, sample_weight)
    args = common.no_gradient(x, *splits, is_split, v, jnp.asarray(labels).astype("int32"), w)
    trees, internal = is_split.shape
    shape = common.shape((trees, 2 * internal + 1, v.shape[2]), x.dtype)
    counts = common.call("KerasTreesPrunedEmStatistics", shape, *args, threshold=np.float32(threshold))
    return counts.astype(out)
