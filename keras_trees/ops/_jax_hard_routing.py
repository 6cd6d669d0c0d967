"""JAX (XLA FFI) wrappers of the compiled hard-routing kernels (no gradient:
routing is piecewise constant). Imported only under the JAX backend with the
kernels loaded."""

import jax.numpy as jnp

from keras_trees import topology
from keras_trees.ops import _jax_common as common


def _route(target, x, arrays, is_split, with_path_values):
    x = jnp.asarray(x)
    out = common.out_dtype(x)
    dtype = common.compute_dtype(x)
    x, *arrays = common.no_gradient(*common.cast(dtype, x, *arrays))
    (is_split,) = common.no_gradient(jnp.asarray(is_split).astype(bool))
    trees, internal = is_split.shape
    depth = topology.max_depth_from_internal(internal)
    batch = x.shape[0]
    levels = depth if with_path_values else 0
    node, path = common.call(
        target,
        (common.shape((batch, trees), "int32"), common.shape((batch, trees, levels), dtype)),
        x, *arrays, is_split, with_path_values=bool(with_path_values),
    )
    return node, path.astype(out)


def hard_route(x, split_weights, split_bias, is_split, with_path_values=True):
    return _route("KerasTreesHardRouting", x, (split_weights, split_bias), is_split, with_path_values)


def hard_route_experts(x, split_weights, split_bias, expert_weights, threshold, is_split,
                       with_path_values=True):
    return _route("KerasTreesHardRoutingExperts", x,
                  (split_weights, split_bias, expert_weights, threshold), is_split, with_path_values)
