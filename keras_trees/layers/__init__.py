"""Keras layers for the keras-trees families."""

from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree
from keras_trees.layers.end_to_end_forest import EndToEndForest
from keras_trees.layers.end_to_end_tree import EndToEndTree
from keras_trees.layers.hinge_batch_norm import HingeBatchNormalization
from keras_trees.layers.hinge_forest import HingeFern, HingeForest
from keras_trees.layers.non_greedy_tree import NonGreedyTree
from keras_trees.layers.per_split_features import per_split_features, split_cnn
from keras_trees.layers.tree_ensemble import TreeEnsembleLayer

__all__ = [
    "TreeEnsembleLayer",
    "EndToEndTree",
    "EndToEndForest",
    "HingeForest",
    "HingeFern",
    "HingeBatchNormalization",
    "ConvexPolytopeTree",
    "NonGreedyTree",
    "per_split_features",
    "split_cnn",
]
