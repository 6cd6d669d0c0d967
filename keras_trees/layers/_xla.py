"""Whether a keras-trees layer may be compiled with XLA (``jit_compile``), and
what it traces for an export format that cannot hold the compiled ops."""

import math

import keras
from keras import ops

from keras_trees.ops import _library


class XLACompatibility:
    """Mixin for every layer and model that may call the compiled ops.

    ``keras.layers.Layer.__init__`` sets ``self.supports_jit = True`` on every
    instance, so a class attribute cannot opt out. This property reports the
    truth instead: on the TensorFlow backend with the op library loaded, the
    layers call custom ops that XLA cannot compile, so Keras must not turn XLA on
    (``jit_compile="auto"`` turns it on whenever TensorFlow sees a GPU). On JAX,
    PyTorch, or with the ops disabled, the layers are pure ``keras.ops`` and
    compile like any other layer. Inside a user's own XLA-compiled
    ``tf.function`` the ops detect the XLA context and take the reference path.

    The same layers are traced for ONNX and LiteRT exports
    (`keras_trees.export`), whose runtimes hold neither the compiled ops
    nor an assertion that could reject a NaN input: while such an export
    traces the model (`keras_trees.ops._library.portable_export`), a
    call returns NaN in every output of a row whose input holds a NaN or Inf
    (`nan_rows`), instead of the silently finite prediction that hard
    routing would give it.
    """

    @property
    def supports_jit(self):
        return not _library.kernels_block_xla()

    @supports_jit.setter
    def supports_jit(self, value):
        # Keras assigns True in Layer.__init__; the property above decides.
        pass

    def __call__(self, *args, **kwargs):
        outputs = super().__call__(*args, **kwargs)
        if _library.exporting_portable() is None:
            return outputs
        inputs = args[0] if args else kwargs.get("inputs")
        return nan_rows(inputs, outputs)


def _floating(x):
    return (hasattr(x, "dtype") and hasattr(x, "shape") and len(x.shape) >= 1
            and not keras.backend.is_keras_tensor(x)
            and "float" in keras.backend.standardize_dtype(x.dtype))


def nan_rows(inputs, outputs):
    """``outputs`` with NaN in every entry of a row whose ``inputs`` hold a NaN
    or Inf (a row: the input's leading axes, all but the feature axis; for an
    output of another rank, the batch axis).

    Built from ops every export target converts (``abs``, a comparison,
    ``all``, ``where``): ``|x| < inf`` is false exactly for NaN and Inf, and
    no graph optimizer folds it away."""
    flat = [x for x in keras.tree.flatten(inputs) if _floating(x)]
    if not flat:
        return outputs
    finite = None  # per row of the leading axes of the first input
    for x in flat:
        ok = ops.less(ops.abs(x), math.inf)
        ok = ops.all(ok, axis=-1) if len(x.shape) >= 2 else ok
        if finite is not None and len(ok.shape) != len(finite.shape):
            ok = ops.all(ops.reshape(ok, (ops.shape(ok)[0], -1)), axis=-1)
            finite = ops.all(ops.reshape(finite, (ops.shape(finite)[0], -1)), axis=-1)
        finite = ok if finite is None else ops.logical_and(finite, ok)

    def mask(y):
        if not _floating(y):
            return y
        rows = finite
        if len(y.shape) != len(rows.shape) + 1:
            rows = ops.all(ops.reshape(rows, (ops.shape(rows)[0], -1)), axis=-1) if len(rows.shape) > 1 else rows
            rows = ops.reshape(rows, (-1,) + (1,) * (len(y.shape) - 1))
        else:
            rows = ops.expand_dims(rows, -1)
        return ops.where(rows, y, ops.cast(math.nan, y.dtype))

    return keras.tree.map_structure(mask, outputs)
