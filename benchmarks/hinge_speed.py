"""Hinge forest custom op vs a dense keras.ops evaluation of every node.

Setting of the issue: batch 256, 100 input features, 100 trees (and 100 ferns),
26 outputs, depths 2 to 10, float32. Both implementations run inside
``tf.function`` on the same inputs, measured side by side in one process with
their repetitions interleaved, so load from other processes hits both alike:

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

    python benchmarks/hinge_speed.py --quick
    python benchmarks/hinge_speed.py --json results/hinge_speed.json
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402  (also puts the repository root on sys.path)

import numpy as np  # noqa: E402

BATCH, FEATURES, TREES, UNITS = 256, 100, 100, 26
DEPTHS = tuple(range(2, 11))
# From the issue, measured on this 2-core machine; not re-measured here.
PYTORCH_REFERENCE_MS = {"train": 150.0, "inference": 44.0}


def repetitions(depth, quick):
    """(dense repetitions, op repetitions per dense one)."""
    dense = 10 if depth <= 6 else 5 if depth <= 8 else 3
    if not quick:
        dense *= 3
    return dense, 3


def time_call(fn, *args):
    start = time.perf_counter()
    fn(*args)  # tf.function calls on CPU return after the computation
    return time.perf_counter() - start


def bench_depth(kind, depth, quick, rng):
    import tensorflow as tf

    from keras_trees import ops as tree_ops

    fern = kind == "fern"
    vertices = depth if fern else 2**depth - 1
    x = tf.constant(rng.normal(size=(BATCH, FEATURES)).astype("float32"))
    labels = tf.constant(rng.integers(0, UNITS, size=BATCH).astype("int32"))
    t = tf.constant(rng.uniform(-3, 3, size=(TREES, vertices)).astype("float32"))
    f = tf.constant(rng.integers(0, FEATURES, size=(TREES, vertices)).astype("int32"))
    w = tf.constant(rng.normal(0, 0.01, size=(TREES, 2**depth, UNITS)).astype("float32"))

    def make(forest):
        @tf.function
        def infer(x):
            return tf.reduce_sum(forest(x, t, f, w, fern=fern), axis=1)

        @tf.function
        def train(x, labels):
            with tf.GradientTape() as tape:
                tape.watch([x, t, w])
                logits = tf.reduce_sum(forest(x, t, f, w, fern=fern), axis=1)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
                )
            return loss, tape.gradient(loss, [x, t, w])

        return infer, train

    impls = {"op": make(tree_ops.hinge_forest), "dense": make(tree_ops.hinge_forest_dense)}
    # Same function, same numbers (also warms up and traces both).
    out = {name: (fns[0](x).numpy(), [g.numpy() for g in fns[1](x, labels)[1]])
           for name, fns in impls.items()}
    np.testing.assert_allclose(out["op"][0], out["dense"][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(out["op"][1], out["dense"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

    dense_reps, op_per_dense = repetitions(depth, quick)
    times = {(impl, mode): [] for impl in impls for mode in ("train", "inference")}
    for _ in range(dense_reps):
        for mode, idx, args in (("train", 1, (x, labels)), ("inference", 0, (x,))):
            times[("dense", mode)].append(time_call(impls["dense"][idx], *args))
            for _ in range(op_per_dense):
                times[("op", mode)].append(time_call(impls["op"][idx], *args))
    row = {"kind": kind, "depth": depth}
    for (impl, mode), values in times.items():
        row[f"{mode}_{impl}_ms"] = 1000 * float(np.median(values))
    for mode in ("train", "inference"):
        row[f"{mode}_ratio"] = row[f"{mode}_dense_ms"] / row[f"{mode}_op_ms"]
    return row


def bench_keras_step(quick, rng):
    """train_on_batch of Dense(100) -> HingeBatchNormalization -> HingeForest(100, 10, 26)."""
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
            forest(TREES, 10, UNITS, reduction="sum", seed=0),
        ])
        model.compile(keras.optimizers.Adam(0.005),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        reps = (20 if impl == "op" else 3) * (1 if quick else 3)
        model.train_on_batch(x, y)
        values = [time_call(model.train_on_batch, x, y) for _ in range(reps)]
        rows.append({"impl": impl, "train_on_batch_ms": 1000 * float(np.median(values))})
    return rows


def main(argv=None):
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=["tree", "fern"], default=["tree", "fern"])
    args = parser.parse_args(argv)

    import tensorflow as tf

    import keras_trees  # noqa: F401
    from keras_trees import ops as tree_ops

    if not tree_ops.custom_ops_available():
        raise SystemExit(f"custom ops unavailable: {tree_ops.load_error()}")
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
    print(f"batch {BATCH}, {FEATURES} features, {TREES} trees, {UNITS} outputs, float32; "
          f"{threads} intra-op threads; {'quick' if args.quick else 'full'} run", flush=True)
    rng = np.random.default_rng(0)
    rows = []
    for kind in args.kinds:
        print(f"\n{kind}s: milliseconds per call (median), dense / op ratio")
        print(f"{'depth':>5s} | {'train op':>9s} {'dense':>9s} {'ratio':>7s} | "
              f"{'infer op':>9s} {'dense':>9s} {'ratio':>7s}")
        for depth in DEPTHS:
            row = bench_depth(kind, depth, args.quick, rng)
            rows.append(row)
            print(f"{depth:5d} | {row['train_op_ms']:9.2f} {row['train_dense_ms']:9.1f} "
                  f"{row['train_ratio']:6.1f}x | {row['inference_op_ms']:9.2f} "
                  f"{row['inference_dense_ms']:9.1f} {row['inference_ratio']:6.1f}x", flush=True)
    keras_rows = bench_keras_step(args.quick, rng)
    print("\nfull Keras train_on_batch at depth 10 (Dense(100) + HingeBatchNormalization + "
          "100 trees, Adam):")
    for row in keras_rows:
        print(f"  {row['impl']:5s}: {row['train_on_batch_ms']:8.1f} ms")
    print(f"  ratio dense / op: {keras_rows[1]['train_on_batch_ms'] / keras_rows[0]['train_on_batch_ms']:.1f}x")
    deepest = [r for r in rows if r["depth"] == 10 and r["kind"] == "tree"]
    if deepest:
        r = deepest[0]
        print(f"\ndepth 10, 100 trees: training step {r['train_op_ms']:.2f} ms "
              f"({r['train_ratio']:.0f}x faster than dense; the issue quotes "
              f"{PYTORCH_REFERENCE_MS['train']:.0f} ms for the PyTorch extension), inference "
              f"{r['inference_op_ms']:.2f} ms ({r['inference_ratio']:.0f}x; PyTorch "
              f"{PYTORCH_REFERENCE_MS['inference']:.0f} ms)")
    _data.write_json(args.json, {
        "benchmark": "hinge_speed", "quick": args.quick, "batch": BATCH, "features": FEATURES,
        "trees": TREES, "units": UNITS, "intra_op_threads": threads, "rows": rows,
        "keras_train_on_batch_depth10": keras_rows,
        "pytorch_reference_ms_from_issue": PYTORCH_REFERENCE_MS,
    })


if __name__ == "__main__":
    main()
