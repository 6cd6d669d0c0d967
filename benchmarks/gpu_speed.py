"""CUDA kernels vs the jit-compiled keras.ops path on one device (JAX backend).

Each row times the same computation two ways on ``jax.devices()[0]``, both
under ``jax.jit``:

* ``kernels``: ``keras_trees.ops`` as a user calls it, which dispatches to the
  compiled kernels (XLA FFI custom calls; CUDA handlers on a GPU) where they
  are available for the device;
* ``keras.ops``: the same functions traced inside
  ``keras_trees.ops.reference_only()``, the ``keras.ops`` path (level-by-level
  gathers), which a GPU runs for families without CUDA kernels;
* ``unchecked``: the ``keras.ops`` path traced without its runtime input
  checks (``keras_trees.validation.tensors.unchecked_for_timing``; on that
  path each check is a ``lax.cond``, which a GPU decides on the host), so the
  ratio can be read against the path's arithmetic alone. Its outputs must be
  bit-identical to the checked path's.

Rows (float32):

* hinge forest, 100 trees of depth 10 over 100 inputs, 26 units, forward and
  backward at batch 256 and 4096: ``loss = sum(hinge_forest(...) * c)`` for a
  fixed random cotangent ``c``, gradients with respect to the inputs, the
  thresholds and the leaf weights;
* hinge fern, the same at batch 4096;
* hard routing forward (``hard_route``: leaf node and path values), 100
  oblique trees over 64 inputs, every internal node a split, depth 10 and 12,
  batch 1024;
* Tree Ensemble Layer (``soft_tree_ensemble``), 20 trees of depth 8 over
  64 inputs, 10 units, transition width 1, forward and backward at batch 4096
  (gradients with respect to x, node weights, biases and leaf weights), twice:
  at initialization (the layer's initializers: SplitUniform node weights, zero
  biases, N(0, 0.05) leaves) and after training (TEL_TRAIN_STEPS full-batch
  Adam steps, through the kernels, on a fixed nonlinear regression target).
  The setting names the mean reachable leaves per (sample, tree)
  (``mean_reachable_leaves``): the conditional passes' work follows it;
* pruned probabilistic routing (``pruned_route``) forward and backward, and
  the fused EM E-step (``pruned_em_statistics``), the paper's letter forest:
  70 oblique trees of depth 10 over 16 inputs, 26 classes, prune threshold
  1e-4, at batch 4096, against the dense ``keras.ops`` path;
* loss-augmented inference (``loss_augmented_inference``), fast and exact
  search, one tree of depth 14 over 16 inputs, 26 classes, log loss, batch
  1024.

Timing: a few warm-up calls, then the median of N calls (fewer, at least 5,
where a row's calls would take more than about 10 s), each waited for with
``jax.block_until_ready``, rotating among 3 input sets (so no cache holds the
one input); the paths alternate call by call. Beside it, ``piped``: the best
over 3 rounds of 50 calls back to back with one wait, per call (what a
training loop that does not read its results each step sees). Before the
rows, the fixed cost of one jitted call that does nothing (``x + 1`` on one
number), synchronized and pipelined. The JSON also has the compile times. Before timing, each row checks that the kernels agree with the
``keras.ops`` path computed with exact float32 dot products (``max rel diff``:
largest difference over the largest magnitude, per output, worst output; for
routing, leaf nodes must match: at most 1 in 10,000 may differ, split values
within rounding of 0; where a row's outputs differ by more than 1e-4, both
paths are judged against the keras.ops path in float64, and the kernels must
be no less accurate than it: ``*`` in the table) and runs the kernel
computation twice on the same inputs
(``bitwise``: all outputs and gradients bit-identical). ``path`` says what the timed ``kernels`` function
actually compiled to: ``kernels`` when its HLO holds keras-trees custom calls,
``reference`` when the dispatch fell back to the keras.ops path (then the
ratio is about 1).

Goals on a GPU: hinge at batch 4096 at most 0.15 ms and at least 9x faster
than keras.ops; hard routing at batch 1024 at least 10x. For context the
table ends with the published figures (shared/benchmarks.md, one H100): the
keras.ops path 0.40 / 1.34 ms (hinge, batch 256 / 4096), 0.49 / 1.12 ms (hard
routing depth 10 / 12), and the public PyTorch CUDA hinge-forest extension
0.89 / 1.90 ms with atomics, 5.0 / 69.7 ms deterministic.

    KERAS_BACKEND=jax python benchmarks/gpu_speed.py [--json PATH] [--quick] [--reps N]
    KERAS_BACKEND=jax python benchmarks/gpu_speed.py --smoke   # tiny shapes, 2 reps, any device (CI)
    KERAS_BACKEND=jax python benchmarks/gpu_speed.py --only tel,pruned   # some families' rows only

Exits non-zero when the kernels and the keras.ops path disagree (the timings
would then compare different computations); misses of the goals and
non-determinism are reported, not fatal (tests/gpu/run_check.sh checks
determinism on its own).
"""

