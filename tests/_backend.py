"""Backend-dependent helpers shared by the tests of ops, kernels and properties."""

import contextlib

import keras

BACKEND = keras.backend.backend()


@contextlib.contextmanager
def precision(dtype):
    """float64 (and int64) arrays need JAX's x64 mode (elsewhere a no-op)."""
    if BACKEND == "jax" and "64" in str(dtype):
        import jax

        with jax.enable_x64(True):
            yield
    else:
        yield


def compiled(fn):
    """``fn`` compiled by the backend: ``tf.function`` or ``jax.jit`` (torch: as is)."""
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)
    return fn


def runtime_errors():
    """The backend's error for a check that fails inside a compiled function."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return (tf.errors.InvalidArgumentError,)
    if BACKEND == "jax":
        import jax

        return (jax.errors.JaxRuntimeError,)
    return ()
