"""Keras callbacks that train tree layers inside ``model.fit``.

End-to-end trees: [`SteepnessAnnealing`][keras_trees.callbacks.steepness_annealing.SteepnessAnnealing], [`EMLeafUpdate`][keras_trees.callbacks.em_leaf_update.EMLeafUpdate],
[`GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth]. Convex polytope trees: [`PolytopeAnnealing`][keras_trees.callbacks.polytope_annealing.PolytopeAnnealing],
[`PolytopeLeafUpdate`][keras_trees.callbacks.polytope_leaves.PolytopeLeafUpdate]. Non-greedy trees: [`StableSGD`][keras_trees.callbacks.stable_sgd.StableSGD].
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
