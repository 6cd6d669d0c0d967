"""Noisy-OR (convex polytope) hard routing: op vs reference, Theorem 1, stable split functions."""

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import topology
from keras_trees.ops import _library
from keras_trees.ops import polytope as poly
from keras_trees.ops.hard_routing import hard_route, hard_route_reference
from tests.test_topology import random_tree

needs_op = pytest.mark.skipif(not _library.custom_ops_available(), reason=f"custom ops not loaded: {_library.load_error()}")


def make(rng, batch, dim, trees, depth, k, dtype):
    n = 2**depth - 1
    x = rng.normal(size=(batch, dim)).astype(dtype)
    w = rng.normal(size=(trees, n, k, dim)).astype(dtype)
    b = rng.normal(size=(trees, n, k)).astype(dtype)
    r = rng.gamma(0.5, 1.0, size=(trees, n, k)).astype(dtype)
    c = rng.uniform(0.5, 3.0, size=(trees, n)).astype(dtype)
    state = random_tree(rng, depth, num_trees=trees)
    return x, w, b, r, c, topology.is_split_mask(state), state


@needs_op
@pytest.mark.parametrize("depth,k", [(1, 1), (3, 5), (5, 8), (6, 13)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_experts_op_matches_reference_and_topology(rng, depth, k, dtype):
    x, w, b, r, c, is_split, state = make(rng, 41, 6, 2, depth, k, dtype)
    node, path = hard_route(x, w, b, is_split, expert_weights=r, threshold=c)
    node_ref, path_ref = hard_route_reference(x, w, b, is_split, r, c)
    node, path = np.asarray(node), np.asarray(path)
    assert node.dtype == np.int32 and path.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(node, np.asarray(node_ref))
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(path, np.asarray(path_ref), rtol=tol, atol=tol)
    z = np.einsum("bp,tikp->btik", x.astype(np.float64), w) + b[None]
    values = (r[None] * np.logaddexp(0.0, z)).sum(-1) - c[None]
    for t in range(2):
        np.testing.assert_array_equal(node[:, t], topology.route(state[t], values[:, t]))


@needs_op
def test_experts_op_batch_independent_and_no_gradient(rng):
    x, w, b, r, c, is_split, _ = make(rng, 1100, 9, 2, 4, 6, "float32")
    node, path = (np.asarray(v) for v in hard_route(x, w, b, is_split, expert_weights=r, threshold=c))
    for sl in (slice(0, 1), slice(3, 700), slice(700, 1100)):
        n, p = hard_route(x[sl], w, b, is_split, expert_weights=r, threshold=c)
        np.testing.assert_array_equal(np.asarray(n), node[sl])
        np.testing.assert_array_equal(np.asarray(p), path[sl])
    wv = tf.Variable(w)
    with tf.GradientTape() as tape:
        _, p = hard_route(x, wv, b, is_split, expert_weights=r, threshold=c)
        loss = tf.reduce_sum(p)
    assert tape.gradient(loss, wv) is None
    node0, _ = hard_route(x[:0], w, b, is_split, expert_weights=r, threshold=c)
    assert tuple(node0.shape) == (0, 2)


def test_k1_polytope_is_an_oblique_split(rng):
    # K = 1: r softplus(w.x + b) > c  <=>  w.x + b > log(exp(c / r) - 1)
    x, w, b, r, c, is_split, _ = make(rng, 200, 3, 1, 3, 1, "float64")
    node, _ = hard_route(x, w, b, is_split, expert_weights=r, threshold=c)
    offset = poly.facet_offsets(r, c)[..., 0]
    node_oblique, _ = hard_route(x, w[:, :, 0], b[:, :, 0] - offset, is_split)
    np.testing.assert_array_equal(np.asarray(node), np.asarray(node_oblique))


def test_left_region_is_convex_and_inside_theorem1_polytope(rng):
    for _ in range(5):
        k, dim = int(rng.integers(1, 12)), int(rng.integers(2, 6))
        w = rng.normal(size=(k, dim)) * rng.uniform(0.5, 4)
        b = rng.normal(size=k)
        r = rng.gamma(0.7, 1.0, size=k) + 1e-3
        x = rng.normal(size=(4000, dim)) * 2
        rate = (r * np.logaddexp(0.0, x @ w.T + b)).sum(-1)
        c = float(np.quantile(rate, 0.4))
        left = x[rate <= c]
        assert len(left) > 50
        i, j = rng.integers(0, len(left), size=(2, 2000))
        t = rng.uniform(size=(2000, 1))
        mix = t * left[i] + (1 - t) * left[j]
        mix_rate = (r * np.logaddexp(0.0, mix @ w.T + b)).sum(-1)
        assert (mix_rate <= c + 1e-9).all()  # convex combinations stay left
        offsets = poly.facet_offsets(r, c)
        assert (left @ w.T + b <= offsets + 1e-9).all()  # Theorem 1 polytope contains the region
        # the compiled/reference router agrees with the threshold rule
        heap_w = np.zeros((1, 1, k, dim)); heap_w[0, 0] = w
        node, _ = hard_route(mix.astype(np.float64), heap_w, b[None, None], np.ones((1, 1), bool),
                             expert_weights=r[None, None], threshold=np.array([[c]]))
        assert (np.asarray(node)[:, 0] == 1).all()


def test_split_functions_are_stable_for_extreme_inputs():
    z = np.array([[-1e4, -50.0, 0.0, 50.0, 1e4]], dtype=np.float32).T  # (5, 1)
    for dtype in ("float32", "float64"):
        zz = z.astype(dtype)
        rate = np.asarray(poly.noisy_or_rate(zz, np.ones((1,), dtype)))
        assert np.all(np.isfinite(rate)) and rate[-1] == pytest.approx(1e4) and rate[0] >= 0
        log_r, log_l = (np.asarray(v) for v in poly.noisy_or_log_probabilities(rate))
        assert np.all(np.isfinite(log_r)) and np.all(np.isfinite(log_l))
        assert log_r[-1] == pytest.approx(0.0, abs=1e-6) and log_l[-1] == pytest.approx(-1e4)
        np.testing.assert_allclose(np.exp(log_r) + np.exp(log_l), 1.0, rtol=1e-5)
        a_r, a_l = (np.asarray(v) for v in poly.annealed_log_probabilities(rate, 0.7, 3.0))
        assert np.all(np.isfinite(a_r)) and np.all(np.isfinite(a_l))
    # gradients stay finite through log1mexp at 0 and huge rates
    v = tf.Variable(np.array([0.0, 1e-20, 1e-3, 0.69, 0.7, 40.0, 1e5]))
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(poly.log1mexp(v))
    g = tape.gradient(out, v).numpy()
    assert np.all(np.isfinite(g)) and np.isfinite(out.numpy())
    a = np.array([1e-3, 0.69, 0.7, 40.0])
    ref = np.where(a < np.log(2), np.log(-np.expm1(-a)), np.log1p(-np.exp(-a)))
    np.testing.assert_allclose(np.asarray(poly.log1mexp(a)), ref, rtol=1e-12)


def test_annealed_form_equals_eq25(rng):
    rate = rng.uniform(0.01, 5, size=100)
    p0, lam = np.float64(0.3), np.float64(2.5)
    f = np.asarray(poly.noisy_or_probability(rate))
    direct = np.asarray(poly.annealed_probability(f, p0, lam))
    log_r, log_l = poly.annealed_log_probabilities(rate, np.asarray(poly.p0_to_rate(np.array(p0))), lam)
    np.testing.assert_allclose(np.exp(np.asarray(log_r)), direct, rtol=1e-10)
    np.testing.assert_allclose(np.exp(np.asarray(log_l)), 1 - direct, rtol=1e-8)


def test_bad_inputs_give_clear_errors(rng):
    x, w, b, r, c, is_split, _ = make(rng, 4, 3, 1, 2, 4, "float32")
    with pytest.raises(ValueError, match="expert_weights"):
        hard_route(x, w, b, is_split)
    with pytest.raises(ValueError, match="expert_weights must be finite and >= 0"):
        hard_route(x, w, b, is_split, expert_weights=-r, threshold=c)
    with pytest.raises(ValueError, match="threshold must have shape"):
        hard_route(x, w, b, is_split, expert_weights=r, threshold=c[:, :1])
    with pytest.raises(ValueError, match="split_bias must have shape"):
        hard_route(x, w, b[..., :2], is_split, expert_weights=r, threshold=c)
    with pytest.raises(ValueError, match="features"):
        hard_route(x[:, :2], w, b, is_split, expert_weights=r, threshold=c)
    with pytest.raises(ValueError, match="rank-4"):
        hard_route(x, w[:, :, 0], b[:, :, 0], is_split, expert_weights=r)
    bad = x.copy(); bad[0, 0] = np.inf
    with pytest.raises(Exception, match="NaN or Inf"):
        hard_route(bad, w, b, is_split, expert_weights=r, threshold=c)
    if _library.custom_ops_available():
        mod = _library.module()
        with pytest.raises(tf.errors.InvalidArgumentError, match="expert_weights must be finite and >= 0"):
            mod.keras_trees_hard_routing_experts(x, w, b, -r, c, is_split)
        with pytest.raises(tf.errors.InvalidArgumentError, match="threshold must have shape"):
            mod.keras_trees_hard_routing_experts(x, w, b, r, c[:, :1], is_split)
