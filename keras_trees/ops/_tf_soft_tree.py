"""TensorFlow wrappers of the compiled ops and their registered gradients.

Imported only when the Keras backend is TensorFlow and the library is loaded.
"""

import tensorflow as tf

from keras_trees.ops import _library

_SUPPORTED = (tf.float32, tf.float64)


def _as_supported(*tensors):
    """Casts to float32 unless everything is already float32/float64 (mixed precision)."""
    dtype = tensors[0].dtype
    if dtype not in _SUPPORTED:
        dtype = tf.float32
    return dtype, [tf.cast(t, dtype) for t in tensors]


def _ensemble_inputs(x, node_weights, node_bias, leaf_weights, gamma):
    x = tf.convert_to_tensor(x)
    out_dtype = x.dtype
    if node_bias is None:
        node_bias = tf.zeros(tf.shape(node_weights)[:2], dtype=node_weights.dtype)
    dtype, (x, w, b, o) = _as_supported(x, node_weights, node_bias, leaf_weights)
    g = tf.cast(gamma, dtype)
    return out_dtype, x, w, b, o, g


def soft_tree_ensemble(x, node_weights, node_bias, leaf_weights, gamma, with_trace=True):
    """The conditional forward pass. On a GPU (TensorFlow's placement, the
    same rule as the dispatch table: ``_library.trace_free()``) and inside
    ``_library.portable_bodies()`` it is the trace-free op, whose gradient op
    walks the reachable subtrees again (``with_trace`` then has no effect);
    on the CPU the traced op, whose gradient reads the trace."""
    out_dtype, x, w, b, o, g = _ensemble_inputs(x, node_weights, node_bias, leaf_weights, gamma)
    if _library.trace_free():
        return tf.cast(_library.module().keras_trees_soft_tree_ensemble_trace_free(x, w, b, o, g), out_dtype)
    out = _library.module().keras_trees_soft_tree_ensemble(x, w, b, o, g, with_trace=bool(with_trace))
    return tf.cast(out[0], out_dtype)


def soft_tree_ensemble_trace(x, node_weights, node_bias, leaf_weights, gamma):
    """Raw op outputs: ``(output, trace_offsets, trace_index, trace_value)``."""
    _, x, w, b, o, g = _ensemble_inputs(x, node_weights, node_bias, leaf_weights, gamma)
    return _library.module().keras_trees_soft_tree_ensemble(x, w, b, o, g, with_trace=True)


def mean_reachable_leaves(x, node_weights, node_bias, gamma):
    trees = tf.shape(node_weights)[0]
    leaves = tf.shape(node_weights)[1] + 1
    dummy = tf.zeros(tf.stack([trees, leaves, 1]), dtype=node_weights.dtype)
    _, _, index, _ = soft_tree_ensemble_trace(x, node_weights, node_bias, dummy, gamma)
    reached = tf.reduce_sum(tf.cast(index < 0, tf.float32))
    pairs = tf.cast(tf.shape(x)[0] * trees, tf.float32)
    return reached / tf.maximum(pairs, 1.0)


def _gamma_grad(w, b, gw, gb, g):
    """The gradient of ``gamma``: the split values enter the smooth-step as
    ``t / gamma``, so ``dL/dgamma = -sum(dL/dt * t) / gamma``, and since
    ``t = w . x + b`` that sum is ``sum(w * dL/dw) + sum(b * dL/db)``."""
    return -(tf.reduce_sum(w * gw) + tf.reduce_sum(b * gb)) / g


@tf.RegisterGradient("KerasTrees>SoftTreeEnsemble")
def _soft_tree_ensemble_grad(op, grad_output, *unused_trace_grads):
    x, w, b, o, g = op.inputs
    if op.get_attr("with_trace"):
        _, offsets, index, value = op.outputs
    else:  # inference-mode call: record the fractional trees now
        _, offsets, index, value = _library.module().keras_trees_soft_tree_ensemble(
            x, w, b, o, g, with_trace=True
        )
    gx, gw, gb, go = _library.module().keras_trees_soft_tree_ensemble_grad(
        grad_output, x, w, o, offsets, index, value
    )
    return gx, gw, gb, go, _gamma_grad(w, b, gw, gb, g)


@tf.RegisterGradient("KerasTrees>SoftTreeEnsembleTraceFree")
def _soft_tree_ensemble_trace_free_grad(op, grad_output):
    x, w, b, o, g = op.inputs
    gx, gw, gb, go = _library.module().keras_trees_soft_tree_ensemble_trace_free_grad(grad_output, x, w, b, o, g)
    return gx, gw, gb, go, _gamma_grad(w, b, gw, gb, g)
