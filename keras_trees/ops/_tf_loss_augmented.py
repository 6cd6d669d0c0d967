"""TensorFlow wrapper of the compiled loss-augmented inference op (no gradient:
the selected leaves are piecewise constant; the surrogate's gradient flows
through [`keras_trees.ops.loss_augmented.surrogate`][keras_trees.ops.loss_augmented.surrogate]). Imported only when
the op library is loaded."""

import tensorflow as tf

from keras_trees.ops import _library

tf.no_gradient("KerasTrees>LossAugmentedInference")

_SUPPORTED = (tf.float32, tf.float64)


def loss_augmented_inference(x, split_weights, split_bias, leaf_values, labels, loss, fast):
    x = tf.convert_to_tensor(x)
    dtype = x.dtype if x.dtype in _SUPPORTED else tf.float32
    out_dtype = x.dtype if x.dtype.is_floating else tf.float32
    x, w, b, theta = (tf.cast(t, dtype) for t in (x, split_weights, split_bias, leaf_values))
    labels = tf.cast(labels, tf.int32 if loss == "log" else dtype)
    g, h, score = _library.module().keras_trees_loss_augmented_inference(
        x, w, b, theta, labels, loss=loss, fast=bool(fast)
    )
    return g, h, tf.cast(score, out_dtype)
