"""Checks that run before the computation they guard.

Inside ``tf.function`` a check of :mod:`keras_trees.validation.tensors` is a
``tf.debugging.Assert`` op that nothing else waits for: a compiled kernel that
receives the same bad value may fail first with its own message (naming its
argument, say ``expert_weights``, not the layer's variable), and an optimizer
may already apply NaN gradients. :func:`run_first` makes the guarded value wait
for the checks, so the check's message is the one users see and nothing
computed from a rejected value runs.

Eagerly (and on JAX and PyTorch) the checks raise at once; the value is
returned unchanged.
"""

import keras


def _tf_graph():
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly()


def run_first(checks, value):
    """Runs ``checks()`` and returns ``value``; inside a TensorFlow graph a
    copy of ``value`` that depends on the assertions ``checks()`` created
    (everything computed from it runs after them)."""
    if not _tf_graph():
        checks()
        return value
    import tensorflow as tf

    graph = tf.compat.v1.get_default_graph()
    before = len(graph.get_operations())
    checks()
    asserts = [op for op in graph.get_operations()[before:] if op.type == "Assert"]
    if not asserts:
        return value
    with tf.control_dependencies(asserts):
        return tf.identity(value)