import os
import re
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
# Time every family's kernels, also those a GPU sends to the keras.ops path by
# default because they measured slower there (the Tree Ensemble Layer).
os.environ.setdefault("KERAS_TREES_GPU_KERNELS", "all")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402  (also puts the repository root on sys.path)

import numpy as np  # noqa: E402

INPUT_SETS = 3
PIPELINE_CALLS = 50
# Each row's timed calls (both paths, the medians and the pipelined runs
# together) take about this long at most: a slow row (on a GPU the pruned
# routing row at the paper's forest shape) gets fewer calls, at least
# MIN_REPS, so the whole table fits the GPU check's step.
ROW_BUDGET_S = 10.0
MIN_REPS = 5
# Published figures, shared/benchmarks.md (one H100, JAX 0.11, Keras 3.15, median).
PUBLISHED_KERAS_OPS_MS = {("hinge", False, 256): 0.40, ("hinge", False, 4096): 1.34,
                          ("routing", 10, 1024): 0.49, ("routing", 12, 1024): 1.12}
PUBLISHED_PYTORCH_CUDA_HINGE_MS = {"atomics": {256: 0.89, 4096: 1.90},
                                   "deterministic": {256: 5.0, 4096: 69.7}}
HINGE_GOAL = {"max_ms": 0.15, "min_ratio": 9.0}
ROUTING_GOAL = {"min_ratio": 10.0}
PRUNED_GOAL = {"min_ratio": 5.0}  # pruned routing fwd+bwd at batch 4096, vs the dense keras.ops path
TEL_TRAIN_STEPS = {"smoke": 5, "full": 200}
LAI_GOAL = {"min_ratio": 10.0}  # loss-augmented inference, fast and exact, depth 14, vs the dense keras.ops path
# Loss-augmented inference: samples whose chosen leaves may differ from the
# keras.ops path's (float32 near-ties among 2**14 leaf scores: the two paths
# round the split values and log-sum-exps differently).
LAI_MISMATCH_FRACTION = 1e-2
AGREE_RTOL = 1e-4  # kernels vs keras.ops, relative to each output's largest magnitude
# Rows whose float32 outputs sum many terms (gradients over the batch): where
# the two paths differ by more than AGREE_RTOL, both are judged against the
# keras.ops path in float64 on the same inputs, and the kernels agree when
# their error is at most max(AGREE_RTOL, the keras.ops path's own error): at
# pruned routing's shape the float32 keras.ops path is itself the one far from
# float64 (its gamma gradient).
WIDE_JUDGED = ("hinge", "tel", "pruned", "pruned_em")
NODE_MISMATCH_FRACTION = 1e-4  # routing: leaf nodes that may differ (split values within rounding of 0)


def settings(smoke):
    """The rows: dicts of family, shapes and goal."""
    # Pruned probabilistic routing: the paper's forest on letter (70
    # trees, depth 10, 16 features, 26 classes), default prune threshold.
    pruned_smoke = dict(trees=3, depth=3, features=5, units=2, gamma=2.0, threshold=1e-3)
    pruned = dict(trees=70, depth=10, features=16, units=26, gamma=2.0, threshold=1e-4)
    # Loss-augmented inference, log loss: a non-greedy tree of depth 14.
    lai_smoke = dict(depth=3, features=5, classes=3)
    lai = dict(depth=14, features=16, classes=26)
    if smoke:
        hinge = dict(trees=3, depth=3, features=5, units=2)
        routing = dict(trees=3, dim=4)
        return [
            dict(family="hinge", fern=False, batch=8, **hinge),
            dict(family="hinge", fern=False, batch=16, goal=HINGE_GOAL, **hinge),
            dict(family="hinge", fern=True, batch=16, goal=HINGE_GOAL, **hinge),
            dict(family="routing", depth=3, batch=8, goal=ROUTING_GOAL, **routing),
            dict(family="routing", depth=4, batch=8, goal=ROUTING_GOAL, **routing),
            dict(family="tel", state="init", batch=16, trees=3, depth=3, features=5, units=2, gamma=1.0),
            dict(family="tel", state="trained", batch=16, trees=3, depth=3, features=5, units=2, gamma=1.0),
            dict(family="pruned", batch=16, goal=PRUNED_GOAL, **pruned_smoke),
            dict(family="pruned_em", batch=16, **pruned_smoke),
            dict(family="lai", fast=True, batch=16, goal=LAI_GOAL, **lai_smoke),
            dict(family="lai", fast=False, batch=16, goal=LAI_GOAL, **lai_smoke),
        ]
    hinge = dict(trees=100, depth=10, features=100, units=26)
    routing = dict(trees=100, dim=64)
    return [
        dict(family="hinge", fern=False, batch=256, **hinge),
        dict(family="hinge", fern=False, batch=4096, goal=HINGE_GOAL, **hinge),
        dict(family="hinge", fern=True, batch=4096, goal=HINGE_GOAL, **hinge),
        dict(family="routing", depth=10, batch=1024, goal=ROUTING_GOAL, **routing),
        dict(family="routing", depth=12, batch=1024, goal=ROUTING_GOAL, **routing),
        dict(family="tel", state="init", batch=4096, trees=20, depth=8, features=64, units=10, gamma=1.0),
        dict(family="tel", state="trained", batch=4096, trees=20, depth=8, features=64, units=10, gamma=1.0),
        dict(family="pruned", batch=4096, goal=PRUNED_GOAL, **pruned),
        dict(family="pruned_em", batch=4096, **pruned),
        dict(family="lai", fast=True, batch=1024, goal=LAI_GOAL, **lai),
        dict(family="lai", fast=False, batch=1024, goal=LAI_GOAL, **lai),
    ]


