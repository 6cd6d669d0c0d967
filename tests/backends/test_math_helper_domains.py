"""The public math helpers' one rule (docs/errors.md, "The math helpers"), on
every backend: Python numbers, lists and NumPy arrays outside a helper's
domain are refused with a ValueError naming the argument; values inside it
and tensors are computed as before."""

import math

import numpy as np
import pytest
from keras import ops as kops

from keras_trees import ops

NAN = float("nan")

# (helper, arguments outside the domain, the argument named, the domain's words)
REFUSED = [
    (ops.smooth_step, (0.3, 0.0), "gamma", "finite number > 0"),
    (ops.smooth_step, (0.3, -1.0), "gamma", "finite number > 0"),
    (ops.smooth_step, (0.3, float("inf")), "gamma", "finite number > 0"),
    (ops.smooth_step, (np.array([0.1, NAN]), 1.0), "t", "not NaN"),
    (ops.logistic_step, (0.3, 0.0), "gamma", "finite number > 0"),
    (ops.logistic_step, ([0.3, NAN], 1.0), "t", "not NaN"),
    (ops.p0_to_rate, (1.0,), "p0", "[0, 1)"),
    (ops.p0_to_rate, (np.array([0.5, 1.5]),), "p0", "[0, 1)"),
    (ops.p0_to_rate, (-0.1,), "p0", "[0, 1)"),
    (ops.log1mexp, (-1.0,), "a", ">= 0"),
    (ops.log1mexp, (np.array([1.0, -2.0]),), "a", ">= 0"),
    (ops.noisy_or_probability, (np.array([-0.5]),), "rate", ">= 0"),
    (ops.noisy_or_rate, (np.zeros((2, 3)), np.array([1.0, -1.0, 1.0])), "expert_weights", ">= 0"),
    (ops.noisy_or_rate, (np.full((2, 3), NAN), np.ones(3)), "z", "not NaN"),
    (ops.annealed_log_probabilities, (np.ones(3), 0.5, NAN), "steepness", "finite number > 0"),
    (ops.annealed_log_probabilities, (np.ones(3), 0.5, 0.0), "steepness", "finite number > 0"),
    (ops.annealed_log_probabilities, (np.ones(3), -0.5, 2.0), "rate0", ">= 0"),
    (ops.annealed_log_probabilities, (np.array([-1.0]), 0.5, 2.0), "rate", ">= 0"),
    (ops.path_lengths, (np.array([0, -1]),), "node", "whole numbers >= 0"),
    (ops.path_lengths, (1.5,), "node", "whole numbers >= 0"),
]


@pytest.mark.parametrize("helper, args, name, domain", REFUSED,
                         ids=[f"{h.__name__}-{n}-{i}" for i, (h, _, n, _) in enumerate(REFUSED)])
def test_host_values_outside_the_domain_are_refused(helper, args, name, domain):
    with pytest.raises(ValueError, match=rf"^{name} must be .*{domain_pattern(domain)}.*, got "):
        helper(*args)


def domain_pattern(domain):
    return "".join("\\" + c if c in "[]().*+?^$|{}" else c for c in domain)


def test_values_at_the_ends_of_the_domains_are_computed():
    np.testing.assert_allclose(np.asarray(ops.smooth_step(np.array([-np.inf, 0.0, np.inf]), 1.0)), [0.0, 0.5, 1.0])
    assert float(ops.log1mexp(float("inf"))) == 0.0
    assert np.isfinite(float(ops.log1mexp(0.0)))
    assert float(ops.noisy_or_probability(float("inf"))) == 1.0
    assert float(ops.p0_to_rate(0.0)) == 0.0
    np.testing.assert_array_equal(np.asarray(ops.path_lengths(np.array([0, 1, 2, 3, 6, 7]))), [0, 1, 1, 2, 2, 3])
    right, left = ops.annealed_log_probabilities(np.array([0.0, 2.0]), 0.0, 1.0)
    np.testing.assert_allclose(np.exp(np.asarray(right)) + np.exp(np.asarray(left)), 1.0, rtol=1e-6)


def test_tensors_are_not_read_and_follow_ieee_arithmetic():
    # The documented results of each docstring, for a tensor argument out of the domain.
    assert math.isinf(float(ops.p0_to_rate(kops.convert_to_tensor(1.0))))
    assert math.isnan(float(ops.smooth_step(kops.convert_to_tensor(0.0), kops.convert_to_tensor(0.0))))
    # TensorFlow caches eager scalars by value, and 0.0 == -0.0: a -0.0 converted
    # earlier in the process comes back for 0.0. abs() makes the zero's sign certain.
    positive_zero = kops.abs(kops.convert_to_tensor(0.0))
    assert float(ops.smooth_step(kops.convert_to_tensor(0.5), positive_zero)) == 1.0
    steep = kops.convert_to_tensor(NAN)
    right, _ = ops.annealed_log_probabilities(kops.convert_to_tensor([1.0]), 0.5, steep)
    assert math.isnan(float(np.asarray(right)[0]))
    assert float(ops.noisy_or_probability(kops.convert_to_tensor(-0.5))) < 0.0


def test_shape_mismatches_name_the_argument():
    with pytest.raises(ValueError, match=r"^x has 4 features but node_weights expects input_dim=5"):
        ops.split_values(np.ones((3, 4)), np.ones((2, 3, 5)))
    with pytest.raises(ValueError, match=r"^node_bias must have shape \(num_trees, num_internal\) = \(2, 3\), got \(2, 4\)"):
        ops.split_values(np.ones((3, 4)), np.ones((2, 3, 4)), np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"^threshold must have the shape of expert_weights without its last"):
        ops.facet_offsets(np.ones((2, 3, 4)), np.ones((2, 5)))
    assert np.asarray(ops.split_values(np.ones((3, 4)), np.ones((2, 3, 4)), np.ones((2, 3)))).shape == (3, 2, 3)
    assert ops.facet_offsets(np.ones((2, 3, 4)), np.ones((2, 3))).shape == (2, 3, 4)
