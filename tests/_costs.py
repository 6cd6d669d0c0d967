"""What each expensive test file costs, for the order in which pytest-xdist
hands files to its workers (``tests/conftest.py``): the most expensive first,
so that no long file starts last while the other workers idle (longest
processing time first). Seconds of test time per file in the full suite on a
2-core machine, rounded; only the files of 15 s or more. The figures order the
files and nothing else: a stale one costs wall time, never a result.

Refresh: ``python -m pytest -n 2 --junitxml=out.xml`` per backend and sum the
``time`` of each file's test cases.
"""

# KERAS_BACKEND -> {test file: seconds}; torch runs the files of tests/backends
# as JAX does, in about the same proportions.
COSTS = {
    "tensorflow": {
        "tests/test_cuda_build.py": 323, "tests/test_benchmarks.py": 244,
        "tests/backends/test_tuner_backends.py": 227, "tests/test_examples.py": 187,
        "tests/estimators/test_estimator_checks.py": 184, "tests/estimators/test_estimators.py": 176,
        "tests/test_docs.py": 149, "tests/backends/test_tree_ensemble_and_hinge_backends.py": 135,
        "tests/distributed/test_multi_worker.py": 133, "tests/layers/test_heap_layer_inputs.py": 112,
        "tests/properties/test_ops_properties.py": 110, "tests/test_export_formats.py": 109,
        "tests/tuner/test_tuner.py": 108, "tests/backends/test_end_to_end_backends.py": 107,
        "tests/test_packaging.py": 92, "tests/backends/test_non_greedy_backends.py": 84,
        "tests/ops/test_bad_inputs.py": 80, "tests/distributed/test_jax_processes.py": 79,
        "tests/callbacks/test_greedy_level_growth_streams.py": 75, "tests/layers/test_convex_polytope_tree.py": 75,
        "tests/layers/test_end_to_end_trees.py": 71, "tests/properties/test_layers_properties.py": 66,
        "tests/layers/test_convex_polytope_streams.py": 65, "tests/backends/test_convex_polytope_backends.py": 64,
        "tests/layers/test_hinge_layers.py": 56, "tests/test_serialization.py": 52,
        "tests/layers/test_flat_layer_inputs.py": 51, "tests/layers/test_end_to_end_serialization.py": 46,
        "tests/test_build.py": 42, "tests/test_gpu_check.py": 38, "tests/callbacks/test_streamed_leaf_updates.py": 35,
        "tests/layers/test_non_greedy_serialization.py": 32, "tests/estimators/test_first_hour.py": 32,
        "tests/ops/test_soft_tree_ops.py": 31, "tests/backends/test_fit_traps.py": 29,
        "tests/test_layer_contract.py": 28, "tests/test_peers.py": 27, "tests/layers/test_non_greedy_tree.py": 27,
        "tests/backends/test_estimators_backends.py": 27, "tests/backends/test_compiled_kernels.py": 23,
        "tests/estimators/test_no_collapse.py": 23, "tests/inspection/test_importances.py": 22,
        "tests/callbacks/test_callbacks.py": 21, "tests/inspection/test_inspection.py": 21,
        "tests/estimators/test_explain.py": 19,
    },
    "jax": {
        "tests/properties/test_ops_properties.py": 654, "tests/backends/test_compiled_kernels.py": 275,
        "tests/backends/test_end_to_end_backends.py": 196,
        "tests/backends/test_tree_ensemble_and_hinge_backends.py": 173,
        "tests/backends/test_tuner_backends.py": 147, "tests/backends/test_convex_polytope_backends.py": 141,
        "tests/backends/test_estimators_backends.py": 129, "tests/backends/test_non_greedy_backends.py": 91,
        "tests/backends/test_pruned_routing_portable.py": 69, "tests/backends/test_fit_traps.py": 68,
        "tests/backends/test_loss_augmented_portable.py": 57,
    },
}
COSTS["torch"] = COSTS["jax"]


def cost(path, backend):
    """Measured seconds of the test file ``path`` (relative to the repository
    root) on ``backend``; 0 for a file not listed."""
    return COSTS.get(backend, COSTS["tensorflow"]).get(path, 0)
