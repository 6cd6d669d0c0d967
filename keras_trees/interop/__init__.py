"""Conversions between keras-trees topologies and other tree libraries
(optional dependencies are imported lazily inside the functions):
``keras_trees.interop.from_sklearn`` (also ``keras_trees.interop.sklearn.from_sklearn``)."""

from keras_trees.api_export import public_api
from keras_trees.interop import sklearn  # noqa: F401

__all__ = public_api(__name__)
