"""TensorFlow wrapper of the compiled hard-routing op (no gradient: routing is
piecewise constant). Imported only when the op library is loaded."""

import tensorflow as tf

from keras_trees.ops import _library

tf.no_gradient("KerasTrees>HardRouting")
tf.no_gradient("KerasTrees>HardRoutingExperts")

_SUPPORTED = (tf.float32, tf.float64)


def hard_route(x, split_weights, split_bias, is_split, with_path_values=True):
    x = tf.convert_to_tensor(x)
    dtype = x.dtype if x.dtype in _SUPPORTED else tf.float32
    out_dtype = x.dtype if x.dtype.is_floating else tf.float32
    x, w, b = (tf.cast(t, dtype) for t in (x, split_weights, split_bias))
    node, path = _library.module().keras_trees_hard_routing(
        x, w, b, tf.cast(is_split, tf.bool), with_path_values=bool(with_path_values)
    )
    return node, tf.cast(path, out_dtype)


def hard_route_experts(x, split_weights, split_bias, expert_weights, threshold, is_split, with_path_values=True):
    x = tf.convert_to_tensor(x)
    dtype = x.dtype if x.dtype in _SUPPORTED else tf.float32
    out_dtype = x.dtype if x.dtype.is_floating else tf.float32
    x, w, b, r, c = (tf.cast(t, dtype) for t in (x, split_weights, split_bias, expert_weights, threshold))
    node, path = _library.module().keras_trees_hard_routing_experts(
        x, w, b, r, c, tf.cast(is_split, tf.bool), with_path_values=bool(with_path_values)
    )
    return node, tf.cast(path, out_dtype)
