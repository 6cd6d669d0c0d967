"""The modified batch normalization of random hinge forests (Lay et al. 2018, Section 4)."""

import numbers

import keras
from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.layers import _validation
from keras_trees.validation import batched, tensors
from keras_trees.validation.layer_inputs import CheckedInputs
from keras_trees.validation.variables import CheckedLoading


@keras_trees_export("keras_trees.layers")
class HingeBatchNormalization(CheckedLoading, CheckedInputs, keras.layers.Layer):
    """Batch normalization that computes the same function in training and inference.

    Outputs ``(x - moving_mean) / sqrt(|moving_variance| + epsilon)`` always, also
    while training. Training calls then update the running statistics with the
    batch's mean and (unbiased) variance *after* normalizing, and the backward
    pass treats the statistics as constants (gradient ``1 / std``). This is the
    normalization the random hinge forest paper puts in front of its trees so
    that thresholds can be initialized as ``U(-3, 3)`` standard deviations; unlike
    ``keras.layers.BatchNormalization`` it never normalizes with the current
    batch's statistics, so a sample's output does not depend on its batch.

    Update rule (as in the paper's implementation): at the ``n``-th training call
    ``stat <- a * stat + (1 - a) * batch_stat`` with ``a = min(n / (n + 1),
    momentum)``, i.e. an exact running average over the first calls, then an
    exponential moving average. The first training call therefore uses the
    initial statistics (mean 0, variance 1) and replaces them by its batch's.
    Batches of a single sample leave the statistics unchanged, and so does a
    frozen layer (``trainable = False``), as with Keras' batch normalization.

    Inputs holding NaN or Inf are rejected on every path, like every keras-trees
    layer: ``ValueError: x contains NaN or Inf`` eagerly, the same message in the
    backend's runtime error inside ``tf.function``/``jax.jit``. Where a
    compiler drops that check (TensorFlow's XLA, ``jit_compile=True``), such a
    training batch still leaves the running statistics unchanged. Statistics
    loaded from a file must be finite.

    No learned scale or offset: the trees' thresholds and leaf weights already
    provide both.

    Args:
        axis: the feature axis (default ``-1``); statistics are computed over all
            other axes (e.g. batch and spatial axes of channels-last images).
            A negative axis counts from the end, so a layer built on
            ``(batch, features)`` also takes ``(batch, ..., features)`` (as
            ``Dense`` does); a non-negative one fixes the rank.
        momentum: the largest weight ``a`` of the old statistics (default 0.99).
        epsilon: added to the variance (default 1e-5).

    Non-trainable weights: ``moving_mean``, ``moving_variance`` (shape
    ``(input_shape[axis],)``) and ``num_updates`` (int32 count of training
    updates).

    Example:

    >>> import numpy as np
    >>> from keras_trees.layers import HingeBatchNormalization
    >>> bn = HingeBatchNormalization()
    >>> x = np.random.default_rng(0).normal(3.0, 2.0, size=(500, 4)).astype("float32")
    >>> _ = bn(x, training=True)           # first call: uses mean 0, variance 1, then updates
    >>> y = bn(x, training=False)          # now (x - 3) / 2 approximately
    >>> bool(abs(float(y.numpy().mean())) < 0.1 and abs(float(y.numpy().std()) - 1) < 0.1)
    True
    """

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise TypeError(f"axis must be an integer, got {axis!r}")
        self.axis = int(axis)
        try:
            if isinstance(momentum, (bool, str, bytes)) or momentum is None:
                raise TypeError
            momentum = float(momentum)
        except (TypeError, ValueError):
            raise TypeError(f"momentum must be a number, got {momentum!r}") from None
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self.epsilon = _validation.positive_float("epsilon", epsilon)

    def build(self, input_shape):
        rank = len(input_shape)
        if not -rank <= self.axis < rank:
            raise ValueError(f"axis={self.axis} is out of range for inputs of rank {rank}")
        self._axis = self.axis % rank
        if self._axis == 0:
            raise ValueError("axis must not be the batch axis 0")
        dim = input_shape[self._axis]
        if dim is None:
            raise ValueError(
                f"HingeBatchNormalization needs a known size on axis {self.axis}, got input "
                f"shape {tuple(input_shape)}"
            )
        self.moving_mean = self.add_weight(
            name="moving_mean", shape=(dim,), initializer="zeros", trainable=False,
            autocast=False,
        )
        self.moving_variance = self.add_weight(
            name="moving_variance", shape=(dim,), initializer="ones", trainable=False,
            autocast=False,
        )
        self.num_updates = self.add_weight(
            name="num_updates", shape=(), dtype="int32", initializer="zeros", trainable=False
        )
        if self.axis < 0:
            # Counted from the end, the feature axis is the same for any number
            # of leading axes: like Dense, inputs of any rank >= 2 with that
            # feature size are taken (statistics over every other axis).
            self.input_spec = keras.layers.InputSpec(min_ndim=max(2, -self.axis + 1), axes={self.axis: dim})
        else:
            self.input_spec = keras.layers.InputSpec(ndim=rank, axes={self._axis: dim})

    def _broadcast(self, stat, rank):
        if self.axis % rank == rank - 1:  # the last axis: broadcasts as it is
            return stat
        shape = [1] * rank
        shape[self.axis % rank] = stat.shape[0]
        return ops.reshape(stat, shape)

    def call(self, inputs, training=None):
        inputs = ops.convert_to_tensor(inputs)
        if not tensors.is_keras_symbolic(inputs):
            # x (when floating) and the running statistics finite: one check, no
            # host trip under jax.jit unless it fails.
            checks = batched.variable_checks(self, [self.moving_mean, self.moving_variance])
            if keras.backend.is_float_dtype(inputs.dtype):
                checks = [tensors.finite_check(inputs, "x contains NaN or Inf")] + checks
            inputs = batched.require_all(checks, output=inputs)
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if not keras.backend.is_float_dtype(dtype):
            dtype = self.compute_dtype
        x = ops.cast(inputs, "float64" if dtype == "float64" else "float32")
        rank = len(x.shape)
        mean = ops.stop_gradient(ops.cast(self.moving_mean, x.dtype))
        var = ops.stop_gradient(ops.cast(self.moving_variance, x.dtype))
        inv_std = 1.0 / ops.sqrt(ops.abs(var) + self.epsilon)
        out = (x - self._broadcast(mean, rank)) * self._broadcast(inv_std, rank)
        if training and self.trainable:
            self._update_statistics(ops.stop_gradient(x), rank)
        return ops.cast(out, dtype)

    def _update_statistics(self, x, rank):
        reduce_axes = [a for a in range(rank) if a != self.axis % rank]
        count = ops.cast(ops.prod(ops.stack([ops.shape(x)[a] for a in reduce_axes])), x.dtype)
        batch_mean = ops.mean(x, axis=reduce_axes)
        centered = x - self._broadcast(batch_mean, rank)
        batch_var = ops.sum(centered * centered, axis=reduce_axes) / ops.maximum(count - 1.0, 1.0)
        n = ops.cast(self.num_updates, x.dtype)
        alpha = ops.minimum(n / (n + 1.0), self.momentum)
        old_mean = ops.cast(self.moving_mean, x.dtype)
        old_var = ops.cast(self.moving_variance, x.dtype)
        # A single value has no variance (and an empty batch no mean): no update.
        # Nor does a batch with NaN or Inf on this path: one such batch would
        # poison the running statistics of every later call.
        finite = ops.all(ops.isfinite(batch_var))
        valid = ops.logical_and(count >= 2.0, finite)
        new_mean = ops.where(valid, alpha * old_mean + (1.0 - alpha) * batch_mean, old_mean)
        new_var = ops.where(valid, alpha * old_var + (1.0 - alpha) * batch_var, old_var)
        self.moving_mean.assign(ops.cast(new_mean, self.moving_mean.dtype))
        self.moving_variance.assign(ops.cast(new_var, self.moving_variance.dtype))
        step = ops.cast(valid, "int32")
        self.num_updates.assign(ops.minimum(self.num_updates + step, 2**30))

    @property
    def _checked_input_axis(self):  # CheckedInputs: the feature axis must be known
        return self.axis

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon})
        return config

    @classmethod
    def from_config(cls, config):
        # The constructor's own errors (a bad argument's ValueError naming it),
        # not Keras' wrapper, which turns them into a TypeError after a dump
        # of the whole config.
        return cls(**config)
