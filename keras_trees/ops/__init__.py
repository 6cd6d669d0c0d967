"""Tree math shared by every keras-trees family.

Each function is written once in ``keras.ops`` (the reference path and the test
oracle for the compiled kernels); the public entry points dispatch to the
compiled kernels of the active backend (TensorFlow custom ops, JAX XLA FFI
handlers) when they are loaded. ``reference_only()`` forces the reference path.
"""

from keras_trees.ops._library import (
    custom_ops_available,
    execution_report,
    load_error,
    reference_only,
)
from keras_trees.ops.hard_routing import hard_route, hard_route_reference, path_lengths
from keras_trees.ops.hinge import (
    hinge_depth,
    hinge_forest,
    hinge_forest_dense,
    hinge_forest_reference,
    hinge_forest_traversal,
    hinge_traversal_reference,
)
from keras_trees.ops.loss_augmented import (
    loss_augmented_inference,
    loss_augmented_inference_reference,
    surrogate,
)
from keras_trees.ops.path_probabilities import (
    frontier,
    heap_leaf_probabilities,
    soft_leaf_log_probabilities,
)
from keras_trees.ops.polytope import (
    annealed_log_probabilities,
    facet_offsets,
    log1mexp,
    noisy_or_log_probabilities,
    noisy_or_probability,
    noisy_or_rate,
    p0_to_rate,
)
from keras_trees.ops.routing import (
    depth_from_internal_nodes,
    hard_leaf_index,
    leaf_probabilities,
    logistic_step,
    smooth_step,
)
from keras_trees.ops.soft_tree import (
    mean_reachable_leaves,
    soft_tree_ensemble,
    soft_tree_ensemble_reference,
    soft_tree_leaf_probabilities,
    split_values,
)

__all__ = [
    # library
    "custom_ops_available",
    "execution_report",
    "load_error",
    "reference_only",
    # routing activations and leaf probabilities
    "depth_from_internal_nodes",
    "hard_leaf_index",
    "leaf_probabilities",
    "logistic_step",
    "smooth_step",
    # soft tree ensembles (Tree Ensemble Layer)
    "mean_reachable_leaves",
    "soft_tree_ensemble",
    "soft_tree_ensemble_reference",
    "soft_tree_leaf_probabilities",
    "split_values",
    # unbalanced trees on the shared topology (end-to-end, polytope, non-greedy)
    "frontier",
    "hard_route",
    "hard_route_reference",
    "heap_leaf_probabilities",
    "path_lengths",
    "soft_leaf_log_probabilities",
    # hinge forests and ferns
    "hinge_depth",
    "hinge_forest",
    "hinge_forest_dense",
    "hinge_forest_reference",
    "hinge_forest_traversal",
    "hinge_traversal_reference",
    # convex polytope trees
    "annealed_log_probabilities",
    "facet_offsets",
    "log1mexp",
    "noisy_or_log_probabilities",
    "noisy_or_probability",
    "noisy_or_rate",
    "p0_to_rate",
    # non-greedy trees
    "loss_augmented_inference",
    "loss_augmented_inference_reference",
    "surrogate",
    # pruned probabilistic routing (end-to-end trees and forests, convex polytope trees)
    "DEFAULT_PRUNE_THRESHOLD",
    "pruned_leaf_probabilities",
    "pruned_leaf_statistics",
    "pruned_leaf_statistics_reference",
    "pruned_route",
    "pruned_route_reference",
]

from keras_trees.ops.pruned_routing import (  # noqa: E402
    DEFAULT_PRUNE_THRESHOLD,
    pruned_leaf_probabilities,
    pruned_leaf_statistics,
    pruned_leaf_statistics_reference,
    pruned_route,
    pruned_route_reference,
)
