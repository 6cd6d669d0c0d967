"""PyTorch (``torch.library``) wrappers of the compiled pruned-routing ops,
with autograd formulas calling the backward op (which walks the kept paths
again: nothing is stored between the passes). Same functions and results as
``_tf_pruned_routing`` and ``_jax_pruned_routing``; dL/dx is computed only
when x requires a gradient. Imported only under the PyTorch backend with the
kernels loaded."""

import torch

from keras_trees.ops import _torch_common as common


def _positions(is_split):
    return 2 * is_split.shape[1] + 1


def _route_fake(x, split_weights, split_bias, gamma, is_split, leaf_values, expert_weights, rate0, threshold,
                annealed):
    pairs = (x.shape[0], is_split.shape[0])
    return (x.new_empty((*pairs, leaf_values.shape[2])), x.new_empty(pairs, dtype=torch.int32),
            x.new_empty(pairs, dtype=torch.int32), x.new_empty(pairs))


def _route_grad_fake(grad_output, x, split_weights, split_bias, gamma, is_split, leaf_values, expert_weights, rate0,
                     threshold, annealed, x_grad):
    experts = [x.new_empty(t.shape if t is not None else (0,)) for t in (expert_weights, rate0)]
    return (x.new_empty(x.shape), x.new_empty(split_weights.shape), x.new_empty(split_bias.shape),
            x.new_empty(gamma.shape), x.new_empty(leaf_values.shape), *experts)


def _statistics_fake(weights, x, split_weights, split_bias, gamma, is_split, expert_weights, rate0, threshold,
                     annealed):
    return x.new_empty((is_split.shape[0], _positions(is_split), weights.shape[2]))


def _em_fake(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight, threshold):
    return x.new_empty((is_split.shape[0], _positions(is_split), leaf_values.shape[2]))


def _split_grads(grads, expert_weights):
    """(w, b, gamma, expert_weights, rate0) gradients of the backward op's
    (grad_x, w, b, gamma, leaf_values, expert_weights, rate0)."""
    _, gw, gb, ggamma, _, gr, grate0 = grads
    return gw, gb, ggamma, (gr if expert_weights is not None else None), (grate0 if expert_weights is not None
                                                                          else None)


def _route_setup(ctx, inputs, output):
    x, w, b, gamma, is_split, v, r, rate0, threshold, annealed = inputs
    ctx.save_for_backward(x, w, b, gamma, is_split, v, r, rate0)
    ctx.attrs = (threshold, annealed)


def _route_backward(ctx, grad_output, *unused_statistics_grads):
    # kept_leaves, split_evaluations and dropped_mass are statistics of the
    # walk: constants, as in TensorFlow and JAX.
    x, w, b, gamma, is_split, v, r, rate0 = ctx.saved_tensors
    needs = ctx.needs_input_grad
    grad_output = common.grad_or_zeros(grad_output, x.new_empty((x.shape[0], is_split.shape[0], v.shape[2])))
    grads = common.ops().pruned_route_grad(grad_output, x, w, b, gamma, is_split, v, r, rate0, *ctx.attrs,
                                           bool(needs[0]))
    gw, gb, ggamma, gr, grate0 = _split_grads(grads, r)
    return grads[0] if needs[0] else None, gw, gb, ggamma, None, grads[4], gr, grate0, None, None


def _statistics_setup(ctx, inputs, output):
    weights, x, w, b, gamma, is_split, r, rate0, threshold, annealed = inputs
    ctx.save_for_backward(weights, x, w, b, gamma, is_split, r, rate0)
    ctx.attrs = (threshold, annealed)


def _statistics_backward(ctx, grad_statistics):
    # statistics[t, l] = sum_b mu_l(x_b) weights[b, t]: d/dweights[b, t] is the
    # forward pass with leaf values G; the split gradients are those of that
    # forward pass contracted with the weights.
    weights, x, w, b, gamma, is_split, r, rate0 = ctx.saved_tensors
    needs = ctx.needs_input_grad
    g = common.grad_or_zeros(grad_statistics, x.new_empty((is_split.shape[0], _positions(is_split),
                                                           weights.shape[2])))
    grad_weights = None
    if needs[0]:
        grad_weights = common.ops().pruned_route(x, w, b, gamma, is_split, g, r, rate0, *ctx.attrs)[0]
    grads = common.ops().pruned_route_grad(weights, x, w, b, gamma, is_split, g, r, rate0, *ctx.attrs,
                                           bool(needs[1]))
    gw, gb, ggamma, gr, grate0 = _split_grads(grads, r)
    return grad_weights, grads[0] if needs[1] else None, gw, gb, ggamma, None, gr, grate0, None, None


def _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0):
    """``(out_dtype, x, w, b, gamma, is_split, expert_weights, rate0)`` in a
    supported dtype (the last two None for oblique splits)."""
    x = common.tensor(x)
    out = common.out_dtype(x)
    dtype = common.compute_dtype(x)
    x, w, b, gamma = common.cast(dtype, x, split_weights, split_bias, gamma)
    r, rate0 = (None, None) if expert_weights is None else common.cast(dtype, expert_weights, rate0)
    (is_split,) = common.cast(torch.bool, common.tensor(is_split).detach())
    return out, x, w, b, gamma, is_split, r, rate0


def pruned_route(x, split_weights, split_bias, gamma, is_split, leaf_values, threshold, expert_weights=None,
                 rate0=None, annealed=True):
    """Kernel outputs ``(output, kept_leaves, split_evaluations, dropped_mass)``."""
    out, x, w, b, gamma, is_split, r, rate0 = _prepare(x, split_weights, split_bias, gamma, is_split,
                                                       expert_weights, rate0)
    (v,) = common.cast(x.dtype, leaf_values)
    output, kept, evaluations, dropped = common.ops().pruned_route(x, w, b, gamma, is_split, v, r, rate0,
                                                                   float(threshold), bool(annealed))
    return output.to(out), kept, evaluations, dropped.detach().to(out)


def pruned_leaf_statistics(x, split_weights, split_bias, gamma, is_split, weights, threshold, expert_weights=None,
                           rate0=None, annealed=True):
    out, x, w, b, gamma, is_split, r, rate0 = _prepare(x, split_weights, split_bias, gamma, is_split,
                                                       expert_weights, rate0)
    (weights,) = common.cast(x.dtype, weights)
    statistics = common.ops().pruned_leaf_statistics(weights, x, w, b, gamma, is_split, r, rate0, float(threshold),
                                                     bool(annealed))
    return statistics.to(out)


def pruned_em_statistics(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight,
                         threshold):
    """EM counts (no gradient: the inputs are detached)."""
    out, x, w, b, gamma, is_split, _, _ = _prepare(x, split_weights, split_bias, gamma, is_split, None, None)
    v, sample_weight = common.cast(x.dtype, leaf_values, sample_weight)
    (labels,) = common.cast(torch.int32, common.tensor(labels).detach())
    args = [a.detach() for a in (x, w, b, gamma, is_split, v, labels, sample_weight)]
    return common.ops().pruned_em_statistics(*args, float(threshold)).to(out)


def register():
    """Registers the ops' fake kernels, autograd formulas and vmap errors
    (called once, when ``keras_trees.ops._library`` has loaded the library)."""
    common.register_ops({"pruned_route": _route_fake, "pruned_route_grad": _route_grad_fake,
                         "pruned_leaf_statistics": _statistics_fake, "pruned_em_statistics": _em_fake},
                        {"pruned_route": (_route_backward, _route_setup),
                         "pruned_leaf_statistics": (_statistics_backward, _statistics_setup)})