def label(s):
    if s["family"] == "lai":
        return f"loss-augmented inf. {'fast' if s['fast'] else 'exact'}, depth {s['depth']}"
    if s["family"] == "pruned":
        return f"pruned routing fwd+bwd, depth {s['depth']}"
    if s["family"] == "pruned_em":
        return f"pruned EM E-step, depth {s['depth']}"
    if s["family"] == "tel":
        return f"TEL fwd+bwd, depth {s['depth']}, {s['state']}"
    if s["family"] == "hinge":
        return f"hinge {'fern' if s['fern'] else 'forest'} fwd+bwd, depth {s['depth']}"
    return f"hard routing fwd, depth {s['depth']}"


def published(s):
    if s["family"] in ("tel", "pruned", "pruned_em", "lai"):
        return None
    if s["family"] == "hinge":
        return PUBLISHED_KERAS_OPS_MS.get(("hinge", s["fern"], s["batch"]))
    return PUBLISHED_KERAS_OPS_MS.get(("routing", s["depth"], s["batch"]))


def kernels_available(family):
    """``custom_ops_available(family)`` (per-family form), else the global form."""
    from keras_trees import ops as tree_ops

    try:
        return bool(tree_ops.custom_ops_available(family))
    except TypeError:  # the per-family signature is not there yet
        return bool(tree_ops.custom_ops_available())


# ---------------------------------------------------------------- the computations


def hinge_inputs(s, rng):
    """Input sets ``(x, thresholds, leaf_weights)``, and the shared feature indices and cotangent."""
    import jax.numpy as jnp

    vertices = s["depth"] if s["fern"] else 2 ** s["depth"] - 1
    sets = []
    for _ in range(INPUT_SETS):
        x = rng.standard_normal((s["batch"], s["features"]), dtype=np.float32)
        t = rng.uniform(-2, 2, size=(s["trees"], vertices)).astype(np.float32)
        w = rng.standard_normal((s["trees"], 2 ** s["depth"], s["units"]), dtype=np.float32)
        sets.append(tuple(jnp.asarray(a) for a in (x, t, w)))
    f = jnp.asarray(rng.integers(0, s["features"], size=(s["trees"], vertices)).astype(np.int32))
    cot = jnp.asarray(rng.standard_normal((s["batch"], s["trees"], s["units"]), dtype=np.float32))
    return sets, (f, cot)


def hinge_step(fern):
    """A fresh jitted ``(x, t, w, f, cot) -> (loss, (dx, dt, dw))``: a new function
    object per path, so no trace of one path can serve the other."""
    import jax
    import jax.numpy as jnp

    from keras_trees import ops as tree_ops

    def loss(x, t, w, f, cot):
        return jnp.sum(tree_ops.hinge_forest(x, t, f, w, fern=fern) * cot)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))


def routing_inputs(s, rng):
    """Input sets ``(x, split_weights, split_bias)``, and the shared ``is_split``."""
    import jax.numpy as jnp

    n = 2 ** s["depth"] - 1
    sets = []
    for _ in range(INPUT_SETS):
        x = rng.standard_normal((s["batch"], s["dim"]), dtype=np.float32)
        w = rng.standard_normal((s["trees"], n, s["dim"]), dtype=np.float32) / np.float32(np.sqrt(s["dim"]))
        b = (0.1 * rng.standard_normal((s["trees"], n), dtype=np.float32)).astype(np.float32)
        sets.append(tuple(jnp.asarray(a) for a in (x, w, b)))
    return sets, (jnp.asarray(np.ones((s["trees"], n), bool)),)


