"""Probabilistic routing through unbalanced trees vs a brute-force product over paths."""

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees import topology
from tests.conftest import finite_difference_check
from tests.test_topology import random_tree


def brute_force(x, w, b, gamma, state):
    """mu[b, (t, leaf)] by walking from each leaf to the root."""
    trees, internal, _ = w.shape
    positions = 2 * internal + 1
    f = np.einsum("bp,tip->bti", x, w) + b[None]
    out = {}
    for t in range(trees):
        for leaf in topology.leaves(state, t):
            mu = np.ones(len(x))
            n = leaf
            while n > 0:
                par = (n - 1) // 2
                s = 1 / (1 + np.exp(-gamma[t, par] * f[:, t, par]))
                mu *= s if n == 2 * par + 2 else 1 - s
                n = par
            out[t * positions + leaf] = mu
    return out


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_matches_brute_force_and_sums_to_one(rng, depth):
    trees, dim = 3, 4
    state = random_tree(rng, depth, num_trees=trees)
    n = 2**depth - 1
    x = rng.normal(size=(11, dim))
    w, b = rng.normal(size=(trees, n, dim)), rng.normal(size=(trees, n))
    gamma = rng.uniform(0.5, 3, size=(trees, n))
    ids, log_mu = tree_ops.soft_leaf_log_probabilities(x, w, b, gamma, state)
    ids, mu = np.asarray(ids), np.exp(np.asarray(log_mu))
    ref = brute_force(x, w, b, gamma, state)
    assert sorted(ids.tolist()) == sorted(ref)
    for j, leaf in enumerate(ids):
        np.testing.assert_allclose(mu[:, j], ref[int(leaf)], rtol=1e-6, atol=1e-12)
    per_tree = np.stack([mu[:, ids // (2 * n + 1) == t].sum(1) for t in range(trees)], 1)
    np.testing.assert_allclose(per_tree, 1.0, rtol=1e-9)


@pytest.mark.slow
def test_gradients_match_finite_differences(rng):
    depth, trees, dim = 4, 2, 3
    state = random_tree(rng, depth, num_trees=trees)
    n = 2**depth - 1
    x = rng.normal(size=(6, dim))
    w, b = rng.normal(size=(trees, n, dim)), rng.normal(size=(trees, n))
    gamma = tf.constant(rng.uniform(0.5, 2, size=(trees, n)))
    probe = rng.normal(size=(6, int((state == topology.LEAF).sum())))

    def loss(x_, w_, b_):
        _, log_mu = tree_ops.soft_leaf_log_probabilities(x_, w_, b_, gamma, state)
        return tf.reduce_sum(tf.exp(log_mu) * probe)

    for i, analytic, numeric in finite_difference_check(loss, [x, w, b], rng=rng):
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-8), f"param {i}"


def test_frontier_is_hard_until_a_candidate(rng):
    depth, dim = 3, 2
    state = topology.stump(1, depth)  # committed root split, candidates at 1 and 2
    x = rng.normal(size=(50, dim))
    w, b = rng.normal(size=(1, 7, dim)), rng.normal(size=(1, 7))
    gamma = np.full((1, 7), 2.0)
    candidate = np.zeros((1, 7), bool)
    candidate[0, 2] = True
    node, is_stump, s = tree_ops.frontier(x, w, b, gamma, state, candidate)
    f = x @ w[0].T + b[0]
    np.testing.assert_array_equal(np.asarray(node)[:, 0], np.where(f[:, 0] > 0, 2, 1))
    np.testing.assert_array_equal(np.asarray(is_stump)[:, 0], f[:, 0] > 0)
    np.testing.assert_allclose(np.asarray(s)[:, 0], np.where(f[:, 0] > 0, 1 / (1 + np.exp(-2 * f[:, 2])),
                                                               1 / (1 + np.exp(-2 * f[:, 1]))), rtol=1e-6)


def test_dense_heap_variant_equals_sparse(rng):
    depth, trees, dim = 4, 3, 3
    state = random_tree(rng, depth, num_trees=trees)
    n = 2**depth - 1
    x = rng.normal(size=(9, dim))
    w, b = rng.normal(size=(trees, n, dim)), rng.normal(size=(trees, n))
    gamma = rng.uniform(0.5, 2, size=(trees, n))
    dense = np.asarray(tree_ops.heap_leaf_probabilities(x, w, b, gamma, state)).reshape(9, -1)
    ids, log_mu = tree_ops.soft_leaf_log_probabilities(x, w, b, gamma, state)
    sparse = np.zeros_like(dense)
    sparse[:, np.asarray(ids)] = np.exp(np.asarray(log_mu))
    np.testing.assert_allclose(dense, sparse, rtol=1e-9, atol=1e-15)
