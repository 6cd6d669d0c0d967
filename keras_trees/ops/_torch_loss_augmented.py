"""PyTorch (``torch.library``) wrapper of the compiled loss-augmented inference
(no gradient: the selected leaves are piecewise constant, so the inputs are
detached; the surrogate's gradient flows through
[`keras_trees.ops.loss_augmented.surrogate`][keras_trees.ops.loss_augmented.surrogate]). Imported only under the
PyTorch backend with the kernels loaded."""

import torch

from keras_trees.ops import _torch_common as common


def _fake(x, split_weights, split_bias, leaf_values, labels, log_loss, fast):
    batch = (x.shape[0],)
    return x.new_empty(batch, dtype=torch.int32), x.new_empty(batch, dtype=torch.int32), x.new_empty(batch)


def loss_augmented_inference(x, split_weights, split_bias, leaf_values, labels, loss, fast):
    x = common.tensor(x)
    out = common.out_dtype(x)
    dtype = common.compute_dtype(x)
    x, w, b, theta = [a.detach() for a in common.cast(dtype, x, split_weights, split_bias, leaf_values)]
    (labels,) = common.cast(torch.int32 if loss == "log" else dtype, common.tensor(labels).detach())
    g, h, score = common.ops().loss_augmented_inference(x, w, b, theta, labels, loss == "log", bool(fast))
    return g, h, score.to(out)


def register():
    """Registers the ops' fake kernels, autograd formulas and vmap errors
    (called once, when ``keras_trees.ops._library`` has loaded the library)."""
    common.register_ops({"loss_augmented_inference": _fake})
