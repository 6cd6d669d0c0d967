"""Tree math shared by every keras-trees family.

Each function is written once in ``keras.ops`` (the reference path and the test
oracle for the compiled kernels); the public entry points dispatch to the
compiled kernels of the active backend (TensorFlow custom ops, JAX XLA FFI
handlers, PyTorch ``torch.library`` ops) when they are loaded. ``reference_only()`` forces the reference path.

The public names are declared where they are defined (``@keras_trees_export``):

* library: ``custom_ops_available``, ``execution_report``, ``load_error``,
  ``reference_only`` (`_library`);
* routing activations and leaf probabilities (`routing`);
* soft tree ensembles, the Tree Ensemble Layer (`soft_tree`);
* unbalanced trees on the shared topology: end-to-end, polytope, non-greedy
  (`hard_routing`, `path_probabilities`);
* hinge forests and ferns (`hinge`);
* convex polytope trees (`polytope`);
* non-greedy trees (`loss_augmented`);
* pruned probabilistic routing: end-to-end trees and forests, convex polytope
  trees (`pruned_routing`).
"""

from keras_trees.api_export import public_api
from keras_trees.ops import (  # noqa: F401  (each module exports its public functions)
    _library,
    hard_routing,
    hinge,
    loss_augmented,
    path_probabilities,
    polytope,
    pruned_routing,
    routing,
    soft_tree,
)

__all__ = public_api(__name__)
