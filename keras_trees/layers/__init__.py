"""Keras layers for the keras-trees families."""

from keras_trees.layers.tree_ensemble import TreeEnsembleLayer

__all__ = ["TreeEnsembleLayer"]

from keras_trees.layers.hinge_batch_norm import HingeBatchNormalization  # noqa: E402
from keras_trees.layers.hinge_forest import HingeFern, HingeForest  # noqa: E402

__all__ += ["HingeBatchNormalization", "HingeFern", "HingeForest"]