def tel_inputs(s, rng, smoke):
    """Input sets ``(x, node_weights, node_bias, leaf_weights)`` (the same
    weights in each: at initialization, or after training), and the shared
    cotangent."""
    import jax
    import jax.numpy as jnp
    import keras

    from keras_trees import ops as tree_ops
    from keras_trees.initializers import SplitUniform

    n, gamma = 2 ** s["depth"] - 1, s["gamma"]
    xs = [jnp.asarray(rng.standard_normal((s["batch"], s["features"]), dtype=np.float32))
          for _ in range(INPUT_SETS)]
    w = jnp.asarray(SplitUniform(seed=0)((s["trees"], n, s["features"]), dtype="float32"))
    b = jnp.zeros((s["trees"], n), jnp.float32)
    o = jnp.asarray(keras.initializers.RandomNormal(stddev=0.05, seed=1)((s["trees"], n + 1, s["units"]),
                                                                         dtype="float32"))
    if s["state"] == "trained":
        a = rng.standard_normal((s["features"], s["units"]), dtype=np.float32) / np.float32(np.sqrt(s["features"]))
        x0 = xs[0]
        y = jnp.tanh(2.0 * (x0 @ a))

        def loss(params):
            w, b, o = params
            return jnp.mean((tree_ops.soft_tree_ensemble(x0, w, b, o, gamma) - y) ** 2)

        optimizer = keras.optimizers.Adam(0.01)
        params = [keras.Variable(v) for v in (w, b, o)]
        grad = jax.jit(jax.grad(loss))
        for _ in range(TEL_TRAIN_STEPS["smoke" if smoke else "full"]):
            optimizer.apply(grad([p.value for p in params]), params)
        w, b, o = (jnp.asarray(p.value) for p in params)
    cot = jnp.asarray(rng.standard_normal((s["batch"], s["units"]), dtype=np.float32))
    s["reachable_leaves"] = float(tree_ops.mean_reachable_leaves(xs[0], w, b, gamma))
    return [(x, w, b, o) for x in xs], (cot,)


def tel_step(gamma):
    import jax
    import jax.numpy as jnp

    from keras_trees import ops as tree_ops

    def loss(x, w, b, o, cot):
        return jnp.sum(tree_ops.soft_tree_ensemble(x, w, b, o, gamma) * cot)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))


def pruned_inputs(s, rng):
    """Pruned routing, oblique splits, every node split: input sets
    ``(x, split_weights, split_bias, gamma, leaf_values)`` (leaf values: class
    distributions for the E-step) and the shared ``(is_split, cotangent)`` or
    ``(is_split, labels)``."""
    import jax.numpy as jnp

    n, d, trees, units = 2 ** s["depth"] - 1, s["features"], s["trees"], s["units"]
    sets = []
    for _ in range(INPUT_SETS):
        x = rng.standard_normal((s["batch"], d), dtype=np.float32)
        w = rng.standard_normal((trees, n, d), dtype=np.float32) / np.float32(np.sqrt(d))
        b = (0.1 * rng.standard_normal((trees, n), dtype=np.float32)).astype(np.float32)
        g = np.full((trees, n), s["gamma"], np.float32)
        v = rng.uniform(0.05, 1.0, size=(trees, 2 * n + 1, units)).astype(np.float32)
        v /= v.sum(-1, keepdims=True)
        sets.append(tuple(jnp.asarray(a) for a in (x, w, b, g, v)))
    is_split = jnp.asarray(np.ones((trees, n), bool))
    if s["family"] == "pruned_em":
        return sets, (is_split, jnp.asarray(rng.integers(0, units, s["batch"]).astype(np.int32)))
    cot = jnp.asarray(rng.standard_normal((s["batch"], trees, units), dtype=np.float32))
    return sets, (is_split, cot)


def pruned_step(threshold):
    """Forward and the gradients of the parameters (x is data, as in training)."""
    import jax
    import jax.numpy as jnp

    from keras_trees import ops as tree_ops

    def loss(x, w, b, g, v, is_split, cot):
        return jnp.sum(tree_ops.pruned_route(x, w, b, g, is_split, v, threshold) * cot)

    return jax.jit(jax.value_and_grad(loss, argnums=(1, 2, 3, 4)))


def pruned_em_step(threshold):
    import jax

    from keras_trees import ops as tree_ops

    def em(x, w, b, g, v, is_split, labels):
        return tree_ops.pruned_em_statistics(x, w, b, g, is_split, v, labels, None, threshold)

    return jax.jit(em)


def lai_inputs(s, rng):
    """Loss-augmented inference, one tree, log loss: input sets ``(x,
    split_weights, split_bias, leaf_values, labels)``, nothing shared."""
    import jax.numpy as jnp

    n, d, k = 2 ** s["depth"] - 1, s["features"], s["classes"]
    sets = []
    for _ in range(INPUT_SETS):
        x = rng.standard_normal((s["batch"], d), dtype=np.float32)
        w = rng.standard_normal((n, d), dtype=np.float32) / np.float32(np.sqrt(d))
        b = (0.3 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)
        theta = (2 * rng.standard_normal((n + 1, k), dtype=np.float32)).astype(np.float32)
        y = rng.integers(0, k, s["batch"]).astype(np.int32)
        sets.append(tuple(jnp.asarray(a) for a in (x, w, b, theta, y)))
    return sets, ()


