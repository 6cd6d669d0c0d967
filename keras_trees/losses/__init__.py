"""Training objectives of the tree families.

Convex polytope trees (Armandpour & Zhou 2021): the batch estimate of the
conditional entropy ``H(Y|L)`` (Eq. 10-13), the variance-reduction objective
(Eq. 15-16) and the gamma-process prior penalty (Eq. 14).
"""

from keras_trees.losses.conditional_entropy import (
    ConditionalEntropy,
    conditional_entropy,
    conditional_entropy_from_counts,
)
from keras_trees.losses.gamma_process_prior import GammaProcessPrior
from keras_trees.losses.leaf_variance import LeafVariance, leaf_variance, leaf_variance_from_moments

__all__ = [
    "ConditionalEntropy",
    "GammaProcessPrior",
    "LeafVariance",
    "conditional_entropy",
    "conditional_entropy_from_counts",
    "leaf_variance",
    "leaf_variance_from_moments",
]
