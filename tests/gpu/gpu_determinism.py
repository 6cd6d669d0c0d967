"""Run-to-run determinism of the kernels on the default device, and agreement with the CPU kernels.

For the hinge forest and fern (forward: per-tree outputs and the traversal's
leaf, margin and vertex; backward: gradients with respect to the inputs, the
thresholds and the leaf weights) and hard routing (oblique and noisy-OR
"experts" splits, some nodes not split: leaf node and path values) and the
Tree Ensemble Layer ("tel": output and the gradients with respect to x, the
node weights and biases and the leaf weights) and pruned probabilistic
routing ("pruned": output, kept leaves, visited splits, every gradient and the
EM E-step's counts; integers compared exactly with the CPU engine's, which
random inputs keep away from the threshold's rounding), in float32
and float64 (JAX's x64 mode), each jitted computation runs ``--runs`` times on
the same inputs on ``jax.devices()[0]`` (the GPU on the lent machine) and
every output must be bit-identical to the first run's. The same computation
then runs on the CPU (inputs placed on ``jax.devices("cpu")[0]``, under
``jax.default_device``) and must agree within ``1e-5`` (float32) / ``1e-12``
(float64) of each output's largest magnitude; a float32 output further apart
passes only if it is no less accurate than the CPU kernels' own float32 result:
both against the CPU kernels in float64 on the same inputs, its error at most
``max(1e-5, 2 x`` the CPU's) (a sum with cancellation, such as the Tree
Ensemble Layer's input gradient, rounds differently in each summation order:
there the CPU engine itself is 5.8e-5 from float64 and the portable bodies
2.9e-5); leaf nodes must be equal (the
routing inputs keep every split value at least ``1e-4`` from 0, so rounding
cannot flip a decision). The table prints the largest run-to-run and GPU-CPU
differences and which path ran on each device (``kernels``: keras-trees custom
calls in the compiled module; ``keras.ops``: the reference path).

    KERAS_BACKEND=jax python tests/gpu/gpu_determinism.py [--runs 20] [--expect-gpu] [--small]

``--expect-gpu`` also fails when the default device is not a GPU or did not
run the kernels; ``--small`` uses smaller shapes (the CPU dry run).
"""

import argparse
import os
import re
import sys

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
from gpu_speed import x64  # noqa: E402

TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
MARGIN = 1e-4  # smallest |split value| kept in the routing inputs
CASES = ("hinge tree", "hinge fern", "routing oblique", "routing experts", "tel", "pruned")
TEL_GAMMA = 1.0




def hinge_inputs(rng, dtype, fern, size):
    batch, trees, depth, features, units = size["batch"], size["trees"], size["depth"], size["features"], size["units"]
    vertices = depth if fern else 2**depth - 1
    x = rng.normal(size=(batch, features)).astype(dtype)
    t = rng.uniform(-1.5, 1.5, size=(trees, vertices)).astype(dtype)
    f = rng.integers(0, features, size=(trees, vertices)).astype(np.int32)
    w = rng.normal(size=(trees, 2**depth, units)).astype(dtype)
    cot = rng.normal(size=(batch, trees, units)).astype(dtype)
    return [x, t, f, w, cot]


def hinge_fn(fern):
    import jax

    from keras_trees import ops as tree_ops

    def fn(x, t, f, w, cot):
        out, vjp = jax.vjp(lambda x, t, w: tree_ops.hinge_forest(x, t, f, w, fern=fern), x, t, w)
        gx, gt, gw = vjp(cot)
        leaf, margin, vertex = tree_ops.hinge_forest_traversal(x, t, f, fern=fern)
        return {"output": out, "leaf": leaf, "margin": margin, "vertex": vertex,
                "grad_x": gx, "grad_thresholds": gt, "grad_leaf_weights": gw}

    return fn


def softplus(v):
    return np.logaddexp(0.0, v)