def lai_step(fast):
    import jax

    from keras_trees.ops.loss_augmented import loss_augmented_inference

    def infer(x, w, b, theta, y):
        return loss_augmented_inference(x, w, b, theta, y, "log", fast)

    return jax.jit(infer)


def routing_step():
    import jax

    from keras_trees import ops as tree_ops

    def route(x, w, b, is_split):
        return tree_ops.hard_route(x, w, b, is_split)

    return jax.jit(route)


# ---------------------------------------------------------------- measuring


def flat(out):
    import jax

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(out)]


def compile_ahead(fn, args):
    """``(compiled fn, seconds to lower and compile, keras-trees custom-call
    targets in its module, conditionals in its module)``; no targets: the
    keras.ops path only."""
    start = time.perf_counter()
    lowered = fn.lower(*args)
    compiled = lowered.compile()
    seconds = time.perf_counter() - start
    text = lowered.as_text()
    return (compiled, seconds, sorted(set(re.findall(r"KerasTrees[A-Za-z]+", text))),
            len(re.findall(r"stablehlo\.(?:if|case)\b", text)))


def bitwise_equal(a, b):
    return all(x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def rel_diff(a, b):
    """Largest |a - b| over the largest |b|, worst output (floating outputs only)."""
    worst = 0.0
    for x, y in zip(a, b):
        if not np.issubdtype(y.dtype, np.floating) or y.size == 0:
            continue
        scale = max(float(np.max(np.abs(y))), np.finfo(y.dtype).tiny)
        worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) / scale)
    return worst


def compare(family, kernel_out, reference_out):
    """(agrees, max rel diff, differing leaf nodes)."""
    if family in ("hinge", "tel", "pruned", "pruned_em"):
        diff = rel_diff(kernel_out, reference_out)
        return diff <= AGREE_RTOL, diff, 0
    if family == "lai":  # g, h (leaf indices), score
        same = (kernel_out[0] == reference_out[0]) & (kernel_out[1] == reference_out[1])
        mismatched = int(same.size - np.count_nonzero(same))
        diff = rel_diff([kernel_out[2][same]], [reference_out[2][same]]) if np.any(same) else 0.0
        return mismatched <= LAI_MISMATCH_FRACTION * max(1, same.size) and diff <= AGREE_RTOL, diff, mismatched
    (node_k, path_k), (node_r, path_r) = kernel_out, reference_out
    same = node_k == node_r
    mismatched = int(same.size - np.count_nonzero(same))
    diff = rel_diff([path_k[same]], [path_r[same]]) if np.any(same) else 0.0
    agrees = mismatched <= NODE_MISMATCH_FRACTION * max(1, same.size) and diff <= AGREE_RTOL
    return agrees, diff, mismatched


def x64(enabled=True):
    """A context with JAX's 64-bit mode on (``enabled``) or left as it is
    (also used by tests/gpu/gpu_determinism.py)."""
    import contextlib

    import jax

    if not enabled:
        return contextlib.nullcontext()
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # older JAX
        from jax.experimental import enable_x64 as enable
    return enable(True)


def float64_judgement(step, args, kernel_out, check_out):
    """Largest relative error of the float32 kernels and of the float32
    keras.ops path (exact dot products), each against the keras.ops path in
    float64 on the same inputs: ``{"kernels": ..., "keras_ops": ...}``."""
    import jax

    from keras_trees import ops as tree_ops

    with x64(), tree_ops.reference_only(), jax.default_matmul_precision("highest"):
        wide = [a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a for a in map(np.asarray, args)]
        exact = [np.asarray(o) for o in flat(jax.jit(step())(*wide))]
    return {"kernels": rel_diff(kernel_out, exact), "keras_ops": rel_diff(check_out, exact)}


def timed_calls(fns, sets, shared, reps):
    """Median seconds per synchronized call of each function, alternating call by call."""
    import jax

    times = {name: [] for name in fns}
    for i in range(reps):
        args = (*sets[i % len(sets)], *shared)
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def pipelined(fn, sets, shared, rounds, calls=PIPELINE_CALLS):
    """Best over ``rounds`` of (``calls`` calls back to back, one wait) / calls."""
    import jax

    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        out = [fn(*sets[i % len(sets)], *shared) for i in range(calls)]
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / calls)
        del out
    return best


