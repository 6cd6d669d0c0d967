"""TensorFlow wrappers of the compiled hinge-forest ops and their registered gradient.

Imported only when the Keras backend is TensorFlow and the library is loaded.
"""

import tensorflow as tf

from keras_trees.ops import _library

_SUPPORTED = (tf.float32, tf.float64)


def _inputs(x, thresholds, feature_indices, leaf_weights):
    x = tf.convert_to_tensor(x)
    out_dtype = x.dtype
    dtype = out_dtype if out_dtype in _SUPPORTED else tf.float32  # mixed precision: compute in f32
    x = tf.cast(x, dtype)
    thresholds = tf.cast(thresholds, dtype)
    leaf_weights = tf.cast(leaf_weights, dtype)
    feature_indices = tf.cast(feature_indices, tf.int32)
    return out_dtype, x, thresholds, feature_indices, leaf_weights


def hinge_forest_traversal(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Raw op outputs ``(output, leaf, margin, vertex)``; output and margin in x's dtype."""
    out_dtype, x, t, f, w = _inputs(x, thresholds, feature_indices, leaf_weights)
    out, leaf, margin, vertex = _library.module().keras_trees_hinge_forest(x, t, f, w, fern=bool(fern))
    return tf.cast(out, out_dtype), leaf, tf.cast(margin, out_dtype), vertex


def hinge_forest(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Per-tree outputs ``(batch, num_trees, units)``."""
    return hinge_forest_traversal(x, thresholds, feature_indices, leaf_weights, fern)[0]


@tf.RegisterGradient("KerasTrees>HingeForest")
def _hinge_forest_grad(op, grad_output, unused_grad_leaf, grad_margin, unused_grad_vertex):
    x, _, f, w = op.inputs
    _, leaf, margin, vertex = op.outputs
    if grad_output is None:
        grad_output = tf.zeros_like(op.outputs[0])
    if grad_margin is None:
        grad_margin = tf.zeros_like(margin)
    gx, gt, gw = _library.module().keras_trees_hinge_forest_grad(
        grad_output, grad_margin, x, f, w, leaf, margin, vertex, fern=op.get_attr("fern")
    )
    # feature_indices are integers: no gradient.
    return gx, gt, None, gw
