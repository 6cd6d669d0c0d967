"""Conditional entropy (Eq. 10-13), leaf variance (Eq. 15-16) and the gamma-process prior (Eq. 14)."""

import numpy as np
import pytest

from keras_trees.layers._polytope_training import best_threshold
from keras_trees.losses import (
    ConditionalEntropy, GammaProcessPrior, LeafVariance, conditional_entropy, leaf_variance,
)
from tests.conftest import finite_difference_check


def direct_conditional_entropy(y, p, num_classes):
    n, L = p.shape
    total = 0.0
    for l in range(L):
        mass = p[:, l].sum()
        if mass == 0:
            continue
        pi = np.array([p[y == j, l].sum() for j in range(num_classes)]) / mass
        h = -sum(q * np.log(q) for q in pi if q > 0)
        total += mass / n * h
    return total


def test_entropy_equals_direct_computation(rng):
    y = rng.integers(0, 3, size=50)
    logits = rng.normal(size=(50, 4))
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert float(conditional_entropy(y, p, 3)) == pytest.approx(direct_conditional_entropy(y, p, 3), rel=1e-10)
    assert float(ConditionalEntropy(3)(y, p)) == pytest.approx(direct_conditional_entropy(y, p, 3), rel=1e-5)
    # hard, pure leaves: 0; one leaf: H(Y)
    onehot = np.eye(3)[y]
    assert float(conditional_entropy(y, onehot, 3)) == pytest.approx(0.0, abs=1e-12)
    freq = np.bincount(y, minlength=3) / 50
    h_y = -(freq[freq > 0] * np.log(freq[freq > 0])).sum()
    assert float(conditional_entropy(y, np.ones((50, 1)), 3)) == pytest.approx(h_y)


def test_entropy_gradient_matches_finite_differences(rng):
    import tensorflow as tf

    y = rng.integers(0, 3, size=20)

    def loss(logits):
        p = tf.nn.softmax(logits, axis=-1)
        return conditional_entropy(y, p, 3)

    for _, analytic, numeric in finite_difference_check(loss, [rng.normal(size=(20, 4))], rng=rng):
        assert analytic == pytest.approx(numeric, rel=1e-4, abs=1e-7)


def test_variance_equals_direct_computation(rng):
    y = rng.normal(size=(30, 2)) + 100.0  # offset: checks the centering
    p = rng.dirichlet(np.ones(3), size=30)
    direct = 0.0
    for l in range(3):
        mu = (p[:, l, None] * y).sum(0) / p[:, l].sum()
        direct += (p[:, l, None] * (y - mu) ** 2).sum()
    assert float(leaf_variance(y, p)) == pytest.approx(direct / 30, rel=1e-9)
    assert float(LeafVariance()(y, p)) == pytest.approx(direct / 30, rel=1e-5)  # Keras losses compute in float32


def test_gamma_process_prior_values_and_errors():
    prior = GammaProcessPrior(gamma0=2.0, c0=0.5, a_beta=1.0, b_beta=2.0)
    log_r = np.log(np.array([[0.5, 2.0, 1.0, 0.1]]))
    beta = np.array([[[1.0, 0.0], [2.0, -1.0], [0.0, 0.0], [0.5, 0.5]]])
    k = 4
    want = sum(-(2.0 / k - 1) * lr + 0.5 * np.exp(lr) for lr in log_r[0])
    want += 1.5 * np.log1p(beta**2 / 4.0).sum()
    assert float(prior(log_r, beta)) == pytest.approx(want)
    assert float(prior(log_r, beta, node_mask=np.zeros(1))) == 0.0
    assert GammaProcessPrior.from_config(prior.get_config()).get_config() == prior.get_config()
    with pytest.raises(ValueError, match="gamma0"):
        GammaProcessPrior(gamma0=0)
    with pytest.raises(ValueError, match="c0"):
        GammaProcessPrior(c0=float("nan"))


def test_threshold_search_finds_the_best_split(rng):
    # Labels: 0 below 0.3, 1 in [0.3, 0.6), 0 above: best single cut by brute force.
    rate = rng.uniform(0, 1, size=300)
    y = ((rate >= 0.3) & (rate < 0.6)).astype(int)
    t, gain, n_left = best_threshold(rate, y, 2)
    s = np.sort(rate)

    def child_entropy(cut):
        left, right = y[rate <= cut], y[rate > cut]
        h = lambda v: -sum(q * np.log(q) for q in np.bincount(v, minlength=2) / len(v) if q > 0)  # noqa: E731
        return (len(left) * h(left) + len(right) * h(right)) / len(y)

    brute = min(child_entropy(0.5 * (a + b)) for a, b in zip(s[:-1], s[1:]))
    assert child_entropy(t) == pytest.approx(brute)
    assert t == pytest.approx(0.3, abs=0.02) or t == pytest.approx(0.6, abs=0.02)
    assert n_left == int((rate <= t).sum())
    # regression: a step function is cut at the step
    yr = np.where(rate > 0.7, 5.0, 1.0)
    t, gain, _ = best_threshold(rate, yr, None)
    assert (rate[rate <= t].max() < 0.7) and (rate[rate > t].min() > 0.7)
    assert gain == pytest.approx(yr.var())
    # ties and tiny nodes
    assert best_threshold(np.ones(10), y[:10], 2)[0] is None
    assert best_threshold(rate[:5], y[:5], 2, min_samples_leaf=3)[0] is None
