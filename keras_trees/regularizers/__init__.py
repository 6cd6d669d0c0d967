"""Keras regularizers for tree parameters."""

from keras_trees.api_export import public_api
from keras_trees.regularizers import spatial_laplacian  # noqa: F401  (exports SpatialLaplacian)

__all__ = public_api(__name__)
