"""Negative log of the truncated gamma-process prior on noisy-OR splits (Eq. 14)."""

from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.validation import arguments, bounds


@keras_trees_export("keras_trees.losses", serializable=True)
class GammaProcessPrior:
    """Penalty of Eq. 14 (Algorithm 1) for the experts of every split node.

    With ``r_1..r_K ~ Gamma(gamma0 / K, 1 / c0)`` (the gamma process truncated
    at ``K`` atoms) and the marginal Student-t prior on each ``beta_jk``
    (normal with inverse-gamma variance, shape ``a_beta``, scale ``b_beta``),
    the penalty per split is

        sum_k [ -(gamma0 / K - 1) log r_k + c0 r_k ]
          + (a_beta + 1/2) sum_jk log(1 + beta_jk**2 / (2 b_beta)).

    For ``gamma0 < K`` the first term rewards small ``r_k``: the shrinkage that
    switches off unneeded experts (polytope facets). ``weight`` multiplies
    the whole penalty; the convex polytope tree layer sets it to
    ``1 / (number of samples)`` so that the penalty and the mean conditional
    entropy are on the scale of a log posterior divided by ``N``.

    Args:
        gamma0: gamma-process mass parameter.
        c0: gamma-process rate (inverse scale).
        a_beta: shape of the inverse-gamma prior on expert weight variances.
        b_beta: its scale (the paper draws it from ``Gamma(e0, 1/f0)``; it is
            a fixed hyperparameter here).
        weight: overall multiplier.

    >>> import numpy as np
    >>> prior = GammaProcessPrior(gamma0=1.0, c0=1.0, a_beta=0.5, b_beta=0.5)
    >>> float(prior(np.zeros((1, 2)), np.zeros((1, 2, 3))))  # r = 1, beta = 0: K * c0
    2.0
    """

    def __init__(self, gamma0=1.0, c0=1.0, a_beta=1e-2, b_beta=1.0, weight=1.0):
        self.gamma0 = arguments.positive_float("gamma0", gamma0)
        self.c0 = arguments.positive_float("c0", c0)
        self.b_beta = arguments.positive_float("b_beta", b_beta)
        self.a_beta = bounds.nonnegative_float("a_beta", a_beta)
        self.weight = bounds.nonnegative_float("weight", weight)

    def __call__(self, log_expert_weights, expert_kernels, node_mask=None):
        """Penalty summed over nodes.

        Args:
            log_expert_weights: ``(..., K)`` ``log r_k`` (the layer's parameters).
            expert_kernels: ``(..., K, d)`` ``beta_k`` (bias included or not).
            node_mask: optional ``(...)`` 0/1 weights per node (e.g. the splits
                being trained).
        """
        log_r = ops.convert_to_tensor(log_expert_weights)
        beta = ops.cast(expert_kernels, log_r.dtype)
        k = log_r.shape[-1]
        per_node = ops.sum(-(self.gamma0 / k - 1.0) * log_r + self.c0 * ops.exp(log_r), axis=-1)
        per_node = per_node + (self.a_beta + 0.5) * ops.sum(ops.log1p(beta * beta / (2.0 * self.b_beta)), axis=(-2, -1))
        if node_mask is not None:
            per_node = per_node * ops.cast(node_mask, per_node.dtype)
        return self.weight * ops.sum(per_node)

    @classmethod
    def weighted(cls, weight, **hyperparameters):
        """The prior at strength ``weight`` (with ``hyperparameters``), or
        ``None`` (no prior, as a layer's ``prior=None``) for ``weight`` 0.

        >>> GammaProcessPrior.weighted(0.0) is None
        True
        >>> GammaProcessPrior.weighted(0.1, gamma0=5.0).get_config()["weight"]
        0.1
        """
        weight = bounds.nonnegative_float("weight", weight)
        return cls(weight=weight, **hyperparameters) if weight > 0 else None

    def get_config(self):
        return {"gamma0": self.gamma0, "c0": self.c0, "a_beta": self.a_beta, "b_beta": self.b_beta,
                "weight": self.weight}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
