"""Keras regularizers for tree parameters."""

from keras_trees.regularizers.spatial_laplacian import SpatialLaplacian

__all__ = ["SpatialLaplacian"]
