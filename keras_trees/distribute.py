"""Distribution strategies that Keras' ``fit`` can train with.

Keras 3's TensorFlow trainer (3.15 and earlier 3.x releases) fails under
``tf.distribute.MultiWorkerMirroredStrategy`` in two places
(keras-team/keras#20585):

* before training, ``fit`` reduces the whole first ``(x, y)`` batch in one
  ``strategy.reduce`` call ("Attempt to convert a value (PerReplica...) to a
  Tensor");
* every step reduces the scalar loss and metrics with ``axis=0`` ("Invalid
  reduction dimension 0 for input with 0 dimensions").

[`keras_compatible`][keras_trees.distribute.keras_compatible] lets the strategy's ``reduce`` take what Keras gives
it (nests reduced tensor by tensor, scalars reduced without an axis); nothing
else changes. [`multi_worker_strategy`][keras_trees.distribute.multi_worker_strategy] builds the strategy with it.
"""

from keras_trees.api_export import keras_trees_export, public_api


@keras_trees_export("keras_trees.distribute")
def keras_compatible(strategy):
    """``strategy`` (changed in place and returned) with a ``reduce`` that
    Keras' ``fit`` can call under several workers (see the module docs).

    >>> import tensorflow as tf
    >>> s = keras_compatible(tf.distribute.get_strategy())
    >>> float(s.reduce("SUM", {"a": tf.constant(2.0)}, axis=None)["a"])
    2.0
    """
    import tensorflow as tf

    if getattr(strategy, "_keras_trees_compatible", False):
        return strategy
    reduce = strategy.reduce

    def one(reduce_op, value, axis):
        if axis is not None and all(
            getattr(t, "shape", None) is not None and t.shape.rank == 0
            for t in strategy.experimental_local_results(value)
        ):
            axis = None
        return reduce(reduce_op, value, axis=axis)

    def reduce_each(reduce_op, value, axis=None):
        return tf.nest.map_structure(lambda v: one(reduce_op, v, axis), value)

    strategy.reduce = reduce_each
    strategy._keras_trees_compatible = True
    return strategy


@keras_trees_export("keras_trees.distribute")
def multi_worker_strategy(**kwargs):
    """``tf.distribute.MultiWorkerMirroredStrategy(**kwargs)`` ready for
    ``model.fit`` ([`keras_compatible`][keras_trees.distribute.keras_compatible]). Workers find each other through
    ``TF_CONFIG`` (or ``cluster_resolver=``), as for the strategy itself."""
    import tensorflow as tf

    return keras_compatible(tf.distribute.MultiWorkerMirroredStrategy(**kwargs))


__all__ = public_api(__name__)
