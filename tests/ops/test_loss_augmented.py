"""Loss-augmented inference (Norouzi et al. 2015): compiled op vs keras.ops
reference vs a literal NumPy brute force over codes g, the bounds of Eq. 7, 13
and 14, and the surrogate's gradients (Algorithm 1)."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import topology
from keras_trees.ops import _library
from keras_trees.ops.hard_routing import hard_route
from keras_trees.ops.loss_augmented import (
    loss_augmented_inference,
    loss_augmented_inference_reference,
    path_margin,
    surrogate,
)
from tests.ops.random_inputs import lai_problem

needs_op = pytest.mark.skipif(not _library.custom_ops_available(), reason="custom ops unavailable")


random_problem = lai_problem


def np_loss(theta_row, y, loss):
    if loss == "log":
        m = theta_row.max()
        return m + np.log(np.exp(theta_row - m).sum()) - theta_row[y]
    return float(((theta_row - y) ** 2).sum())


def navigate(g, depth):
    """The tree navigation function f(g): leaf index reached by the code g (+-1 per node)."""
    node = 0
    while node < 2**depth - 1:
        node = 2 * node + 2 if g[node] > 0 else 2 * node + 1
    return node - (2**depth - 1)


def brute_force(x, w, b, theta, y, loss, fast):
    """Literal max over codes g of g^T v + loss(Theta^T f(g), y) - max_h h^T v,
    over all of H^m (Eq. 7) or the Hamming ball B1(sgn(v)) (Eq. 13)."""
    depth = int(np.log2(w.shape[0] + 1))
    m = w.shape[0]
    out = []
    for xs, ys in zip(x, y):
        v = w @ xs + b
        h = np.where(v > 0, 1.0, -1.0)
        if fast:
            codes = [h] + [h * np.where(np.arange(m) == i, -1.0, 1.0) for i in range(m)]
        else:
            codes = [np.array(c) for c in itertools.product((-1.0, 1.0), repeat=m)]
        best = max(c @ v + np_loss(theta[navigate(c, depth)], ys, loss) for c in codes)
        out.append((navigate(h, depth), best - h @ v))
    return out


@pytest.mark.parametrize("loss", ["log", "squared"])
@pytest.mark.parametrize("fast", [True, False])
def test_reference_matches_literal_brute_force_over_codes(rng, loss, fast):
    x, w, b, theta, y = random_problem(rng, 3, loss, batch=20)
    g, h, score = (np.asarray(t) for t in loss_augmented_inference_reference(x, w, b, theta, y, loss, fast))
    expected = brute_force(x, w, b, theta, y, loss, fast)
    np.testing.assert_array_equal(h, [e[0] for e in expected])
    np.testing.assert_allclose(score, [e[1] for e in expected], rtol=1e-10, atol=1e-10)
    # the selected leaf attains the score
    margins = np.asarray(path_margin(x, w, b, g, 3))
    losses = np.array([np_loss(theta[j], ys, loss) for j, ys in zip(g, y)])
    np.testing.assert_allclose(margins + losses, score, rtol=1e-10, atol=1e-10)


@needs_op
@pytest.mark.parametrize("loss", ["log", "squared"])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("depth", [1, 2, 5, 7])
def test_op_matches_reference(rng, loss, fast, depth):
    x, w, b, theta, y = random_problem(rng, depth, loss, batch=300)
    got = [np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, loss, fast)]
    with _library.reference_only():
        ref = [np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, loss, fast)]
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-10, atol=1e-10)


@needs_op
def test_op_float32_and_h_equals_hard_routing(rng):
    depth = 6
    x, w, b, theta, y = random_problem(rng, depth, "log", batch=500, dtype="float32")
    g, h, score = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, "log", True))
    assert score.dtype == np.float32 and g.dtype == np.int32
    node, _ = hard_route(x, w[None], b[None], np.ones((1, w.shape[0]), bool), with_path_values=False)
    np.testing.assert_array_equal(h, np.asarray(node)[:, 0] - (2**depth - 1))
    _, _, ref_score = loss_augmented_inference_reference(x, w, b, theta, y, "log", True)
    np.testing.assert_allclose(score, np.asarray(ref_score), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loss", ["log", "squared"])
def test_bounds_are_never_below_the_loss(rng, loss):
    """Eq. 7 >= Eq. 13 >= empirical loss, and Eq. 14 >= Eq. 13, on random trees and data."""
    for depth, scale in [(2, 0.1), (4, 1.0), (6, 10.0)]:
        x, w, b, theta, y = random_problem(rng, depth, loss, batch=200, scale=scale)
        g_e, h, exact = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, loss, False))
        g_f, h_f, fast = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, loss, True))
        np.testing.assert_array_equal(h, h_f)
        empirical = np.array([np_loss(theta[j], ys, loss) for j, ys in zip(h, y)])
        assert np.all(fast >= empirical - 1e-9)
        assert np.all(exact >= fast - 1e-9)
        # the surrogate at the selected leaves is the bound
        np.testing.assert_allclose(np.asarray(surrogate(x, w, b, theta, y, g_e, loss)), exact, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.asarray(surrogate(x, w, b, theta, y, g_f, loss)), fast, rtol=1e-9, atol=1e-9)
        # Stable SGD (Eq. 14): leaf assignments from other (older) splits
        w_old = w + rng.normal(size=w.shape) * 0.5
        node, _ = hard_route(x, w_old[None], b[None], np.ones((1, w.shape[0]), bool), with_path_values=False)
        assigned = np.asarray(node)[:, 0] - (2**depth - 1)
        stable = np.asarray(surrogate(x, w, b, theta, y, g_f, loss, assigned_leaf=assigned))
        assert np.all(stable >= fast - 1e-9)
        assert np.any(stable > fast + 1e-6)  # strictly looser where the assignment differs


@pytest.mark.parametrize("loss", ["log", "squared"])
def test_fast_and_exact_agree_when_the_optimum_is_in_the_hamming_ball(rng, loss):
    depth = 5
    x, w, b, theta, y = random_problem(rng, depth, loss, batch=400)
    g_e, h, exact = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, loss, False))
    g_f, _, fast = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, loss, True))
    # number of path nodes where the exact optimum disagrees with sgn(v)
    v = x @ w.T + b
    disagree = np.zeros(len(x), int)
    for i, j in enumerate(g_e):
        pos = j + 2**depth - 1
        while pos > 0:
            parent = (pos - 1) // 2
            went_right = pos == 2 * parent + 2
            disagree[i] += went_right != (v[i, parent] > 0)
            pos = parent
    inside = disagree <= 1
    assert inside.sum() > 50 and (~inside).sum() > 5  # both cases occur
    np.testing.assert_array_equal(g_f[inside], g_e[inside])
    np.testing.assert_allclose(fast[inside], exact[inside], rtol=1e-12)
    assert np.all(fast[~inside] < exact[~inside])


def test_ties_keep_the_h_leaf():
    # zero split rows (a padded CART leaf) and identical leaves: flipping costs 0
    # and gains nothing, so g must stay at h for every sample (depth 3: 7 splits, 8 leaves)
    x = np.random.default_rng(0).normal(size=(10, 2))
    w = np.zeros((7, 2)); b = np.zeros(7)
    theta = np.tile([[1.0, 0.0]], (8, 1))
    y = np.zeros(10, "int32")
    for fast in (True, False):
        g, h, _ = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, "log", fast))
        np.testing.assert_array_equal(g, h)
        np.testing.assert_array_equal(h, 0)


def test_surrogate_gradients_are_algorithm_1(rng):
    """d/dW = (g - h) x^T on the rows of the two paths; d/dTheta = dloss/dTheta at f(g)."""
    depth = 4
    x, w, b, theta, y = random_problem(rng, depth, "log", batch=30)
    g, h, _ = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, "log", False))
    wv, bv, tv = tf.Variable(w), tf.Variable(b), tf.Variable(theta)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(surrogate(x, wv, bv, tv, y, g, "log"))
    dw, db, dt = (tf.convert_to_tensor(t).numpy() for t in tape.gradient(total, [wv, bv, tv]))
    exp_w, exp_b, exp_t = np.zeros_like(w), np.zeros_like(b), np.zeros_like(theta)
    for xs, ys, gl in zip(x, y, g):
        v = w @ xs + b
        hcode = np.where(v > 0, 1.0, -1.0)
        gcode = hcode.copy()
        pos = gl + 2**depth - 1
        while pos > 0:
            parent = (pos - 1) // 2
            gcode[parent] = 1.0 if pos == 2 * parent + 2 else -1.0
            pos = parent
        exp_w += np.outer(gcode - hcode, xs)
        exp_b += gcode - hcode
        p = np.exp(theta[gl] - theta[gl].max()); p /= p.sum()
        exp_t[gl] += p - np.eye(theta.shape[1])[ys]
    np.testing.assert_allclose(dw, exp_w, atol=1e-10)
    np.testing.assert_allclose(db, exp_b, atol=1e-10)
    np.testing.assert_allclose(dt, exp_t, atol=1e-10)


def test_surrogate_matches_finite_differences(rng):
    from tests.conftest import finite_difference_check

    depth = 3
    x, w, b, theta, y = random_problem(rng, depth, "squared", batch=15)
    g, _, _ = (np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, "squared", True))
    # the bound is piecewise linear in W: with the selected leaves held, finite
    # differences of the surrogate are exact away from sign changes of v
    fn = lambda w_, b_, t_: tf.reduce_sum(surrogate(x, w_, b_, t_, y, g, "squared"))  # noqa: E731
    for _, analytic, numeric in finite_difference_check(fn, [w, b, theta], eps=1e-7):
        assert abs(analytic - numeric) < 1e-5 * max(1.0, abs(numeric))


@pytest.mark.parametrize("reference", [False, True])
def test_bad_input_gives_clear_errors(rng, reference):
    x, w, b, theta, y = random_problem(rng, 2, "log", batch=8)
    fn = loss_augmented_inference_reference if reference else loss_augmented_inference
    with pytest.raises(ValueError, match="x must have rank 2"):
        fn(x[0], w, b, theta, y)
    with pytest.raises(ValueError, match="2\\*\\*depth - 1"):
        fn(x, w[:2], b[:2], theta, y)
    with pytest.raises(ValueError, match="input_dim"):
        fn(x[:, :3], w, b, theta, y)
    with pytest.raises(ValueError, match="leaf_values must have shape"):
        fn(x, w, b, theta[:3], y)
    with pytest.raises(ValueError, match="loss must be one of"):
        fn(x, w, b, theta, y, loss="hinge")
    # Labels are ids: whole-number floats are accepted, fractional ones refused.
    with pytest.raises(ValueError, match="labels must hold integer ids"):
        fn(x, w, b, theta, y.astype("float64") + 0.5)
    for a, b_ in zip(fn(x, w, b, theta, y.astype("float64")), fn(x, w, b, theta, y)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b_))
    with pytest.raises(ValueError, match="targets must have shape"):
        fn(x, w, b, theta, y.astype("float64"), loss="squared")
    with pytest.raises(ValueError, match="samples but labels"):
        fn(x, w, b, theta, y[:3])
    if not reference:
        with pytest.raises(ValueError, match="labels must lie in"):
            fn(x, w, b, theta, y + 4)
        bad = x.copy(); bad[0, 0] = np.nan
        with pytest.raises(ValueError, match="NaN or Inf"):
            fn(bad, w, b, theta, y)


@needs_op
def test_op_validates_inside_graphs(rng):
    x, w, b, theta, y = random_problem(rng, 2, "log", batch=8)
    op = _library.module().keras_trees_loss_augmented_inference
    with pytest.raises(tf.errors.InvalidArgumentError, match="labels must lie in"):
        op(x, w, b, theta, y + 4, loss="log")
    bad = x.copy(); bad[1, 1] = np.inf
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or Inf"):
        op(bad, w, b, theta, y, loss="log")
    with pytest.raises(tf.errors.InvalidArgumentError, match="int32 class labels"):
        op(x, w, b, theta, y.astype("float64"), loss="log")
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="2\\*\\*depth - 1|must be"):
        op(x, w[:2], b[:2], theta, y, loss="log")
    g, h, s = op(x[:0], w, b, theta, y[:0], loss="log")  # empty batch: empty outputs
    assert g.shape == (0,) and s.shape == (0,)


def test_topology_of_leaf_indices():
    # leaf j of a perfect tree of depth d is heap position 2**d - 1 + j
    state = topology.perfect(1, 3)
    np.testing.assert_array_equal(topology.leaves(state, 0) - (2**3 - 1), np.arange(8))


@needs_op
def test_op_small_batch_on_deep_tree_computes_leaf_losses_on_the_fly(rng):
    # 512 leaves > batch * (depth + 1): the fast kernel skips the per-leaf
    # log-sum-exp table; results must not change
    x, w, b, theta, y = random_problem(rng, 9, "log", batch=20)
    got = [np.asarray(t) for t in loss_augmented_inference(x, w, b, theta, y, "log", True)]
    ref = [np.asarray(t) for t in loss_augmented_inference_reference(x, w, b, theta, y, "log", True)]
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-10, atol=1e-10)
