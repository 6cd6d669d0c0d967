"""Noisy-OR (convex polytope) split functions (Armandpour & Zhou, AISTATS 2021).

A convex polytope tree node holds ``K`` experts ``(r_k, beta_k, b_k)`` with
``r_k > 0``. Expert ``k`` votes "yes" with probability
``1 - (1 + exp(z_k))**(-r_k)``, ``z_k = beta_k . x + b_k`` (Eq. 1), and the node
sends a sample right with the noisy-OR probability (Eq. 2)

    f(x) = 1 - exp(-S(x)),   S(x) = sum_k r_k softplus(z_k) >= 0.

Everything is computed from the *rate* ``S`` in log space:
``log P(right) = log(1 - exp(-S))`` (a stable ``log1mexp``) and
``log P(left) = -S``, so large ``|z|`` neither overflows nor produces ``log(0)``.

Annealing (Appendix B, Eq. 25): ``f_lambda = 1 / (1 + ((1 - f) / (1 - p0))**lambda)``.
With ``1 - f = exp(-S)`` and ``S0 = -log(1 - p0)`` this is exactly
``sigmoid(lambda * (S - S0))``, which is how it is computed here. A threshold
on ``f`` or ``f_lambda`` is a threshold on ``S`` (both are strictly increasing
in ``S``), so deterministic routing is "right iff ``S(x) > c``" for a per-node
constant ``c``; the left region ``{S <= c}`` is convex and lies inside the
polytope ``beta_k . x + b_k <= log(exp(c / r_k) - 1)`` (Theorem 1).
"""

import math

import numpy as np
from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.validation import tensors

LOG2 = math.log(2.0)


_TINY = 1e-30  # a normal number in float32 and float64


@keras_trees_export("keras_trees.ops")
def noisy_or_rate(z, expert_weights):
    """``S = sum_k r_k softplus(z_k)`` over the last axis (stable softplus).

    Domain: ``z`` real, ``expert_weights`` (``r_k``) >= 0; tensor weights < 0
    give a negative rate, which no probability has.
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").
    """
    tensors.host_domain(z, "z", "real numbers (not NaN)", lambda a: a == a)
    tensors.host_domain(expert_weights, "expert_weights", "numbers >= 0 (the experts' rates r_k)",
                        lambda a: (a >= 0) & (a < float("inf")))
    z = tensors.floating(z, "z")
    return ops.sum(ops.cast(expert_weights, z.dtype) * ops.softplus(z), axis=-1)


@keras_trees_export("keras_trees.ops")
def log1mexp(a):
    """``log(1 - exp(-a))`` for ``a >= 0``, stable everywhere (Maechler 2012).

    ``a`` is floored at a tiny positive value so ``a = 0`` gives a large finite
    negative number instead of ``log(0)``; both branches are evaluated on safe
    inputs so gradients stay finite. ``a = inf`` gives 0; a tensor ``a < 0``
    is floored like 0 (``log(1 - exp(-a))`` is not real there).
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").
    """
    tensors.host_domain(a, "a", "numbers >= 0", lambda v: v >= 0)
    a = tensors.floating(a, "a")
    a = ops.maximum(a, ops.cast(_TINY, a.dtype))
    small = ops.minimum(a, LOG2)
    large = ops.maximum(a, LOG2)
    return ops.where(a < LOG2, ops.log(-ops.expm1(-small)), ops.log1p(-ops.exp(-large)))


@keras_trees_export("keras_trees.ops")
def noisy_or_probability(rate):
    """``f = 1 - exp(-S)`` (Eq. 2), computed as ``-expm1(-S)``.

    Domain: ``rate`` >= 0 (``inf`` gives 1); a tensor rate < 0 gives a
    negative number, which is no probability.
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").
    """
    tensors.host_domain(rate, "rate", "numbers >= 0", lambda a: a >= 0)
    rate = tensors.floating(rate, "rate")
    return -ops.expm1(-rate)


@keras_trees_export("keras_trees.ops")
def noisy_or_log_probabilities(rate):
    """``(log P(right), log P(left)) = (log(1 - exp(-S)), -S)`` (Eq. 2, 8)."""
    rate = tensors.floating(rate, "rate")
    return log1mexp(rate), -rate


@keras_trees_export("keras_trees.ops")
def p0_to_rate(p0):
    """``S0 = -log(1 - p0)``: the rate at which ``f`` equals ``p0``.

    Domain: ``0 <= p0 < 1``; a tensor ``p0 = 1`` gives ``inf``, ``p0 > 1`` NaN.
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").
    """
    tensors.host_domain(p0, "p0", "a probability in [0, 1)", lambda a: (a >= 0) & (a < 1))
    return -ops.log1p(-tensors.floating(p0, "p0"))


