"""NumPy copies of Keras variables and backend tensors, on every backend.

``keras.ops.convert_to_numpy`` calls ``np.array(x)``; under NumPy 2 that passes
``copy=`` to ``x.__array__``, which ``keras.Variable``, TensorFlow's resource
variables and PyTorch tensors do not accept, so every call emits NumPy's
``DeprecationWarning`` ("``__array__`` implementation doesn't accept a copy
keyword"). `to_numpy` reads the value without that path: a variable's
value tensor, TensorFlow's and PyTorch's own ``numpy()``.
"""

import keras
import numpy as np


def to_numpy(value):
    """``value`` (a ``keras.Variable``, a tensor of the active backend, a NumPy
    array or a Python number) as a NumPy array that owns its data (writing to
    it never changes the variable or tensor). Eager values only, as
    ``keras.ops.convert_to_numpy``."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, keras.Variable):
        # The value tensor: a tf.Variable on TensorFlow (read below), a
        # jax.Array on JAX, a torch Parameter on PyTorch.
        value = value.value
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        if isinstance(value, torch.Tensor):
            value = value.detach()
            if value.device.type != "cpu":
                value = value.cpu()
            if value.dtype == torch.bfloat16:  # NumPy has no bfloat16: ml_dtypes' type, as Keras does
                import ml_dtypes

                return value.to(torch.float32).numpy().astype(ml_dtypes.bfloat16)
            return value.numpy().copy()
    if backend == "tensorflow":
        import tensorflow as tf

        if isinstance(value, tf.Variable):
            value = value.read_value()
        if isinstance(value, (tf.SparseTensor, tf.IndexedSlices, tf.RaggedTensor)):
            return np.asarray(keras.ops.convert_to_numpy(value))
        if hasattr(value, "numpy"):
            return np.array(value.numpy())
    # JAX arrays take NumPy 2's copy keyword; Python numbers and lists have no __array__.
    return np.asarray(keras.ops.convert_to_numpy(value))
