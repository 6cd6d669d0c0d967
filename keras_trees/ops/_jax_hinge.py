"""JAX (XLA FFI) wrappers of the compiled hinge-forest kernels, with a
``jax.custom_vjp`` calling the backward core. Imported only under the JAX
backend with the kernels loaded."""

import functools

import jax
import jax.numpy as jnp

from keras_trees.ops import _jax_common as common


def _forward(x, t, f, w, fern):
    batch, trees, units = x.shape[0], t.shape[0], w.shape[2]
    pairs = (batch, trees)
    return common.call(
        "KerasTreesHingeForest",
        (common.shape((batch, trees, units), x.dtype), common.shape(pairs, "int32"),
         common.shape(pairs, x.dtype), common.shape(pairs, "int32")),
        x, t, f, w, fern=bool(fern),
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _hinge(x, t, f, w, fern):
    return tuple(_forward(x, t, f, w, fern))


def _hinge_fwd(x, t, f, w, fern):
    outputs = _forward(x, t, f, w, fern)
    _, leaf, margin, vertex = outputs
    return tuple(outputs), (x, f, w, leaf, margin, vertex)


def _hinge_bwd(fern, residuals, cotangents):
    x, f, w, leaf, margin, vertex = residuals
    grad_output, _, grad_margin, _ = cotangents
    gx, gt, gw = common.call(
        "KerasTreesHingeForestGrad",
        (common.shape(x.shape, x.dtype), common.shape(f.shape, x.dtype), common.shape(w.shape, x.dtype)),
        grad_output.astype(x.dtype), grad_margin.astype(x.dtype), x, f, w, leaf, margin, vertex,
        fern=bool(fern),
    )
    return gx, gt, None, gw


_hinge.defvjp(_hinge_fwd, _hinge_bwd)


def hinge_forest_traversal(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Kernel outputs ``(output, leaf, margin, vertex)``; output and margin in x's dtype."""
    x = jnp.asarray(x)
    out = common.out_dtype(x)
    x, t, w = common.cast(common.compute_dtype(x), x, thresholds, leaf_weights)
    f = jnp.asarray(feature_indices).astype("int32")
    output, leaf, margin, vertex = _hinge(x, t, f, w, bool(fern))
    return output.astype(out), leaf, margin.astype(out), vertex


def hinge_forest(x, thresholds, feature_indices, leaf_weights, fern=False):
    """Per-tree outputs ``(batch, num_trees, units)``."""
    return hinge_forest_traversal(x, thresholds, feature_indices, leaf_weights, fern)[0]