def annealed_logits(rate, rate0, steepness):
    """Logit of the annealed probability ``f_lambda`` (Eq. 25): ``lambda * (S - S0)``."""
    rate = tensors.floating(rate, "rate")
    return ops.cast(steepness, rate.dtype) * (rate - ops.cast(rate0, rate.dtype))


@keras_trees_export("keras_trees.ops")
def annealed_log_probabilities(rate, rate0, steepness):
    """``(log f_lambda, log(1 - f_lambda))`` with ``S0 = -log(1 - p0)`` (Eq. 25).

    Domain: ``rate`` and ``rate0`` >= 0, ``steepness`` (``lambda``) finite and
    > 0; a NaN tensor steepness gives NaN.
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").
    """
    tensors.host_domain(rate, "rate", "numbers >= 0", lambda a: a >= 0)
    tensors.host_domain(rate0, "rate0", "numbers >= 0 (S0 = -log(1 - p0))", lambda a: (a >= 0) & (a < float("inf")))
    tensors.host_domain(steepness, "steepness", "a finite number > 0", lambda a: (a > 0) & (a < float("inf")))
    logits = annealed_logits(rate, rate0, steepness)
    return ops.log_sigmoid(logits), ops.log_sigmoid(-logits)


def annealed_probability(f, p0, steepness):
    """Eq. 25 written literally on probabilities (the test oracle of
    [`annealed_log_probabilities`][keras_trees.ops.polytope.annealed_log_probabilities]; not stable for ``f`` near 1)."""
    f = ops.convert_to_tensor(f)
    return 1.0 / (1.0 + ops.power((1.0 - f) / (1.0 - p0), steepness))


def stump_log_probabilities(x, weights, bias, expert_weights, rate0, steepness, annealed=True):
    """Per-sample split probabilities of one node per sample.

    Args:
        x: ``(batch, d)``.
        weights: ``(batch, K, d)`` or ``(K, d)`` expert directions ``beta_k``.
        bias: ``(batch, K)`` or ``(K,)``.
        expert_weights: ``(batch, K)`` or ``(K,)``, ``r_k >= 0``.
        rate0, steepness: ``(batch,)`` or scalars (``S0`` and ``lambda`` of Eq. 25);
            ignored when ``annealed`` is false (then Eq. 2 is used as is).

    Returns:
        ``(rate, log_right, log_left)``, each ``(batch,)``.
    """
    x = ops.convert_to_tensor(x)
    weights = ops.cast(weights, x.dtype)
    if len(weights.shape) == 2:
        z = ops.matmul(x, ops.transpose(weights))
    else:
        z = ops.sum(weights * x[:, None, :], axis=-1)
    z = z + ops.cast(bias, x.dtype)
    rate = noisy_or_rate(z, expert_weights)
    if annealed:
        log_right, log_left = annealed_log_probabilities(rate, rate0, steepness)
    else:
        log_right, log_left = noisy_or_log_probabilities(rate)
    return rate, log_right, log_left


@keras_trees_export("keras_trees.ops")
def facet_offsets(expert_weights, threshold):
    """Right-hand sides of Theorem 1: ``log(exp(c / r_k) - 1)`` (NumPy, stable).

    The left region ``{x : S(x) <= c}`` lies inside
    ``{x : beta_k . x + b_k <= offset_k for all k}``; an expert with
    ``r_k = 0`` imposes no constraint (``offset = +inf``).
    """
    r = np.asarray(expert_weights, dtype=np.float64)
    c = np.asarray(threshold, dtype=np.float64)
    if r.ndim < 1 or r.shape[:-1] != c.shape:
        raise ValueError(
            f"threshold must have the shape of expert_weights without its last (experts) axis, "
            f"{r.shape[:-1] if r.ndim else '(..., num_experts)'}, got threshold {c.shape} and expert_weights {r.shape}")
    c = c[..., None]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        u = np.where(r > 0, c / np.where(r > 0, r, 1.0), np.inf)
        # log(expm1(u)) = u + log(1 - exp(-u)); for small u use log(expm1(u)).
        out = np.where(u > 1.0, u + np.log1p(-np.exp(-np.where(u > 1.0, u, 1.0))),
                       np.log(np.expm1(np.where(u > 1.0, 1.0, np.maximum(u, 1e-300)))))
        out = np.where(np.isinf(u) & (u > 0), np.inf, out)
        out = np.where(c <= 0, -np.inf, out)  # S >= 0, so S <= c <= 0 only on a null set
    return out