def row_budget(per_call_s, reps, rounds, smoke):
    """(reps, pipeline rounds, pipeline calls) for a row whose two paths take
    ``per_call_s`` seconds together per call: as asked where the row fits
    ROW_BUDGET_S, else fewer (half the budget for the medians, half for the
    pipelined runs; at least MIN_REPS medians and one round of MIN_REPS calls)."""
    if smoke or per_call_s * (reps + rounds * PIPELINE_CALLS) <= ROW_BUDGET_S:
        return reps, rounds, PIPELINE_CALLS
    fit = int(ROW_BUDGET_S / 2 / max(per_call_s, 1e-9))
    calls = max(MIN_REPS, min(PIPELINE_CALLS, fit))
    return max(MIN_REPS, min(reps, fit)), max(1, min(rounds, fit // calls)), calls


def bench(s, reps, warmup, smoke, rng):
    """One row of the table (a dict) for setting ``s``."""
    import jax

    requested_reps = reps

    from keras_trees import ops as tree_ops
    from keras_trees.validation.tensors import unchecked_for_timing

    if s["family"] == "hinge":
        sets, shared = hinge_inputs(s, rng)
        step = lambda: hinge_step(s["fern"])  # noqa: E731
    elif s["family"] in ("pruned", "pruned_em"):
        sets, shared = pruned_inputs(s, rng)
        step = lambda: (pruned_step if s["family"] == "pruned" else pruned_em_step)(s["threshold"])  # noqa: E731
    elif s["family"] == "lai":
        sets, shared = lai_inputs(s, rng)
        step = lambda: lai_step(s["fast"])  # noqa: E731
    elif s["family"] == "tel":
        sets, shared = tel_inputs(s, rng, smoke)
        step = lambda: tel_step(s["gamma"])  # noqa: E731
    else:
        sets, shared = routing_inputs(s, rng)
        step = routing_step
    first = (*sets[0], *shared)

    # Each path is traced and compiled ahead of time in its own context (the
    # dispatch is decided while tracing), so no later call can retrace it.
    kernel_fn, kernel_compile, targets, _ = compile_ahead(step(), first)
    with tree_ops.reference_only():
        reference_fn, reference_compile, reference_targets, reference_conds = compile_ahead(step(), first)
        # The agreement check runs the keras.ops path with exact float32 dot
        # products: on recent GPUs XLA's default float32 matmul is TF32, which
        # moves hard-routing split values by ~1e-3 (the timed keras.ops path
        # keeps the default, as users run it).
        with jax.default_matmul_precision("highest"):
            check_fn, _, _, _ = compile_ahead(step(), first)
    if reference_targets:
        raise SystemExit(f"reference_only() still compiled keras-trees kernels: {reference_targets}")
    kernel_out, reference_out = flat(kernel_fn(*first)), flat(reference_fn(*first))
    check_out = flat(check_fn(*first))
    agrees, diff, mismatched = compare(s["family"], kernel_out, check_out)
    f64 = None
    if not agrees and s["family"] in WIDE_JUDGED:
        f64 = float64_judgement(step, first, kernel_out, check_out)
        agrees = f64["kernels"] <= max(AGREE_RTOL, f64["keras_ops"])

    with tree_ops.reference_only(), unchecked_for_timing():
        unchecked_fn, _, _, unchecked_conds = compile_ahead(step(), first)
    unchecked_out = flat(unchecked_fn(*first))
    if not bitwise_equal(reference_out, unchecked_out):
        raise SystemExit(f"{label(s)}: the keras.ops path without its checks computed other values")

    fns = {"kernels": kernel_fn, "reference": reference_fn, "unchecked": unchecked_fn}
    first_round = time.perf_counter()
    timed_calls(fns, sets, shared, len(sets))
    per_call = (time.perf_counter() - first_round) / len(sets)
    reps, rounds, calls = row_budget(per_call, reps, 1 if smoke else 3, smoke)
    for _ in range(warmup - 1 if reps == requested_reps else 0):
        timed_calls(fns, sets, shared, len(sets))
    medians = timed_calls(fns, sets, shared, reps)
    piped = {name: pipelined(fn, sets, shared, rounds, calls) for name, fn in fns.items()}
    again = flat(kernel_fn(*first))  # after the timing: the same inputs must give the same bits
    reference_again = flat(reference_fn(*first))

    row = {
        "setting": label(s), "family": s["family"], "batch": s["batch"],
        "shape": {k: v for k, v in s.items() if k not in ("family", "batch", "goal", "reachable_leaves")},
        "reachable_leaves": s.get("reachable_leaves"),
        "path": "kernels" if targets else "reference", "ffi_targets": targets,
        "kernels_ms": 1e3 * medians["kernels"], "reference_ms": 1e3 * medians["reference"],
        "ratio": medians["reference"] / medians["kernels"],
        "kernels_pipelined_ms": 1e3 * piped["kernels"], "reference_pipelined_ms": 1e3 * piped["reference"],
        "ratio_pipelined": piped["reference"] / piped["kernels"],
        "reference_unchecked_ms": 1e3 * medians["unchecked"],
        "reference_unchecked_pipelined_ms": 1e3 * piped["unchecked"],
        "ratio_unchecked": medians["unchecked"] / medians["kernels"],
        "reference_conditionals": reference_conds, "unchecked_conditionals": unchecked_conds,
        "reps": reps, "pipeline_calls": calls, "pipeline_rounds": rounds,
        "kernels_compile_s": kernel_compile, "reference_compile_s": reference_compile,
        "bitwise_deterministic": bitwise_equal(kernel_out, again),
        "reference_bitwise_deterministic": bitwise_equal(reference_out, reference_again),
        "agrees": agrees, "max_rel_diff": diff, "node_mismatches": mismatched,
        "error_vs_float64": f64,
        "published_keras_ops_ms": published(s),
    }
    goal = s.get("goal")
    row["goal"] = goal_text(goal)
    row["goal_met"] = None if goal is None or smoke else goal_met(goal, row)
    return row


def goal_text(goal):
    if goal is None:
        return "-"
    parts = []
    if "max_ms" in goal:
        parts.append(f"<={goal['max_ms']} ms")
    parts.append(f">={goal['min_ratio']:g}x")
    return ", ".join(parts)


def goal_met(goal, row):
    ok = row["ratio"] >= goal["min_ratio"]
    if "max_ms" in goal:
        ok = ok and row["kernels_ms"] <= goal["max_ms"]
    return ok


# ---------------------------------------------------------------- report

HEADER = (f"{'setting':<38} {'batch':>5} {'path':<9} {'kernels ms':>10} {'piped':>7} {'keras.ops ms':>12} "
          f"{'piped':>7} {'unchecked':>9} {'ratio':>7} {'piped':>6} {'uncheck':>7} "
          f"{'bitwise':>7} {'max rel diff':>12}  {'goal':<24} {'published keras.ops':>19}")


def format_row(row):
    if row["goal_met"] is None:
        goal = row["goal"] if row["goal"] == "-" else f"{row['goal']} (n/a)"
    else:
        goal = f"{row['goal']}: {'met' if row['goal_met'] else 'MISSED'}"
    diff = (f"{row['max_rel_diff']:.1e}" + ("" if row["agrees"] else " !")
            + (" *" if row.get("error_vs_float64") else ""))
    if row["node_mismatches"]:
        diff = f"{row['node_mismatches']} nodes" + ("" if row["agrees"] else " !")
    pub = "-" if row["published_keras_ops_ms"] is None else f"{row['published_keras_ops_ms']:.2f} ms (H100)"
    setting = row["setting"]
    if row.get("reachable_leaves") is not None:
        setting += f" ({row['reachable_leaves']:.1f} lv)"
    return (f"{setting:<38} {row['batch']:>5} {row['path']:<9} {row['kernels_ms']:>10.3f} "
            f"{row['kernels_pipelined_ms']:>7.3f} {row['reference_ms']:>12.3f} {row['reference_pipelined_ms']:>7.3f} "
            f"{row['reference_unchecked_ms']:>9.3f} {row['ratio']:>6.1f}x {row['ratio_pipelined']:>5.1f}x "
            f"{row['ratio_unchecked']:>6.1f}x {'yes' if row['bitwise_deterministic'] else 'NO':>7} "
            f"{diff:>12}  {goal:<24} {pub:>19}")


def fixed_overhead(reps, rounds):
    """(synchronized, pipelined) seconds per call of a jitted call that does
    nothing (``x + 1`` on one float32 number on the device)."""
    import jax
    import jax.numpy as jnp

    fn = jax.jit(lambda x: x + 1)
    sets = [(jnp.full((1,), float(i), jnp.float32),) for i in range(INPUT_SETS)]
    jax.block_until_ready([fn(*args) for args in sets])
    synchronized = timed_calls({"empty": fn}, sets, (), reps)["empty"]
    return synchronized, pipelined(fn, sets, (), rounds)


def main(argv=None):
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes and 2 repetitions, on any device (checks the script, times nothing)")
    parser.add_argument("--only", default=None,
                        help="comma-separated families to run (hinge, routing, tel, pruned, pruned_em, lai)")
    parser.add_argument("--reps", type=int, default=None,
                        help="timed calls per path (default 200, --quick 50, --smoke 2)")
    args = parser.parse_args(argv)

    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit(f"gpu_speed.py measures the JAX backend; KERAS_BACKEND is {keras.backend.backend()!r}")
    from keras_trees import ops as tree_ops

    reps = args.reps or (2 if args.smoke else 50 if args.quick else 200)
    warmup = 1 if args.smoke else 3
    device = jax.devices()[0]
    available = {family: kernels_available(family)
                 for family in ("hinge", "hard_routing", "soft_tree", "pruned_routing", "loss_augmented")}
    summary = tree_ops.execution_report()["summary"]
    print(f"device: {device.device_kind} ({device.platform}, {device}); jax {jax.__version__}, "
          f"keras {keras.__version__}", flush=True)
    print(f"{summary}")
    print("custom_ops_available: " + ", ".join(f"{k}={v}" for k, v in available.items()))
    print(f"{'smoke run (tiny shapes)' if args.smoke else 'full shapes'}, float32; times: median of {reps} "
          f"calls, each waited for, rotating among {INPUT_SETS} input sets, the paths alternating; "
          f"{warmup} warm-up round(s)\n")
    empty_sync, empty_piped = fixed_overhead(reps, 1 if args.smoke else 3)
    print(f"an empty jitted call: {1e3 * empty_sync:.3f} ms synchronized, {1e3 * empty_piped:.3f} ms pipelined\n")
    print(HEADER, flush=True)
    rng = np.random.default_rng(0)
    rows = []
    only = {f.strip() for f in args.only.split(",")} if args.only else None
    families = {s["family"] for s in settings(args.smoke)}
    if only is not None and not only <= families:
        raise SystemExit(f"--only must name families among {', '.join(sorted(families))}; got {args.only!r}")
    for s in settings(args.smoke):
        if only is not None and s["family"] not in only:
            continue
        row = bench(s, reps, warmup, args.smoke, rng)
        rows.append(row)
        print(format_row(row), flush=True)
        if row.get("error_vs_float64"):
            e = row["error_vs_float64"]
            print(f"  {row['setting']}: against float64, kernels {e['kernels']:.1e}, keras.ops {e['keras_ops']:.1e}",
                  flush=True)

    print("\nkernels ms / keras.ops ms: median per synchronized call on this device; piped: per call of 50 back to"
          " back;\nunchecked: the keras.ops path without its runtime checks (synchronized); ratio = keras.ops /"
          " kernels, each way;"
          "\nbitwise: the kernels' outputs and gradients bit-identical on a second run of the same inputs;"
          "\nmax rel diff: kernels vs keras.ops, largest difference over each output's largest magnitude"
          f" (must be <= {AGREE_RTOL:g}; * beside it: more, so both paths were judged against float64,"
          " and the kernels may be off by at most max(1e-4, the keras.ops path's own error));"
          "\n(N lv) on the TEL rows: mean reachable leaves per (sample, tree) (mean_reachable_leaves), of 2**depth.")
    fewer = [f"{r['setting']} (batch {r['batch']}): {r['reps']}" for r in rows if r["reps"] < reps]
    if fewer:
        print(f"fewer timed calls (a row's timing kept to about {ROW_BUDGET_S:g} s): " + "; ".join(fewer))
    pub = PUBLISHED_PYTORCH_CUDA_HINGE_MS
    print("published (shared/benchmarks.md, one H100): keras.ops path 0.40 / 1.34 ms hinge forest (batch 256 / 4096),"
          " 0.49 / 1.12 ms hard routing depth 10 / 12;\n  public PyTorch CUDA hinge-forest extension "
          f"{pub['atomics'][256]:.2f} / {pub['atomics'][4096]:.2f} ms with atomics, "
          f"{pub['deterministic'][256]:.1f} / {pub['deterministic'][4096]:.1f} ms deterministic.")
    off_path = [r["setting"] for r in rows if r["path"] != "kernels"]
    if off_path:
        print(f"NOTE: the kernel dispatch fell back to the keras.ops path for: {', '.join(sorted(set(off_path)))}")
    _data.write_json(args.json, {
        "benchmark": "gpu_speed", "smoke": args.smoke, "quick": args.quick, "reps": reps,
        "device_kind": device.device_kind, "platform": device.platform, "device": str(device),
        "jax_version": jax.__version__, "keras_version": keras.__version__,
        "execution_summary": summary, "custom_ops_available": available,
        "input_sets": INPUT_SETS, "pipeline_calls": PIPELINE_CALLS,
        "empty_call_ms": 1e3 * empty_sync, "empty_call_pipelined_ms": 1e3 * empty_piped, "rows": rows,
        "published_keras_ops_ms_h100": {"hinge_forest_256": 0.40, "hinge_forest_4096": 1.34,
                                        "hard_routing_depth10_1024": 0.49, "hard_routing_depth12_1024": 1.12},
        "published_pytorch_cuda_hinge_ms_h100": PUBLISHED_PYTORCH_CUDA_HINGE_MS,
    })
    bad = [r["setting"] + f" (batch {r['batch']})" for r in rows if not r["agrees"]]
    if bad:
        print(f"FAILED: the kernels disagree with the keras.ops path: {'; '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