def routing_inputs(rng, dtype, experts, size):
    """Inputs whose every split value is at least MARGIN away from 0 (rows too
    close to a split are dropped), and ``is_split`` with some nodes not split."""
    batch, trees, depth, dim, k = size["batch"], size["trees"], size["depth"], size["dim"], size["experts"]
    n = 2**depth - 1
    x = rng.normal(size=(batch, dim))
    is_split = rng.random((trees, n)) < 0.85
    is_split[:, 0] = True
    if experts:
        w = rng.normal(size=(trees, n, k, dim)) / np.sqrt(dim)
        b = rng.normal(scale=0.3, size=(trees, n, k))
        r = rng.uniform(0.2, 1.0, size=(trees, n, k))
        c = rng.uniform(0.5, 1.5, size=(trees, n))
        # Rounded to the dtype first, so the margins are those of the arrays the kernels see.
        x, w, b, r, c = (a.astype(dtype).astype(np.float64) for a in (x, w, b, r, c))
        values = np.einsum("tnk,btnk->btn", r, softplus(np.einsum("bd,tnkd->btnk", x, w) + b)) - c
        arrays = [w, b, r, c]
    else:
        w = rng.normal(size=(trees, n, dim)) / np.sqrt(dim)
        b = rng.normal(scale=0.1, size=(trees, n))
        x, w, b = (a.astype(dtype).astype(np.float64) for a in (x, w, b))
        values = np.einsum("bd,tnd->btn", x, w) + b
        arrays = [w, b]
    keep = np.min(np.abs(values), axis=(1, 2)) >= MARGIN
    return [x[keep].astype(dtype), *(a.astype(dtype) for a in arrays), is_split]


def routing_fn(experts):
    from keras_trees import ops as tree_ops

    def fn(x, *arrays):
        if experts:
            w, b, r, c, is_split = arrays
            node, path = tree_ops.hard_route(x, w, b, is_split, expert_weights=r, threshold=c)
        else:
            w, b, is_split = arrays
            node, path = tree_ops.hard_route(x, w, b, is_split)
        return {"node": node, "path_values": path}

    return fn


def tel_inputs(rng, dtype, size):
    batch, trees, depth, dim, units = size["batch"], size["trees"], size["depth"], size["dim"], size["units"]
    n = 2**depth - 1
    x = rng.normal(size=(batch, dim))
    w = rng.normal(size=(trees, n, dim)) / np.sqrt(dim)
    b = rng.normal(scale=0.3, size=(trees, n))
    o = rng.normal(size=(trees, n + 1, units))
    cot = rng.normal(size=(batch, units))
    return [a.astype(dtype) for a in (x, w, b, o, cot)]


def tel_fn(x, w, b, o, cot):
    import jax

    from keras_trees import ops as tree_ops

    out, vjp = jax.vjp(lambda x, w, b, o: tree_ops.soft_tree_ensemble(x, w, b, o, TEL_GAMMA), x, w, b, o)
    gx, gw, gb, go = vjp(cot)
    return {"output": out, "grad_x": gx, "grad_node_weights": gw, "grad_node_bias": gb, "grad_leaf_weights": go}


PRUNE_THRESHOLD = 1e-3


def pruned_inputs(rng, dtype, size):
    """Pruned probabilistic routing, oblique splits, some nodes not split;
    leaf values also as class distributions with labels for the EM E-step."""
    batch, trees, depth, dim, units = size["batch"], size["trees"], size["depth"], size["dim"], size["units"]
    n = 2**depth - 1
    x = rng.normal(size=(batch, dim))
    w = rng.normal(size=(trees, n, dim)) / np.sqrt(dim)
    b = rng.normal(scale=0.3, size=(trees, n))
    g = rng.uniform(1.0, 3.0, size=(trees, n))
    is_split = rng.random((trees, n)) < 0.85
    is_split[:, 0] = True
    pi = rng.uniform(0.05, 1.0, size=(trees, 2 * n + 1, units))
    pi /= pi.sum(-1, keepdims=True)
    labels = rng.integers(0, units, batch).astype(np.int32)
    cot = rng.normal(size=(batch, trees, units))
    floats = [a.astype(dtype) for a in (x, w, b, g)]
    return [*floats, is_split, pi.astype(dtype), labels, cot.astype(dtype)]


