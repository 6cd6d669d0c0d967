"""One representation of (possibly unbalanced) binary trees and forests.

Every hard-routed family in keras-trees (end-to-end trees and forests, convex
polytope trees, non-greedy trees; perfect Tree Ensemble Layer trees are the
special case "all internal positions are splits") stores its trees the same
way, so the hard-routing op, growth callbacks, saving and export work for all.

Heap layout
-----------
A tree of *maximum* depth ``D`` owns the positions of a perfect binary tree of
depth ``D`` in heap order:

* ``num_internal(D) = 2**D - 1`` positions can hold a split (levels 0..D-1),
* ``num_positions(D) = 2**(D+1) - 1`` positions in all (levels 0..D);
  position ``i`` has children ``2*i + 1`` (left) and ``2*i + 2`` (right),
  parent ``(i - 1) // 2`` and depth ``floor(log2(i + 1))``.

The topology is the integer array ``node_state[tree, position]`` with values

* ``ABSENT`` (0): the position is not part of the tree,
* ``LEAF`` (1): a leaf; its prediction lives at the same position,
* ``SPLIT`` (2): an internal node; its parameters live at the same position.

A valid tree has a root that is a ``LEAF`` or ``SPLIT``, both children of
every ``SPLIT`` present, no child below a ``LEAF`` or ``ABSENT`` position and
no ``SPLIT`` on level ``D`` (see [`validate`][keras_trees.topology.validate]). A sample is routed from
the root: at a split it goes right iff the split value is ``> 0``; it stops at
a leaf.

Layers keep ``node_state`` in a non-trainable ``int32`` Keras variable of shape
``(num_trees, num_positions(D))`` allocated up front for the maximum depth, and
parameters in variables indexed by position (``(num_trees, num_internal(D), ...)``
for splits, ``(num_trees, num_positions(D), ...)`` for leaves). Growing or
pruning a tree only assigns new values ([`split_leaf`][keras_trees.topology.split_leaf], [`make_leaf`][keras_trees.topology.make_leaf]):
no variable is ever added, so a grown tree saves, loads, exports and reloads its
weights into a freshly built model like any layer.

The functions here operate on NumPy arrays (callbacks read the variables, edit
them with these functions and ``assign`` the result).

>>> import numpy as np
>>> state = stump(num_trees=1, max_depth=3)
>>> state = split_leaf(state, 0, 2)        # grow the right child of the root
>>> validate(state, max_depth=3)
>>> leaves(state, 0).tolist(), splits(state, 0).tolist(), tree_depth(state, 0)
([1, 5, 6], [0, 2], 2)
"""

import numpy as np

from keras_trees.api_export import export_constants, keras_trees_export, public_api

ABSENT = 0
LEAF = 1
SPLIT = 2
export_constants("keras_trees.topology", globals(), "ABSENT", "LEAF", "SPLIT")


@keras_trees_export("keras_trees.topology")
def num_internal(max_depth):
    """Positions that can hold a split in a tree of maximum depth ``max_depth``."""
    return 2 ** int(max_depth) - 1


@keras_trees_export("keras_trees.topology")
def num_positions(max_depth):
    """All positions (splits and leaves) of a tree of maximum depth ``max_depth``."""
    return 2 ** (int(max_depth) + 1) - 1


@keras_trees_export("keras_trees.topology")
def max_depth_from_positions(positions):
    """Inverse of [`num_positions`][keras_trees.topology.num_positions]."""
    n = int(positions) + 1
    if positions < 1 or n & (n - 1):
        raise ValueError(f"a heap of maximum depth D has 2**(D+1) - 1 positions, got {positions}")
    return n.bit_length() - 2


@keras_trees_export("keras_trees.topology")
def max_depth_from_internal(num_internal):
    """Inverse of [`num_internal`][keras_trees.topology.num_internal] (the one depth-from-size helper: ops and
    layers that know only their number of split positions call this)."""
    n = int(num_internal)
    if n < 1 or (n + 1) & n:
        raise ValueError(f"a perfect tree has 2**depth - 1 internal nodes (heap positions that can hold a split), "
                         f"got {num_internal}")
    return max_depth_from_positions(2 * n + 1)


@keras_trees_export("keras_trees.topology")
def left_child(i):
    return 2 * np.asarray(i) + 1


@keras_trees_export("keras_trees.topology")
def right_child(i):
    return 2 * np.asarray(i) + 2


@keras_trees_export("keras_trees.topology")
def parent(i):
    return (np.asarray(i) - 1) // 2


