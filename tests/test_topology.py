"""The shared tree topology (keras_trees/topology.py)."""

import numpy as np
import pytest

from keras_trees import topology


def random_tree(rng, max_depth, p_split=0.7, num_trees=1):
    state = topology.root_leaf(num_trees, max_depth)
    for t in range(num_trees):
        frontier = [0]
        while frontier:
            n = frontier.pop()
            if 2 * n + 2 < state.shape[1] and (n == 0 or rng.random() < p_split):
                state = topology.split_leaf(state, t, n)
                frontier += [2 * n + 1, 2 * n + 2]
    return state


def test_sizes_and_perfect_trees():
    assert topology.num_internal(3) == 7 and topology.num_positions(3) == 15
    assert topology.max_depth_from_positions(15) == 3
    state = topology.perfect(2, 2, max_depth=4)
    topology.validate(state, max_depth=4)
    assert topology.num_leaves(state).tolist() == [4, 4]
    assert topology.tree_depth(state, 1) == 2
    assert topology.leaves(state, 0).tolist() == [3, 4, 5, 6]


def test_split_and_prune(rng):
    state = topology.stump(1, 4)
    state = topology.split_leaf(state, 0, 2)
    state = topology.split_leaf(state, 0, 6)
    topology.validate(state)
    assert topology.tree_depth(state, 0) == 3
    pruned = topology.make_leaf(state, 0, 2)
    topology.validate(pruned)
    assert topology.splits(pruned, 0).tolist() == [0]
    assert topology.num_leaves(pruned).tolist() == [2]
    with pytest.raises(ValueError, match="not a leaf"):
        topology.split_leaf(state, 0, 2)
    with pytest.raises(ValueError, match="last level"):
        topology.split_leaf(topology.perfect(1, 4), 0, 15)


@pytest.mark.parametrize("seed", range(5))
def test_cut_at_depth_and_ancestors_agree_with_routing(seed):
    """Cutting a tree at depth d routes every sample to the ancestor on level d
    of the leaf it reached in the full tree (or to that leaf when it is
    shallower), and keeps every node above level d."""
    rng = np.random.default_rng(seed)
    state = random_tree(rng, 5, p_split=0.8)
    values = rng.normal(size=(200, topology.num_internal(5)))
    full = topology.route(state[0], values)
    for d in range(topology.tree_depth(state, 0) + 1):
        cut = topology.cut_at_depth(state, 0, d)
        topology.validate(cut, max_depth=5)
        assert topology.tree_depth(cut, 0) == min(d, topology.tree_depth(state, 0))
        np.testing.assert_array_equal(topology.route(cut[0], values), topology.ancestor_at_depth(full, d))
        kept = topology.position_depth(np.arange(state.shape[1])) < d
        np.testing.assert_array_equal(cut[0, kept], state[0, kept])
    assert topology.ancestor_at_depth([0, 5, 12], 1).tolist() == [0, 2, 2]
    np.testing.assert_array_equal(topology.ancestor_at_depth(full, 99), full)
    with pytest.raises(ValueError, match="depth must be >= 0"):
        topology.ancestor_at_depth(full, -1)
    with pytest.raises(ValueError, match="depth must be >= 0"):
        topology.cut_at_depth(state, 0, -1)
    assert topology.cut_at_depth(state, 0, 0)[0].tolist() == topology.root_leaf(1, 5)[0].tolist()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.__setitem__((0, 0), 0), "no root"),
        (lambda s: s.__setitem__((0, 1), 0), "parent"),
        (lambda s: s.__setitem__((0, 5), 2), "last level"),
        (lambda s: s.__setitem__((0, 3), 5), "values"),
    ],
)
def test_validate_rejects_broken_trees(edit, message):
    state = topology.perfect(1, 2, max_depth=2)
    edit(state)
    with pytest.raises(ValueError, match=message):
        topology.validate(state)


def test_route_follows_split_signs(rng):
    state = random_tree(rng, 5)[0]
    values = rng.normal(size=(200, topology.num_internal(5)))
    stops = topology.route(state, values)
    for b in range(200):  # walk by hand
        n = 0
        while state[n] == topology.SPLIT:
            n = 2 * n + 2 if values[b, n] > 0 else 2 * n + 1
        assert stops[b] == n
        assert state[n] == topology.LEAF


def test_route_with_a_split_function_matches_the_values(rng):
    state = random_tree(rng, 4)[0]
    values = rng.normal(size=(100, topology.num_internal(4)))
    asked = []

    def value_at(positions, rows):
        asked.append(positions)
        return values[rows, positions]

    np.testing.assert_array_equal(topology.route(state, value_at, num_samples=100), topology.route(state, values))
    assert all(np.all(state[p] == topology.SPLIT) for p in asked)  # evaluated only at splits
    with pytest.raises(ValueError, match="num_samples"):
        topology.route(state, value_at)


@pytest.mark.parametrize("depth", [1, 3, 7])
def test_depth_from_sizes_is_one_inverse(depth):
    from keras_trees.ops import depth_from_internal_nodes

    assert topology.max_depth_from_internal(topology.num_internal(depth)) == depth
    assert depth_from_internal_nodes(topology.num_internal(depth)) == depth
    assert topology.max_depth_from_positions(topology.num_positions(depth)) == depth
    with pytest.raises(ValueError, match="2\\*\\*depth - 1 internal nodes"):
        topology.max_depth_from_internal(topology.num_internal(depth) + 1)
