"""Shared pieces of the JAX (XLA FFI) wrappers. Imported only under the JAX
backend with the kernels loaded (``keras_trees.ops._library``)."""

import jax
import jax.numpy as jnp

from keras_trees.ops import _library

_SUPPORTED = (jnp.dtype("float32"), jnp.dtype("float64"))


def compute_dtype(x):
    """float32 or float64: the kernels' dtypes (mixed precision computes in float32)."""
    dtype = jnp.dtype(x.dtype)
    return dtype if dtype in _SUPPORTED else jnp.dtype("float32")


def out_dtype(x):
    """The dtype results come back in: x's when floating, else float32."""
    dtype = jnp.dtype(x.dtype)
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.dtype("float32")


def cast(dtype, *arrays):
    return [jnp.asarray(a).astype(dtype) for a in arrays]


def call(target, result_shapes, *args, **attrs):
    """``jax.ffi.ffi_call`` of a handler (XLA picks the CPU or CUDA one by the
    device; inside ``_library.portable_bodies()`` the CPU emulation of the
    CUDA one); batched (vmap) calls run sample batch by sample batch."""
    return jax.ffi.ffi_call(_library.target(target), result_shapes, vmap_method="sequential")(*args, **attrs)


def shape(shape_, dtype):
    return jax.ShapeDtypeStruct(tuple(int(d) for d in shape_), jnp.dtype(dtype))


def no_gradient(*arrays):
    """Piecewise-constant kernels (hard routing, argmax inference) have no
    gradient: their inputs are cut from autodiff, as ``tf.no_gradient`` does."""
    return [jax.lax.stop_gradient(jnp.asarray(a)) for a in arrays]
