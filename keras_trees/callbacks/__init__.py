"""Keras callbacks that train tree layers inside ``model.fit``.

End-to-end trees: :class:`SteepnessAnnealing`, :class:`EMLeafUpdate`,
:class:`GreedyLevelGrowth`. Convex polytope trees: :class:`PolytopeAnnealing`,
:class:`PolytopeLeafUpdate`. Non-greedy trees: :class:`StableSGD`.
"""

from keras_trees.api_export import public_api
from keras_trees.callbacks import (  # noqa: F401  (each module exports its callback)
    em_leaf_update,
    greedy_level_growth,
    polytope_annealing,
    polytope_leaves,
    stable_sgd,
    steepness_annealing,
)

__all__ = public_api(__name__)