def pruned_fn(x, w, b, g, is_split, pi, labels, cot):
    """Forward (output, kept leaves, visited splits), the gradients of
    <output, cot> and the E-step's counts."""
    import jax

    from keras_trees import ops as tree_ops

    def route(x, w, b, g, v):
        return tree_ops.pruned_route(x, w, b, g, is_split, v, PRUNE_THRESHOLD, with_statistics=True)

    out, vjp = jax.vjp(lambda *a: route(*a)[0], x, w, b, g, pi)
    _, kept, evals, _ = route(x, w, b, g, pi)
    gx, gw, gb, gg, gv = vjp(cot)
    counts = tree_ops.pruned_em_statistics(x, w, b, g, is_split, pi, labels, None, PRUNE_THRESHOLD)
    return {"output": out, "kept_leaves": kept, "split_evaluations": evals, "grad_x": gx, "grad_split_weights": gw,
            "grad_split_bias": gb, "grad_gamma": gg, "grad_leaf_values": gv, "em_counts": counts}


def case_inputs_and_fn(case, dtype, rng, size):
    if case == "pruned":
        return pruned_inputs(rng, dtype, size), pruned_fn
    if case == "tel":
        return tel_inputs(rng, dtype, size), tel_fn
    if case.startswith("hinge"):
        fern = case.endswith("fern")
        return hinge_inputs(rng, dtype, fern, size), hinge_fn(fern)
    experts = case.endswith("experts")
    return routing_inputs(rng, dtype, experts, size), routing_fn(experts)


def run(compiled, args):
    import jax

    out = compiled(*args)
    return {k: np.asarray(v) for k, v in jax.device_get(out).items()}, out


def path_of(lowered):
    return "kernels" if re.search(r"KerasTrees[A-Za-z]+", lowered.as_text()) else "keras.ops"


def max_rel(a, b):
    if a.size == 0:
        return 0.0
    if not np.issubdtype(b.dtype, np.floating):
        return 0.0 if np.array_equal(a, b) else float("inf")
    scale = max(float(np.max(np.abs(b))), np.finfo(b.dtype).tiny)
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) / scale


