"""Hinge forest custom op vs a dense keras.ops evaluation of every node.

Setting: batch 256, 100 input features, 100 trees (and 100 ferns),
26 outputs, depths 2 to 10, float32. Both implementations run compiled
(``tf.function`` / ``jax.jit``) on the same inputs, measured side by side in
one process with their repetitions interleaved, so load from other processes
hits both alike (``--backend tensorflow jax`` runs both backends, each in its
own process, and ends with their ratios side by side):

* inference: per-tree outputs summed over trees into 26 logits;
* training step: the same forward pass, softmax cross-entropy against random
  labels, and the gradients with respect to the inputs, the thresholds and the
  leaf weights (the op's sparse backward pass of Eq. 11-12 against autodiff
  through the dense min/ReLU form of Eq. 10).

The dense implementation (``keras_trees.ops.hinge_forest_dense``) computes every
vertex's margin and every leaf's membership ``min ReLU(+-(x_f - t))`` along its
path, then contracts with all leaf weights: ``O(2**depth * units)`` per sample
and tree, against ``O(depth + units)`` for the op. Each depth first checks that
both give the same outputs and gradients.

A last table times ``model.train_on_batch`` of a complete Keras model (Dense(100)
feature layer, HingeBatchNormalization, 100 depth-10 trees, Adam) for context:
it adds the feature layer and Adam's dense update of all 2.7M leaf weights.

    python benchmarks/hinge_speed.py --quick [--backend tensorflow jax]
    python benchmarks/hinge_speed.py --json results/hinge_speed.json
    python benchmarks/hinge_speed.py --smoke   # CI: depth 2, one repetition, the Keras step at depth 3

Targets at depth 10: the training step >= 50x faster than dense on JAX.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402  (also puts the repository root on sys.path)
import _speed  # noqa: E402

import numpy as np  # noqa: E402

BATCH, FEATURES, TREES, UNITS = 256, 100, 100, 26
DEPTHS = tuple(range(2, 11))
# Quoted for the public PyTorch extension on a 2-core machine; not measured by this script.
PYTORCH_REFERENCE_MS = {"train": 150.0, "inference": 44.0}


def repetitions(depth, quick, smoke=False):
    """(dense repetitions, op repetitions per dense one)."""
    if smoke:
        return 1, 1
    dense = 10 if depth <= 6 else 5 if depth <= 8 else 3
    if not quick:
        dense *= 3
    return dense, 3


def time_call(backend, fn, *args):
    start = time.perf_counter()
    backend.block(fn(*args))
    return time.perf_counter() - start


def bench_depth(backend, kind, depth, quick, rng, smoke=False):
    import keras

    from keras_trees import ops as tree_ops

    fern = kind == "fern"
    vertices = depth if fern else 2**depth - 1
    x = backend.constant(rng.normal(size=(BATCH, FEATURES)).astype("float32"))
    labels = backend.constant(rng.integers(0, UNITS, size=BATCH).astype("int32"))
    t = backend.constant(rng.uniform(-3, 3, size=(TREES, vertices)).astype("float32"))
    f = backend.constant(rng.integers(0, FEATURES, size=(TREES, vertices)).astype("int32"))
    w = backend.constant(rng.normal(0, 0.01, size=(TREES, 2**depth, UNITS)).astype("float32"))

    def make(forest):
        def logits(x, t, w):
            return keras.ops.sum(forest(x, t, f, w, fern=fern), axis=1)

        def loss(x, t, w, labels):
            return keras.ops.mean(
                keras.losses.sparse_categorical_crossentropy(labels, logits(x, t, w), from_logits=True))

        grad = backend.value_and_grad(loss, argnums=[0, 1, 2])
        return backend.jit(logits), lambda x, labels: grad(x, t, w, labels)

    impls = {"op": make(tree_ops.hinge_forest), "dense": make(tree_ops.hinge_forest_dense)}
    infer_of = {name: (lambda x, fn=fns[0]: fn(x, t, w)) for name, fns in impls.items()}
    # Same function, same numbers (also warms up and traces both).
    out = {name: (backend.numpy(infer_of[name](x)), backend.numpy(fns[1](x, labels)[1]))
           for name, fns in impls.items()}
    np.testing.assert_allclose(out["op"][0], out["dense"][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(out["op"][1], out["dense"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

    dense_reps, op_per_dense = repetitions(depth, quick, smoke)
    times = {(impl, mode): [] for impl in impls for mode in ("train", "inference")}
    calls = {(name, "train"): impls[name][1] for name in impls}
    calls.update({(name, "inference"): infer_of[name] for name in impls})
    for _ in range(dense_reps):
        for mode, args in (("train", (x, labels)), ("inference", (x,))):
            times[("dense", mode)].append(time_call(backend, calls[("dense", mode)], *args))
            for _ in range(op_per_dense):
                times[("op", mode)].append(time_call(backend, calls[("op", mode)], *args))
    row = {"kind": kind, "depth": depth}
    for (impl, mode), values in times.items():
        row[f"{mode}_{impl}_ms"] = 1000 * float(np.median(values))
    for mode in ("train", "inference"):
        row[f"{mode}_ratio"] = row[f"{mode}_dense_ms"] / row[f"{mode}_op_ms"]
    return row


def bench_keras_step(quick, rng, depth=10, smoke=False):
    """train_on_batch of Dense(100) -> HingeBatchNormalization -> HingeForest(100, depth, 26)."""
    import keras

    from keras_trees import ops as tree_ops
    from keras_trees.layers import HingeBatchNormalization, HingeForest

    class DenseEq10Forest(HingeForest):
        """HingeForest evaluated with the dense Eq. 10 (every vertex and leaf)."""

        def call(self, inputs):
            out = tree_ops.hinge_forest_dense(
                inputs, self.thresholds, self.feature_indices, self.leaf_weights
            )
            return keras.ops.sum(out, axis=1)

    x = rng.normal(size=(BATCH, 16)).astype("float32")
    y = rng.integers(0, UNITS, size=BATCH).astype("int32")
    rows = []
    for impl, forest in (("op", HingeForest), ("dense", DenseEq10Forest)):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([
            keras.Input((16,)),
            keras.layers.Dense(FEATURES, use_bias=False),
            HingeBatchNormalization(),
            forest(TREES, depth, UNITS, reduction="sum", seed=0),
        ])
        model.compile(keras.optimizers.Adam(0.005),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        reps = 1 if smoke else (20 if impl == "op" else 3) * (1 if quick else 3)
        model.train_on_batch(x, y)
        values = []
        for _ in range(reps):
            start = time.perf_counter()
            model.train_on_batch(x, y)  # returns the loss as a Python float: synchronized
            values.append(time.perf_counter() - start)
        rows.append({"impl": impl, "train_on_batch_ms": 1000 * float(np.median(values))})
    return rows


def summarize(results):
    _speed.side_by_side(
        results, key=lambda r: (r["kind"], r["depth"]),
        label=lambda k: f"{'kind':>4} {'depth':>5}" if k is None else f"{k[0]:>4} {k[1]:>5}",
        header=lambda b: f"{b + ' train op':>19} {'ratio':>6} {'infer op':>8} {'ratio':>6}",
        cell=lambda r: f"{r['train_op_ms']:>16.2f} ms {r['train_ratio']:>5.1f}x {r['inference_op_ms']:>8.2f}"
                       f" {r['inference_ratio']:>5.1f}x")


def main(argv=None):
    parser = _data.arg_parser(__doc__.splitlines()[0])
    _speed.add_backend_argument(parser)
    parser.add_argument("--kinds", nargs="+", choices=["tree", "fern"], default=["tree", "fern"])
    args = parser.parse_args(argv)
    if _speed.run_per_backend(args, summarize):
        return
    backend = _speed.Backend()
    run = "smoke" if args.smoke else "quick" if args.quick else "full"
    depths, keras_depth = ((2,), 3) if args.smoke else (DEPTHS, 10)
    print(f"batch {BATCH}, {FEATURES} features, {TREES} trees, {UNITS} outputs, float32; "
          f"{backend.describe()}; {run} run", flush=True)
    rng = np.random.default_rng(0)
    rows = []
    for kind in args.kinds:
        print(f"\n{kind}s: milliseconds per call (median), dense / op ratio")
        print(f"{'depth':>5s} | {'train op':>9s} {'dense':>9s} {'ratio':>7s} | "
              f"{'infer op':>9s} {'dense':>9s} {'ratio':>7s}")
        for depth in depths:
            row = bench_depth(backend, kind, depth, args.quick, rng, args.smoke)
            rows.append(row)
            print(f"{depth:5d} | {row['train_op_ms']:9.2f} {row['train_dense_ms']:9.1f} "
                  f"{row['train_ratio']:6.1f}x | {row['inference_op_ms']:9.2f} "
                  f"{row['inference_dense_ms']:9.1f} {row['inference_ratio']:6.1f}x", flush=True)
    keras_rows = bench_keras_step(args.quick, rng, keras_depth, args.smoke)
    print(f"\nfull Keras train_on_batch at depth {keras_depth} (Dense(100) + HingeBatchNormalization + "
          "100 trees, Adam):")
    for row in keras_rows:
        print(f"  {row['impl']:5s}: {row['train_on_batch_ms']:8.1f} ms")
    print(f"  ratio dense / op: {keras_rows[1]['train_on_batch_ms'] / keras_rows[0]['train_on_batch_ms']:.1f}x")
    deepest = [r for r in rows if r["depth"] == 10 and r["kind"] == "tree"]
    if deepest:
        r = deepest[0]
        print(f"\ndepth 10, 100 trees: training step {r['train_op_ms']:.2f} ms "
              f"({r['train_ratio']:.0f}x faster than dense; quoted, not measured here: "
              f"{PYTORCH_REFERENCE_MS['train']:.0f} ms for the PyTorch extension), inference "
              f"{r['inference_op_ms']:.2f} ms ({r['inference_ratio']:.0f}x; PyTorch extension, quoted: "
              f"{PYTORCH_REFERENCE_MS['inference']:.0f} ms)")
    _data.write_json(args.json, {
        "benchmark": "hinge_speed", "backend": backend.name, "quick": args.quick, "smoke": args.smoke,
        "batch": BATCH, "features": FEATURES, "trees": TREES, "units": UNITS, "rows": rows,
        f"keras_train_on_batch_depth{keras_depth}": keras_rows,
        "pytorch_reference_ms_from_issue": PYTORCH_REFERENCE_MS,
    })


if __name__ == "__main__":
    main()
