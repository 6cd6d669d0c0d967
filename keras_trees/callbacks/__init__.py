"""Keras callbacks that train tree layers inside ``model.fit``.

End-to-end trees: :class:`SteepnessAnnealing`, :class:`EMLeafUpdate`,
:class:`GreedyLevelGrowth`. Convex polytope trees: :class:`PolytopeAnnealing`,
:class:`PolytopeLeafUpdate`. Non-greedy trees: :class:`StableSGD`.
"""

from keras_trees.callbacks.em_leaf_update import EMLeafUpdate
from keras_trees.callbacks.greedy_level_growth import GreedyLevelGrowth
from keras_trees.callbacks.polytope_annealing import PolytopeAnnealing
from keras_trees.callbacks.polytope_leaves import PolytopeLeafUpdate
from keras_trees.callbacks.stable_sgd import StableSGD
from keras_trees.callbacks.steepness_annealing import SteepnessAnnealing

__all__ = [
    "EMLeafUpdate",
    "GreedyLevelGrowth",
    "PolytopeAnnealing",
    "PolytopeLeafUpdate",
    "StableSGD",
    "SteepnessAnnealing",
]