@keras_trees_export("keras_trees.topology")
def position_depth(i):
    """Depth (root = 0) of heap positions ``i`` (scalar or array)."""
    i = np.asarray(i, dtype=np.int64)
    return np.floor(np.log2(i + 1) + 1e-9).astype(np.int64)


@keras_trees_export("keras_trees.topology")
def ancestor_at_depth(i, depth):
    """Heap position on level ``depth`` of the path from the root to positions
    ``i`` (array); a position at most ``depth`` deep is its own. ``depth`` is a
    level (>= 0), or an array broadcast against ``i``.

    >>> ancestor_at_depth([0, 5, 12], 1).tolist()
    [0, 2, 2]
    """
    i = np.asarray(i, dtype=np.int64)
    if np.any(np.asarray(depth) < 0):
        raise ValueError(f"depth must be >= 0, got {depth}")
    return ((i + 1) >> np.maximum(position_depth(i) - np.asarray(depth, dtype=np.int64), 0)) - 1


@keras_trees_export("keras_trees.topology")
def empty(num_trees, max_depth):
    return np.zeros((int(num_trees), num_positions(max_depth)), dtype=np.int32)


@keras_trees_export("keras_trees.topology")
def root_leaf(num_trees, max_depth):
    """Trees made of a single leaf."""
    state = empty(num_trees, max_depth)
    state[:, 0] = LEAF
    return state


@keras_trees_export("keras_trees.topology")
def stump(num_trees, max_depth):
    """Trees made of one split and two leaves (the start of greedy growth)."""
    if max_depth < 1:
        raise ValueError(f"a stump needs max_depth >= 1, got {max_depth}")
    state = root_leaf(num_trees, max_depth)
    for t in range(state.shape[0]):
        state = split_leaf(state, t, 0)
    return state


@keras_trees_export("keras_trees.topology")
def perfect(num_trees, depth, max_depth=None):
    """Perfect trees of ``depth`` inside heaps of ``max_depth`` (default ``depth``)."""
    max_depth = depth if max_depth is None else max_depth
    if not 0 <= depth <= max_depth:
        raise ValueError(f"need 0 <= depth <= max_depth, got depth={depth}, max_depth={max_depth}")
    state = empty(num_trees, max_depth)
    state[:, : num_internal(depth)] = SPLIT
    state[:, num_internal(depth): num_positions(depth)] = LEAF
    return state


@keras_trees_export("keras_trees.topology")
def split_leaf(state, tree, node):
    """Turns leaf ``node`` of ``tree`` into a split with two leaf children (copy)."""
    state = np.array(state, copy=True)
    positions = state.shape[1]
    if state[tree, node] != LEAF:
        raise ValueError(f"position {node} of tree {tree} is not a leaf (state {state[tree, node]})")
    if right_child(node) >= positions:
        raise ValueError(
            f"position {node} is on the last level of a tree of maximum depth "
            f"{max_depth_from_positions(positions)} and cannot be split"
        )
    state[tree, node] = SPLIT
    state[tree, left_child(node)] = LEAF
    state[tree, right_child(node)] = LEAF
    return state


@keras_trees_export("keras_trees.topology")
def make_leaf(state, tree, node):
    """Turns ``node`` into a leaf and removes its whole subtree (copy)."""
    state = np.array(state, copy=True)
    if state[tree, node] == ABSENT:
        raise ValueError(f"position {node} of tree {tree} is not part of the tree")
    positions = state.shape[1]
    level = [node]
    state[tree, node] = LEAF
    while True:
        level = [c for n in level for c in (2 * n + 1, 2 * n + 2) if c < positions]
        if not level:
            break
        state[tree, level] = ABSENT
    return state


@keras_trees_export("keras_trees.topology")
def cut_at_depth(state, tree, depth):
    """``tree`` pruned to ``depth`` (copy): every split on level ``depth``
    becomes a leaf and its subtree is removed; shallower nodes are kept."""
    if not int(depth) >= 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    state = np.array(state, copy=True)
    for node in splits(state, tree):
        if position_depth(node) == int(depth):  # siblings on one level: cutting one keeps the others
            state = make_leaf(state, tree, node)
    return state


@keras_trees_export("keras_trees.topology")
def leaves(state, tree):
    return np.flatnonzero(np.asarray(state)[tree] == LEAF)


@keras_trees_export("keras_trees.topology")
def splits(state, tree):
    return np.flatnonzero(np.asarray(state)[tree] == SPLIT)


@keras_trees_export("keras_trees.topology")
def num_leaves(state):
    """Leaves per tree."""
    return (np.asarray(state) == LEAF).sum(axis=1)


