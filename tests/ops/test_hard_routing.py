"""The compiled hard-routing op against the keras.ops reference and the topology walk."""

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees import topology
from keras_trees.ops.routing import hard_leaf_index
from tests.test_topology import random_tree

pytestmark = pytest.mark.skipif(
    not tree_ops.custom_ops_available(), reason=f"custom ops not loaded: {tree_ops.load_error()}"
)


def make(rng, batch, dim, trees, depth, dtype):
    n = 2**depth - 1
    x = rng.normal(size=(batch, dim)).astype(dtype)
    w = rng.normal(size=(trees, n, dim)).astype(dtype)
    b = rng.normal(size=(trees, n)).astype(dtype)
    state = random_tree(rng, depth, num_trees=trees)
    return x, w, b, topology.is_split_mask(state), state


@pytest.mark.parametrize("depth", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_op_matches_reference_and_topology(rng, depth, dtype):
    x, w, b, is_split, state = make(rng, 37, 5, 3, depth, dtype)
    node, path = tree_ops.hard_route(x, w, b, is_split)
    node_ref, path_ref = tree_ops.hard_route_reference(x, w, b, is_split)
    node, path = np.asarray(node), np.asarray(path)
    assert node.dtype == np.int32 and path.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(node, np.asarray(node_ref))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(path, np.asarray(path_ref), rtol=tol, atol=tol)
    values = np.einsum("bp,tip->bti", x.astype(np.float64), w) + b[None]
    for t in range(3):
        np.testing.assert_array_equal(node[:, t], topology.route(state[t], values[:, t]))
        assert (state[t][node[:, t]] == topology.LEAF).all()
    # path values are the split values at the visited nodes, then zeros
    lengths = np.asarray(tree_ops.path_lengths(node))
    assert (np.count_nonzero(path, axis=-1) <= lengths).all()


def test_perfect_trees_match_dense_heap_routing(rng):
    x, w, b, _, _ = make(rng, 64, 4, 2, 6, "float64")
    is_split = np.ones((2, 63), bool)
    node, _ = tree_ops.hard_route(x, w, b, is_split, with_path_values=False)
    values = np.einsum("bp,tip->bti", x, w) + b[None]
    leaf = np.asarray(hard_leaf_index(values <= 0))  # routing.py: True = go left
    np.testing.assert_array_equal(np.asarray(node) - 63, leaf)


@pytest.mark.parametrize("batch", [0, 1, 1000])
def test_batch_sizes_and_no_path_values(rng, batch):
    x, w, b, is_split, _ = make(rng, batch, 3, 2, 4, "float32")
    node, path = tree_ops.hard_route(x, w, b, is_split, with_path_values=False)
    assert tuple(node.shape) == (batch, 2) and tuple(path.shape) == (batch, 2, 0)
    np.testing.assert_array_equal(np.asarray(node), np.asarray(tree_ops.hard_route_reference(x, w, b, is_split)[0]))


def test_results_do_not_depend_on_the_batch(rng):
    # The kernel routes samples in chunks and groups of four; a sample's leaf
    # and split values must be bit-identical however the batch is cut.
    x, w, b, is_split, _ = make(rng, 1300, 37, 3, 6, "float32")
    node, path = (np.asarray(v) for v in tree_ops.hard_route(x, w, b, is_split))
    for sl in (slice(0, 1), slice(1, 4), slice(5, 600), slice(600, 1300)):
        n, p = tree_ops.hard_route(x[sl], w, b, is_split)
        np.testing.assert_array_equal(np.asarray(n), node[sl])
        np.testing.assert_array_equal(np.asarray(p), path[sl])
    np.testing.assert_array_equal(node, np.asarray(tree_ops.hard_route_reference(x, w, b, is_split)[0]))


def test_routing_has_no_gradient(rng):
    x, w, b, is_split, _ = make(rng, 8, 3, 1, 3, "float64")
    wv = tf.Variable(w)
    with tf.GradientTape() as tape:
        _, path = tree_ops.hard_route(x, wv, b, is_split)
        loss = tf.reduce_sum(path)
    assert tape.gradient(loss, wv) is None


def test_bad_inputs_give_clear_errors(rng):
    x, w, b, is_split, _ = make(rng, 4, 3, 2, 3, "float32")
    bad = x.copy()
    bad[1, 1] = np.nan
    with pytest.raises(Exception, match="NaN or Inf"):
        tree_ops.hard_route(bad, w, b, is_split)
    with pytest.raises(ValueError, match="features"):
        tree_ops.hard_route(x[:, :2], w, b, is_split)
    with pytest.raises(ValueError, match="2\\*\\*depth - 1"):
        tree_ops.hard_route(x, w[:, :6], b[:, :6], is_split[:, :6])
    with pytest.raises(ValueError, match="is_split"):
        tree_ops.hard_route(x, w, b, is_split[:1])
    from keras_trees.ops import _library

    with pytest.raises(tf.errors.InvalidArgumentError, match="split_bias"):
        _library.module().keras_trees_hard_routing(x, w, b[:, :3], is_split)


def _overflow_cases(experts):
    """Finite float32 inputs whose split value on the path overflows: 3e38 + 3e38
    (inf) and 3e38 + 3e38 - 3e38 - 3e38 (inf or NaN, depending on the order of
    the sum)."""
    x = np.array([[3e38, 3e38, 0.0, 0.0], [3e38, 3e38, -3e38, -3e38], [1.0, 2.0, 3.0, 4.0]], "float32")
    is_split = np.array([[True]])
    if not experts:
        return x, (np.ones((1, 1, 4), "float32"), np.zeros((1, 1), "float32"), is_split), {}
    kw = {"expert_weights": np.ones((1, 1, 1), "float32"), "threshold": np.zeros((1, 1), "float32")}
    return x, (np.ones((1, 1, 1, 4), "float32"), np.zeros((1, 1, 1), "float32"), is_split), kw


@pytest.mark.parametrize("experts", [False, True])
def test_split_value_overflow_is_refused_on_every_path(experts):
    x, args, kw = _overflow_cases(experts)
    paths = {
        "op": lambda x: tree_ops.hard_route(x, *args, **kw),
        "reference": lambda x: tree_ops.hard_route_reference(x, *args, **kw),
        "op in tf.function": tf.function(lambda x: tree_ops.hard_route(x, *args, **kw)),
        "reference in tf.function": tf.function(lambda x: tree_ops.hard_route_reference(x, *args, **kw)),
    }
    for name, fn in paths.items():
        for row in (0, 1):
            with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                               match="split value on the path of a sample is not finite"):
                fn(x[row:row + 1])
        # Large but finite split values route the same way on every path.
        near = np.array([[3e38, -1e38, 0.0, 0.0], [-3e38, 1e38, 0.0, 0.0]], "float32")
        node, path = fn(near)
        np.testing.assert_array_equal(np.asarray(node).ravel(), [2, 1], err_msg=name)
        assert np.all(np.isfinite(np.asarray(path))), name


def test_overflow_off_the_path_is_not_refused():
    # Split 2 overflows for this sample, but the sample goes left at the root
    # and never reaches it: neither path evaluates (nor refuses) it.
    x = np.array([[-1.0, 1e10]], "float32")
    w = np.array([[[1.0, 0.0], [0.0, 0.0], [0.0, 1e30]]], "float32")
    b = np.zeros((1, 3), "float32")
    is_split = np.array([[True, False, True]])
    for fn in (tree_ops.hard_route, tree_ops.hard_route_reference):
        node, _ = fn(x, w, b, is_split)
        assert np.asarray(node).ravel().tolist() == [1]
