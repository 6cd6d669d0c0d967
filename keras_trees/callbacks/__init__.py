"""Keras callbacks that train end-to-end trees inside ``model.fit``."""

from keras_trees.callbacks.em_leaf_update import EMLeafUpdate
from keras_trees.callbacks.greedy_level_growth import GreedyLevelGrowth
from keras_trees.callbacks.steepness_annealing import SteepnessAnnealing

__all__ = ["EMLeafUpdate", "GreedyLevelGrowth", "SteepnessAnnealing"]
