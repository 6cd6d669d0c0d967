"""Keras layers for the keras-trees families."""

from keras_trees.layers.tree_ensemble import TreeEnsembleLayer

__all__ = ["TreeEnsembleLayer"]
