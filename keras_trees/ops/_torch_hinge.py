"""PyTorch (``torch.library``) wrappers of the compiled hinge-forest ops, with
an autograd formula calling the backward op. Imported only under the PyTorch
backend with the kernels loaded."""

import torch

from keras_trees.ops import _torch_common as common


def _hinge_forest_fake(x, thresholds, feature_indices, leaf_weights, fern):
    batch, trees, units = x.shape[0], thresholds.shape[0], leaf_weights.shape[2]
    pairs = (batch, trees)
    return (x.new_empty((batch, trees, units)), x.new_empty(pairs, dtype=torch.int32), x.new_empty(pairs),
            x.new_empty(pairs, dtype=torch.int32))


def _hinge_forest_grad_fake(grad_output, grad_margin, x, feature_indices, leaf_weights, leaf, margin, vertex,
                            fern, need_grad_x):
    return x.new_empty((x.shape[0], x.shape[1] if need_grad_x else 0)), x.new_empty(feature_indices.shape), x.new_empty(leaf_weights.shape)


def _setup_context(ctx, inputs, output):
    x, _, feature_indices, leaf_weights, fern = inputs
    _, leaf, margin, vertex = output
    ctx.save_for_backward(x, feature_indices, leaf_weights, leaf, margin, vertex)
    ctx.fern = fern


def _backward(ctx, grad_output, grad_leaf, grad_margin, grad_vertex):
    x, feature_indices, leaf_weights, leaf, margin, vertex = ctx.saved_tensors
    batch, trees, units = x.shape[0], leaf.shape[1], leaf_weights.shape[2]
    grad_output = common.grad_or_zeros(grad_output, x.new_empty((batch, trees, units)))
    grad_margin = common.grad_or_zeros(grad_margin, margin)
    needs = ctx.needs_input_grad
    # grad_x is computed only when x requires it (the first layer on raw
    # inputs does not); feature_indices are integers: no gradient.
    gx, gt, gw = common.ops().hinge_forest_grad(grad_output, grad_margin, x, feature_indices, leaf_weights, leaf,
                                                margin, vertex, ctx.fern, bool(needs[0]))
    return gx if needs[0] else None, gt if needs[1] else None, None, gw if needs[3] else None, None


def hinge_forest_traversal(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Kernel outputs ``(output, leaf, margin, vertex)``; output and margin in x's dtype."""
    x = common.tensor(x)
    out = common.out_dtype(x)
    x, t, w = common.cast(common.compute_dtype(x), x, thresholds, leaf_weights)
    (f,) = common.cast(torch.int32, feature_indices)
    output, leaf, margin, vertex = common.ops().hinge_forest(x, t, f, w, bool(fern))
    return output.to(out), leaf, margin.to(out), vertex


def hinge_forest(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Per-tree outputs ``(batch, num_trees, units)``."""
    return hinge_forest_traversal(x, thresholds, feature_indices, leaf_weights, fern)[0]


def register():
    """Registers the ops' fake kernels, autograd formulas and vmap errors
    (called once, when ``keras_trees.ops._library`` has loaded the library)."""
    common.register_ops({"hinge_forest": _hinge_forest_fake, "hinge_forest_grad": _hinge_forest_grad_fake},
                        {"hinge_forest": (_backward, _setup_context)})
