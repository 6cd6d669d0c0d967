"""Keras layers for the keras-trees families."""

from keras_trees.api_export import public_api
from keras_trees.layers import (  # noqa: F401  (each module exports its public layers)
    _co2,
    convex_polytope_tree,
    end_to_end_forest,
    end_to_end_tree,
    hinge_batch_norm,
    hinge_forest,
    non_greedy_tree,
    per_split_features,
    tree_ensemble,
)

__all__ = public_api(__name__)