def check(case, dtype, runs, size, seed):
    """One row of the table: a dict, with ``ok`` and the reasons in ``problems``."""
    import jax

    rng = np.random.default_rng(seed)
    with x64(dtype == "float64"):
        inputs, fn = case_inputs_and_fn(case, dtype, rng, size)
        device = jax.devices()[0]
        args = jax.device_put(inputs, device)
        lowered = jax.jit(fn).lower(*args)
        compiled = lowered.compile()
        first, _ = run(compiled, args)
        differing_runs, run_diff = 0, 0.0
        for _ in range(runs - 1):
            again, _ = run(compiled, args)
            same = all(first[k].tobytes() == again[k].tobytes() for k in first)
            differing_runs += not same
            run_diff = max([run_diff] + [max_rel(again[k], first[k]) for k in first])

        cpu = jax.devices("cpu")[0]
        with jax.default_device(cpu):
            cpu_args = jax.device_put(inputs, cpu)
            cpu_lowered = jax.jit(fn).lower(*cpu_args)
            on_cpu, raw = run(cpu_lowered.compile(), cpu_args)
        placed = {d.platform for leaf in jax.tree_util.tree_leaves(raw) for d in leaf.devices()}
    truth = {}

    def float64_truth():
        """The CPU kernels in float64 on the same inputs (computed once, when a float32 difference needs judging)."""
        if not truth:
            with x64(True), jax.default_device(cpu):
                wide = jax.device_put([a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a
                                       for a in inputs], cpu)
                truth.update(run(jax.jit(lambda *a: fn(*a)).lower(*wide).compile(), wide)[0])
        return truth

    problems = []
    if differing_runs:
        problems.append(f"{differing_runs} of {runs - 1} reruns not bit-identical")
    if placed != {"cpu"}:
        problems.append(f"the CPU run's results live on {placed}")
    device_diff = 0.0
    for key in first:
        if first[key].shape != on_cpu[key].shape or first[key].dtype != on_cpu[key].dtype:
            problems.append(f"{key}: {first[key].shape} {first[key].dtype} here, "
                            f"{on_cpu[key].shape} {on_cpu[key].dtype} on the CPU")
            continue
        if np.issubdtype(first[key].dtype, np.integer):
            if not np.array_equal(first[key], on_cpu[key]):
                problems.append(f"{key}: {int(np.sum(first[key] != on_cpu[key]))} integers differ from the CPU's")
            continue
        diff = max_rel(first[key], on_cpu[key])
        device_diff = max(device_diff, diff)
        if diff <= TOLERANCE[dtype]:
            continue
        if dtype == "float32":  # no less accurate than the CPU kernels, both against float64
            exact = float64_truth()[key]
            error, cpu_error = max_rel(first[key], exact), max_rel(on_cpu[key], exact)
            if error <= max(TOLERANCE[dtype], 2 * cpu_error):
                continue
            problems.append(f"{key}: {diff:.2e} from the CPU's (tolerance {TOLERANCE[dtype]:g}), {error:.2e} from "
                            f"float64 against the CPU's {cpu_error:.2e} (allowed: at most twice that)")
        else:
            problems.append(f"{key}: {diff:.2e} from the CPU's (tolerance {TOLERANCE[dtype]:g})")
    return {"case": case, "dtype": dtype, "device": str(device), "path": path_of(lowered),
            "cpu_path": path_of(cpu_lowered), "rows": int(inputs[0].shape[0]), "runs": runs,
            "differing_runs": differing_runs, "max_run_diff": run_diff, "max_device_diff": device_diff,
            "problems": problems}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--expect-gpu", action="store_true",
                        help="also fail unless the default device is a GPU that ran the kernels")
    parser.add_argument("--small", action="store_true", help="smaller shapes (CPU dry run)")
    args = parser.parse_args(argv)

    import jax

    import keras_trees  # noqa: F401  (loads and registers the kernels)

    if args.small:
        size = dict(batch=64, trees=4, depth=4, features=8, units=3, dim=6, experts=2)
    else:  # many samples per tree: gradient sums of one threshold gather thousands of terms
        size = dict(batch=4096, trees=16, depth=6, features=32, units=8, dim=16, experts=3)
    print(f"default device {jax.devices()[0]} ({jax.devices()[0].device_kind}); {args.runs} runs each; "
          f"shapes {size}")
    print(f"{'case':<16} {'dtype':<8} {'path':<9} {'cpu path':<9} {'rows':>5} {'bitwise':>8} "
          f"{'max run diff':>12} {'max diff vs cpu':>15}  result")
    rows, failed = [], False
    for seed, case in enumerate(CASES):
        for dtype in ("float32", "float64"):
            row = check(case, dtype, args.runs, size, seed)
            if args.expect_gpu and not row["device"].lower().startswith(("cuda", "gpu")):
                row["problems"].append(f"the default device is {row['device']}, not a GPU")
            if args.expect_gpu and row["path"] != "kernels":
                row["problems"].append("the keras.ops path ran, not the kernels")
            rows.append(row)
            failed |= bool(row["problems"])
            bitwise = "yes" if not row["differing_runs"] else f"NO ({row['differing_runs']})"
            print(f"{case:<16} {dtype:<8} {row['path']:<9} {row['cpu_path']:<9} {row['rows']:>5} {bitwise:>8} "
                  f"{row['max_run_diff']:>12.1e} {row['max_device_diff']:>15.1e}  "
                  f"{'ok' if not row['problems'] else 'FAILED: ' + '; '.join(row['problems'])}", flush=True)
    print("determinism: " + ("FAILED" if failed else f"ok ({len(rows)} cases bit-identical over {args.runs} runs, "
                                                       "within tolerance of the CPU)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
