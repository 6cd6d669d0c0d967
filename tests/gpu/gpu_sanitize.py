"""The tiny workload that tests/gpu/run_check.sh runs under compute-sanitizer.

Batch 3, 2 trees of depth 3 (odd sizes everywhere: 5 inputs, 3 units, 2
experts): hinge forest and fern forward and backward (gradients with respect
to inputs, thresholds and leaf weights) and the traversal, hard routing with
oblique and noisy-OR ("experts") splits, with and without path values, some
nodes not split, and the Tree Ensemble Layer forward and backward (soft and
hard splits); each once under ``jax.jit`` on the default device, waited for.

    XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \\
        compute-sanitizer --tool memcheck --error-exitcode 1 python tests/gpu/gpu_sanitize.py

(``platform`` makes every JAX buffer its own cudaMalloc, so memcheck sees the
bounds of each.) Prints which path ran: under the keras.ops path the sanitizer
checks none of the keras-trees kernels.
"""

import os
import re
import sys

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")


def main():
    import jax
    import jax.numpy as jnp

    from keras_trees import ops as tree_ops

    rng = np.random.default_rng(0)
    batch, trees, depth, features, units, k = 3, 2, 3, 5, 3, 2
    n = 2**depth - 1
    x = rng.normal(size=(batch, features)).astype(np.float32)
    cot = rng.normal(size=(batch, trees, units)).astype(np.float32)
    leaf_weights = rng.normal(size=(trees, 2**depth, units)).astype(np.float32)

    def hinge(fern):
        vertices = depth if fern else n
        t = rng.uniform(-1, 1, size=(trees, vertices)).astype(np.float32)
        f = rng.integers(0, features, size=(trees, vertices)).astype(np.int32)

        def fn(x, t, w):
            out, vjp = jax.vjp(lambda x, t, w: tree_ops.hinge_forest(x, t, f, w, fern=fern), x, t, w)
            return out, vjp(cot), tree_ops.hinge_forest_traversal(x, t, f, fern=fern)

        return fn, (x, t, leaf_weights)

    is_split = np.array([[True, True, False, True, False, False, False]] * trees)
    w = rng.normal(size=(trees, n, features)).astype(np.float32)
    b = rng.normal(size=(trees, n)).astype(np.float32)
    w4 = rng.normal(size=(trees, n, k, features)).astype(np.float32)
    b3 = rng.normal(size=(trees, n, k)).astype(np.float32)
    r = rng.uniform(0.1, 1, size=(trees, n, k)).astype(np.float32)
    c = rng.uniform(0.5, 1.5, size=(trees, n)).astype(np.float32)

    def oblique(x, w, b):
        return (tree_ops.hard_route(x, w, b, is_split),
                tree_ops.hard_route(x, w, b, is_split, with_path_values=False))

    def experts(x, w4, b3, r, c):
        return (tree_ops.hard_route(x, w4, b3, is_split, expert_weights=r, threshold=c),
                tree_ops.hard_route(x, w4, b3, is_split, with_path_values=False, expert_weights=r, threshold=c))

    tel_leaves = rng.normal(size=(trees, n + 1, units)).astype(np.float32)
    tel_cot = rng.normal(size=(batch, units)).astype(np.float32)

    def tel(x, w, b, o):
        outs = []
        for gamma in (0.1, 1.0, 20.0):  # mostly hard, some soft, every leaf reached
            out, vjp = jax.vjp(lambda x, w, b, o, g=gamma: tree_ops.soft_tree_ensemble(x, w, b, o, g), x, w, b, o)
            outs.append((out, vjp(tel_cot)))
        return outs

    prune_leaves = rng.normal(size=(trees, 2 * n + 1, units)).astype(np.float32)
    gamma = rng.uniform(0.5, 2.0, size=(trees, n)).astype(np.float32)
    labels = rng.integers(0, units, size=batch).astype(np.int32)
    pi = np.abs(prune_leaves) + 0.1
    pi /= pi.sum(-1, keepdims=True)

    def pruned(x, w, b, w4, b3, r, c):
        """Pruned probabilistic routing: both split forms, forward and
        backward, leaf statistics and the EM E-step."""
        outs = []
        for threshold in (0.0, 0.05):
            out, vjp = jax.vjp(lambda x, w, b: tree_ops.pruned_route(x, w, b, gamma, is_split, prune_leaves, threshold),
                               x, w, b)
            outs.append((out, vjp(cot)))
            out, vjp = jax.vjp(lambda x, w4, r: tree_ops.pruned_route(x, w4, b3, gamma, is_split, prune_leaves,
                                                                      threshold, expert_weights=r, rate0=c),
                               x, w4, r)
            outs.append((out, vjp(cot)))
            outs.append(tree_ops.pruned_leaf_statistics(x, w, b, gamma, is_split, cot, threshold))
            outs.append(tree_ops.pruned_em_statistics(x, w, b, gamma, is_split, pi, labels, None, threshold))
        return outs

    from keras_trees.ops.loss_augmented import loss_augmented_inference

    lai_trees = {}
    for lai_depth in (3, 9):  # the exact search's shared-memory levels only, and subtrees below them
        m = 2**lai_depth - 1
        lai_trees[lai_depth] = (rng.normal(size=(m, features)).astype(np.float32),
                                rng.normal(size=m).astype(np.float32),
                                rng.normal(size=(m + 1, units)).astype(np.float32))
    targets = rng.normal(size=(batch, units)).astype(np.float32)

    def lai(x, w3, b3_, o3, w9, b9, o9):
        """Loss-augmented inference: fast (a thread per sample) and exact
        (a block per sample, shared memory and barriers), both losses."""
        outs = []
        for w_, b_, o_ in ((w3, b3_, o3), (w9, b9, o9)):
            for fast in (True, False):
                outs.append(loss_augmented_inference(x, w_, b_, o_, labels, "log", fast))
                outs.append(loss_augmented_inference(x, w_, b_, o_, targets, "squared", fast))
        return outs

    workloads = {"hinge tree": hinge(False), "hinge fern": hinge(True),
                 "loss-augmented inf.": (lai, (x, *lai_trees[3], *lai_trees[9])),
                 "pruned routing": (pruned, (x, w, b, w4, b3, r, c)),
                 "tree ensemble layer": (tel, (x, w, b, tel_leaves)),
                 "hard routing oblique": (oblique, (x, w, b)),
                 "hard routing experts": (experts, (x, w4, b3, r, c))}
    for name, (fn, args) in workloads.items():
        args = [jnp.asarray(a) for a in args]
        lowered = jax.jit(fn).lower(*args)
        path = "kernels" if re.search(r"KerasTrees[A-Za-z]+", lowered.as_text()) else "keras.ops path"
        out = jax.block_until_ready(lowered.compile()(*args))
        finite = all(np.all(np.isfinite(np.asarray(leaf))) for leaf in jax.tree_util.tree_leaves(out))
        print(f"{name:<22} on {jax.devices()[0]}: {path}, outputs finite: {finite}", flush=True)
        if not finite:
            return 1
    # Bad inputs: each call must fail with the CPU kernels' message, touching no
    # memory out of bounds on the way (the kernels run before the status words
    # are read back).
    bad_f = rng.integers(0, features, size=(trees, n)).astype(np.int32)
    bad_f[1, 2] = 99
    t = rng.uniform(-1, 1, size=(trees, n)).astype(np.float32)
    x_nan = x.copy()
    x_nan[0, 1] = np.nan
    rates = r.copy()
    rates[0, 1, 1] = -0.5
    cases = {
        "hinge: feature index out of range": lambda: tree_ops.hinge_forest(x, t, bad_f, leaf_weights),
        "hinge: NaN input (jit)": lambda: jax.jit(lambda x: tree_ops.hinge_forest(x, t, bad_f * 0, leaf_weights))(x_nan),
        "routing: NaN input (jit)": lambda: jax.jit(lambda x: tree_ops.hard_route(x, w, b, is_split)[0])(x_nan),
        "tel: NaN input (jit)": lambda: jax.jit(lambda x: tree_ops.soft_tree_ensemble(x, w, b, tel_leaves, 1.0))(x_nan),
        "tel: gamma 0": lambda: tree_ops.soft_tree_ensemble(x, w, b, tel_leaves, 0.0),
        "pruned: NaN input (jit)": lambda: jax.jit(
            lambda x: tree_ops.pruned_route(x, w, b, gamma, is_split, prune_leaves, 0.01))(x_nan),
        "pruned EM: label out of range": lambda: tree_ops.pruned_em_statistics(
            x, w, b, gamma, is_split, pi, labels + units, None, 0.01),
        "lai: label out of range": lambda: loss_augmented_inference(
            x, *lai_trees[3], labels + units, "log", False),
        "routing: negative rate": lambda: tree_ops.hard_route(x, w4, b3, is_split, expert_weights=rates, threshold=c)[0],
    }
    for name, call in cases.items():
        print(f"{name}: ...", flush=True)
        try:
            jax.block_until_ready(call())
        except Exception as exc:  # noqa: BLE001 - the message is the point
            print(f"{name}: raised {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        else:
            print(f"{name}: NO ERROR RAISED", flush=True)
            return 1
    print("sanitizer workload: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
