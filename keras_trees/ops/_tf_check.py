"""TensorFlow wrapper of the compiled check op (``KerasTrees>Check``): the
runtime input checks of one layer call as one op inside TensorFlow graphs
(`keras_trees.validation.batched.require_all`). Imported only when the
op library is loaded."""

import tensorflow as tf

from keras_trees.ops import _library


@tf.RegisterGradient("KerasTrees>Check")
def _check_gradient(op, grad):
    # The value passes through unchanged; the checked tensors get no gradient.
    return [grad] + [None] * (len(op.inputs) - 1)


def check(value, finite, oks, topologies, messages):
    """``value`` after the checks: every tensor of ``finite`` (float32 or
    float64) holds only finite values, every scalar boolean of ``oks`` is
    true and every ``node_state`` of ``topologies`` is a valid topology; else
    ``InvalidArgumentError`` with the message (``messages``: those of
    ``finite``, then ``oks``, then ``topologies``) of the first failed check."""
    return _library.module().keras_trees_check(
        value, list(finite), [tf.reshape(tf.cast(ok, tf.bool), []) for ok in oks],
        [tf.cast(s, tf.int32) for s in topologies], messages=list(messages)
    )
