"""Runtime check of a forest topology (``node_state``) on every path.

[`keras_trees.topology.validate`][keras_trees.topology.validate] checks a NumPy ``node_state`` and says
which tree and position is wrong; `node_state` here holds the same rules
on a tensor or variable (eager, ``tf.function``, ``jax.jit``): every value is
``ABSENT``/``LEAF``/``SPLIT``, no split on the last level, every root present,
and a position is present exactly when its parent is a split.
"""

import numpy as np
from keras import ops

from keras_trees import topology
from keras_trees.validation import tensors


def node_state(state, name="node_state"):
    """Returns ``state``; fails unless it is a valid forest topology."""
    if isinstance(state, np.ndarray):
        try:
            topology.validate(state)
        except ValueError as exc:
            raise ValueError(f"{name} is not a valid topology: {exc}") from None
        return state
    if tensors.is_keras_symbolic(state):
        return state
    positions = state.shape[-1]
    if len(state.shape) != 2 or positions is None:
        raise ValueError(f"{name} must have shape (num_trees, 2**(max_depth + 1) - 1), got {tuple(state.shape)}")
    depth = topology.max_depth_from_positions(int(positions))
    message = (f"{name} is not a valid topology: values must be ABSENT (0), LEAF (1) or SPLIT (2), "
               f"every root present, no SPLIT on the last level (depth {depth}), and a position "
               "present exactly when its parent is a SPLIT")
    s = ops.convert_to_tensor(state)
    if tensors.defer(TopologyCheck(s, message)):  # one check op with the call's other checks
        return state
    check = tensors.require(_valid(s), message)
    return tensors.after(check, state)


def _valid(s):
    """Scalar boolean: ``s`` (``(num_trees, positions)``) is a valid topology."""
    positions = s.shape[-1]
    internal = topology.num_internal(topology.max_depth_from_positions(int(positions)))
    known = ops.logical_or(ops.equal(s, topology.ABSENT), ops.logical_or(ops.equal(s, topology.LEAF), ops.equal(s, topology.SPLIT)))
    ok = ops.all(known)
    ok = ops.logical_and(ok, ops.logical_not(ops.any(ops.equal(s[:, internal:], topology.SPLIT))))
    ok = ops.logical_and(ok, ops.all(ops.not_equal(s[:, 0], topology.ABSENT)))
    if positions > 1:
        parents = np.asarray(topology.parent(np.arange(1, positions)), dtype="int32")
        present = ops.not_equal(s[:, 1:], topology.ABSENT)
        parent_split = ops.equal(ops.take(s, parents, axis=1), topology.SPLIT)
        ok = ops.logical_and(ok, ops.all(ops.equal(present, parent_split)))
    return ok


class TopologyCheck(tensors.KernelCheck):
    """``x`` (``node_state``) is a valid topology (the rules above)."""

    kind = "topology"

    def condition(self):
        return (_valid(self.x), self.message, ValueError)