@keras_trees_export("keras_trees.topology")
def tree_depth(state, tree):
    """Depth of the deepest leaf of ``tree``."""
    lv = leaves(state, tree)
    return int(position_depth(lv).max()) if lv.size else 0


@keras_trees_export("keras_trees.topology")
def is_split_mask(state):
    """``(num_trees, num_internal)`` booleans: the ``is_split`` input of the hard-routing op."""
    from keras_trees.validation import topology as topology_checks  # it imports this module

    state = topology_checks.node_state(np.asarray(state))
    internal = num_internal(max_depth_from_positions(state.shape[1]))
    return state[:, :internal] == SPLIT


@keras_trees_export("keras_trees.topology")
def validate(state, max_depth=None):
    """Raises ``ValueError`` unless ``state`` is a valid forest (see module docs)."""
    state = np.asarray(state)
    if state.ndim != 2:
        raise ValueError(f"node_state must have shape (num_trees, positions), got {state.shape}")
    depth = max_depth_from_positions(state.shape[1])
    if max_depth is not None and depth != max_depth:
        raise ValueError(f"node_state is for max_depth {depth}, expected {max_depth}")
    if not np.isin(state, (ABSENT, LEAF, SPLIT)).all():
        raise ValueError("node_state values must be ABSENT (0), LEAF (1) or SPLIT (2)")
    internal = num_internal(depth)
    for t in range(state.shape[0]):
        if state[t, 0] == ABSENT:
            raise ValueError(f"tree {t} has no root")
        if (state[t, internal:] == SPLIT).any():
            raise ValueError(f"tree {t} has a split on the last level (depth {depth})")
        nodes = np.arange(1, state.shape[1])
        present = state[t, 1:] != ABSENT
        parent_split = state[t, parent(nodes)] == SPLIT
        if (present != parent_split).any():
            bad = int(nodes[np.flatnonzero(present != parent_split)[0]])
            raise ValueError(
                f"tree {t}: position {bad} is {'present' if state[t, bad] else 'absent'} but its "
                f"parent {int(parent(bad))} is {'a split' if state[t, parent(bad)] == SPLIT else 'not a split'}"
            )


@keras_trees_export("keras_trees.topology")
def route(state, split_values, num_samples=None):
    """NumPy hard routing of one tree (the reference every router agrees with;
    [`keras_trees.Forest.route`][keras_trees.forest.Forest.route] walks its trees with it).

    Args:
        state: ``(positions,)`` node states of one tree.
        split_values: ``(batch, num_internal)`` split value of every position,
            or a function ``(positions, rows) -> values`` returning the split
            values at heap ``positions`` for the samples ``rows`` (both
            ``(m,)`` integer arrays; evaluated only where a sample is at a split).
        num_samples: the batch size (needed with a function).

    Returns:
        ``(batch,)`` int64 heap position where each sample stops: it goes right
        at a split iff the value is ``> 0`` (or, for a function, iff it returns
        True or a positive value) and stops at a leaf.
    """
    state = np.asarray(state)
    if state.ndim != 1:
        raise ValueError(f"route: state must be one tree's node states, shape (positions,), got {state.shape}")
    validate(state[None])
    if callable(split_values):
        if num_samples is None:
            raise ValueError("route: num_samples is required when split_values is a function")
        if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 0:
            raise ValueError(f"route: num_samples must be an integer >= 0, got {num_samples!r}")
        value_at, batch = split_values, int(num_samples)
    else:
        values = np.asarray(split_values)
        internal = num_internal(max_depth_from_positions(state.shape[0]))
        if values.ndim != 2 or values.shape[1] != internal:
            raise ValueError(f"route: split_values must have shape (batch, num_internal={internal}), "
                             f"got {values.shape}")
        value_at, batch = (lambda pos, rows: values[rows, pos]), len(values)
    return _descend(state, value_at, batch)


def _descend(state, value_at, batch):
    node = np.zeros(batch, dtype=np.int64)
    for _ in range(max_depth_from_positions(state.shape[0])):
        rows = np.flatnonzero(state[node] == SPLIT)
        if not rows.size:
            break
        node[rows] = 2 * node[rows] + 1 + (np.asarray(value_at(node[rows], rows)) > 0)
    return node


@keras_trees_export("keras_trees.topology")
def describe(state, tree=0):
    """One line per node, e.g. for printing a grown tree."""
    lines = []
    state = np.asarray(state)
    for n in np.flatnonzero(state[tree] != ABSENT):
        kind = "split" if state[tree, n] == SPLIT else "leaf"
        lines.append(f"{'  ' * int(position_depth(n))}{n}: {kind}")
    return "\n".join(lines)


__all__ = public_api(__name__)
