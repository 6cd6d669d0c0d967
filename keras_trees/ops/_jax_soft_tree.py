"""JAX (XLA FFI) wrappers of the compiled Tree Ensemble Layer kernels, with a
``jax.custom_vjp`` calling the backward core. XLA needs static shapes, so the
forward call records no fractional-tree trace: the backward handler re-runs the
conditional forward pass with a trace in scratch memory and walks it. Imported
only under the JAX backend with the kernels loaded."""

import jax
import jax.numpy as jnp

from keras_trees.ops import _jax_common as common


def _forward(x, w, b, o, g):
    return common.call("KerasTreesSoftTreeEnsemble", common.shape((x.shape[0], o.shape[2]), x.dtype),
                       x, w, b, o, g)


@jax.custom_vjp
def _ensemble(x, w, b, o, g):
    return _forward(x, w, b, o, g)


def _ensemble_fwd(x, w, b, o, g):
    return _forward(x, w, b, o, g), (x, w, b, o, g)


def _ensemble_bwd(residuals, grad_output):
    x, w, b, o, g = residuals
    gx, gw, gb, go = common.call(
        "KerasTreesSoftTreeEnsembleGrad",
        tuple(common.shape(a.shape, x.dtype) for a in (x, w, b, o)),
        grad_output.astype(x.dtype), x, w, b, o, g,
    )
    # The split values enter the smooth-step as t / gamma, so dL/dgamma =
    # -sum(dL/dt * t) / gamma, and with t = w . x + b that sum is
    # sum(w * dL/dw) + sum(b * dL/db) (unused under jit, then removed).
    gg = -(jnp.sum(w * gw) + jnp.sum(b * gb)) / g
    return gx, gw, gb, go, gg


_ensemble.defvjp(_ensemble_fwd, _ensemble_bwd)


def soft_tree_ensemble(x, node_weights, node_bias, leaf_weights, gamma, with_trace=True):
    """``(batch, units)``; ``with_trace`` is TensorFlow's concern (ignored here)."""
    del with_trace
    x = jnp.asarray(x)
    out = common.out_dtype(x)
    dtype = common.compute_dtype(x)
    if node_bias is None:
        node_bias = jnp.zeros(jnp.shape(node_weights)[:2], dtype)
    x, w, b, o = common.cast(dtype, x, node_weights, node_bias, leaf_weights)
    g = jnp.asarray(gamma, dtype).reshape(())
    return _ensemble(x, w, b, o, g).astype(out)
