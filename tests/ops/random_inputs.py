"""Random inputs of the ops' tests, shared by the CPU kernel tests (tests/ops/)
and the GPU bodies' tests (tests/backends/test_*_portable.py)."""

import numpy as np

from keras_trees import topology
from tests.test_topology import random_tree


def pruned_inputs(rng, form="oblique", batch=23, dim=4, trees=3, depth=5, units=3, dtype="float64", experts=3,
                  p_split=0.7, scale=1.0):
    """Inputs of pruned routing as a dict (unbalanced random trees) and the
    trees' node states. ``form``: "oblique", "experts" (annealed noisy-OR) or
    "experts_raw" (noisy-OR, not annealed)."""
    n = 2**depth - 1
    state = random_tree(rng, depth, p_split=p_split, num_trees=trees)
    args = {
        "x": rng.normal(size=(batch, dim)),
        "gamma": rng.uniform(0.5, 3.0, size=(trees, n)),
        "is_split": state[:, :n] == topology.SPLIT,
        "leaf_values": rng.uniform(-1, 1, size=(trees, 2 * n + 1, units)),
    }
    if form == "oblique":
        args["split_weights"] = scale * rng.normal(size=(trees, n, dim))
        args["split_bias"] = scale * rng.normal(size=(trees, n))
    else:
        args["split_weights"] = scale * rng.normal(size=(trees, n, experts, dim))
        args["split_bias"] = scale * rng.normal(size=(trees, n, experts))
        args["expert_weights"] = rng.uniform(0.05, 1.0, size=(trees, n, experts))
        args["rate0"] = rng.uniform(0.2, 1.5, size=(trees, n))
        args["annealed"] = form == "experts"
    for k, v in args.items():
        if isinstance(v, np.ndarray) and v.dtype == np.float64:
            args[k] = v.astype(dtype)
    return args, state


def lai_problem(rng, depth, loss, batch=64, p=5, k=4, dtype="float64", scale=1.0):
    """Inputs of loss-augmented inference: x, split weights and biases, leaf
    parameters theta and targets (labels for the log loss, else real rows)."""
    internal = 2**depth - 1
    x = rng.normal(size=(batch, p)).astype(dtype)
    w = (rng.normal(size=(internal, p)) * scale).astype(dtype)
    b = (rng.normal(size=internal) * 0.3 * scale).astype(dtype)
    theta = (rng.normal(size=(internal + 1, k)) * 2).astype(dtype)
    if loss == "log":
        y = rng.integers(0, k, size=batch).astype("int32")
    else:
        y = rng.normal(size=(batch, k)).astype(dtype)
    return x, w, b, theta, y
