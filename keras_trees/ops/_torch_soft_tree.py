"""PyTorch (``torch.library``) wrappers of the compiled Tree Ensemble Layer
ops, with an autograd formula calling the backward op. As in the JAX binding
the output shapes are static: the forward op records no fractional-tree trace,
and the backward op re-runs the conditional forward pass with a trace in
scratch memory, then walks it. Imported only under the PyTorch backend with
the kernels loaded."""

import torch

from keras_trees.ops import _torch_common as common


def _fake(x, node_weights, node_bias, leaf_weights, gamma):
    return x.new_empty((x.shape[0], leaf_weights.shape[2]))


def _grad_fake(grad_output, x, node_weights, node_bias, leaf_weights, gamma, need_grad_x):
    return (x.new_empty((x.shape[0], x.shape[1] if need_grad_x else 0)), x.new_empty(node_weights.shape), x.new_empty(node_bias.shape),
            x.new_empty(leaf_weights.shape))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad_output):
    x, w, b, o, g = ctx.saved_tensors
    needs = ctx.needs_input_grad
    # grad_x (a third of the backward walk) is computed only when x requires
    # it. The split values enter the smooth-step as t / gamma, so dL/dgamma =
    # -sum(dL/dt * t) / gamma, and with t = w . x + b that sum is
    # sum(w * dL/dw) + sum(b * dL/db).
    grad_output = common.grad_or_zeros(grad_output, x.new_empty((x.shape[0], o.shape[2])))
    grads = common.ops().soft_tree_ensemble_grad(grad_output, x, w, b, o, g, bool(needs[0]))
    gx, gw, gb, go = grads
    gg = -((w * gw).sum() + (b * gb).sum()) / g if needs[4] else None
    return (*[grad if need else None for grad, need in zip(grads, needs)], gg)


def soft_tree_ensemble(x, node_weights, node_bias, leaf_weights, gamma, with_trace=True):
    """``(batch, units)``; ``with_trace`` is TensorFlow's concern (ignored here)."""
    del with_trace
    x = common.tensor(x)
    out = common.out_dtype(x)
    dtype = common.compute_dtype(x)
    if node_bias is None:
        node_bias = torch.zeros(tuple(node_weights.shape[:2]), dtype=dtype)
    x, w, b, o = common.cast(dtype, x, node_weights, node_bias, leaf_weights)
    (g,) = common.cast(dtype, common.tensor(gamma).reshape(()))
    return common.ops().soft_tree_ensemble(x, w, b, o, g).to(out)


def register():
    """Registers the ops' fake kernels, autograd formulas and vmap errors
    (called once, when ``keras_trees.ops._library`` has loaded the library)."""
    common.register_ops({"soft_tree_ensemble": _fake, "soft_tree_ensemble_grad": _grad_fake},
                        {"soft_tree_ensemble": (_backward, _setup_context)})
