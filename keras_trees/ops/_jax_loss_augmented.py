"""JAX (XLA FFI) wrapper of the compiled loss-augmented inference (no gradient:
the selected leaves are piecewise constant; the surrogate's gradient flows
through [`keras_trees.ops.loss_augmented.surrogate`][keras_trees.ops.loss_augmented.surrogate]). Imported only under
the JAX backend with the kernels loaded."""

import jax.numpy as jnp

from keras_trees.ops import _jax_common as common


def loss_augmented_inference(x, split_weights, split_bias, leaf_values, labels, loss, fast):
    x = jnp.asarray(x)
    out = common.out_dtype(x)
    dtype = common.compute_dtype(x)
    x, w, b, theta = common.no_gradient(*common.cast(dtype, x, split_weights, split_bias, leaf_values))
    (labels,) = common.no_gradient(jnp.asarray(labels).astype("int32" if loss == "log" else dtype))
    batch = (x.shape[0],)
    g, h, score = common.call(
        "KerasTreesLossAugmentedInference",
        (common.shape(batch, "int32"), common.shape(batch, "int32"), common.shape(batch, dtype)),
        x, w, b, theta, labels, log_loss=loss == "log", fast=bool(fast),
    )
    return g, h, score.astype(out)
