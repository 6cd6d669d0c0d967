"""PyTorch (``torch.library``) wrappers of the compiled hard-routing ops (no
gradient: routing is piecewise constant, so the inputs are detached, as
``tf.no_gradient`` and ``jax.lax.stop_gradient`` do). Imported only under the
PyTorch backend with the kernels loaded."""

import torch

from keras_trees import topology
from keras_trees.ops import _torch_common as common


def _outputs(x, is_split, with_path_values):
    batch, (trees, internal) = x.shape[0], is_split.shape
    levels = topology.max_depth_from_internal(internal) if with_path_values else 0
    return x.new_empty((batch, trees), dtype=torch.int32), x.new_empty((batch, trees, levels))


def _hard_route_fake(x, split_weights, split_bias, is_split, with_path_values):
    return _outputs(x, is_split, with_path_values)


def _hard_route_experts_fake(x, split_weights, split_bias, expert_weights, threshold, is_split, with_path_values):
    return _outputs(x, is_split, with_path_values)


def _route(op, x, arrays, is_split, with_path_values):
    x = common.tensor(x)
    out = common.out_dtype(x)
    x, *arrays = [a.detach() for a in common.cast(common.compute_dtype(x), x, *arrays)]
    (is_split,) = common.cast(torch.bool, common.tensor(is_split).detach())
    node, path = op(x, *arrays, is_split, bool(with_path_values))
    return node, path.to(out)


def hard_route(x, split_weights, split_bias, is_split, with_path_values=True):
    return _route(common.ops().hard_route, x, (split_weights, split_bias), is_split, with_path_values)


def hard_route_experts(x, split_weights, split_bias, expert_weights, threshold, is_split, with_path_values=True):
    return _route(common.ops().hard_route_experts, x, (split_weights, split_bias, expert_weights, threshold),
                  is_split, with_path_values)


def register():
    """Registers the ops' fake kernels, autograd formulas and vmap errors
    (called once, when ``keras_trees.ops._library`` has loaded the library)."""
    common.register_ops({"hard_route": _hard_route_fake, "hard_route_experts": _hard_route_experts_fake})
