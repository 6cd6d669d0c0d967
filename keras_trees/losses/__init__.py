"""Training objectives of the tree families.

Convex polytope trees (Armandpour & Zhou 2021): the batch estimate of the
conditional entropy ``H(Y|L)`` (Eq. 10-13), the variance-reduction objective
(Eq. 15-16) and the gamma-process prior penalty (Eq. 14).
"""

from keras_trees.api_export import public_api
from keras_trees.losses import (  # noqa: F401  (each module exports its objectives)
    conditional_entropy,
    gamma_process_prior,
    leaf_variance,
)

__all__ = public_api(__name__)
