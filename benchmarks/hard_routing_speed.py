"""Hard-routing speed: the compiled kernel (one path per sample and tree) vs dense evaluation.

A forest of 100 oblique trees over 64 inputs; for each depth, the same weights
are routed two ways, both compiled (``tf.function`` / ``jax.jit``), side by
side in one run:

* ``op``: the hard-routing kernel (TensorFlow custom op or JAX XLA FFI
  handler), which evaluates only the <= depth splits on each sample's path,
* ``dense``: every split of every tree as one matrix product (BLAS), then the
  heap walk of ``keras_trees.ops.hard_route_reference`` (what a dense
  implementation such as a soft tree at inference has to do).

Both return identical leaves (checked). Targets at depth 10, where the flop
ratio is (2**10 - 1) / 10 ~ 100: >= 30x on TensorFlow, >= 25x on JAX.

    python benchmarks/hard_routing_speed.py [--quick | --smoke] [--backend tensorflow jax] [--json PATH]

``--smoke`` (CI): depth 4, batch 128, 2 calls.
"""

import _data
import _speed
import numpy as np

TREES, DIM = 100, 64


def summarize(results):
    _speed.side_by_side(
        results, key=lambda r: (r["depth"],),
        label=lambda k: f"{'depth':>5}" if k is None else f"{k[0]:>5}",
        header=lambda b: f"{b + ' op ms':>17} {'speedup':>8}",
        cell=lambda r: f"{r['op_ms']:>17.2f} {r['speedup']:>7.1f}x")


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    _speed.add_backend_argument(parser)
    parser.add_argument("--batch", type=int, default=None, help="samples per call (default 1024; --smoke 128)")
    args = parser.parse_args()
    if _speed.run_per_backend(args, summarize):
        return
    from keras_trees import ops as tree_ops

    backend = _speed.Backend()
    depths = [4] if args.smoke else [4, 6, 8, 10] if args.quick else [2, 4, 6, 8, 10, 12]
    repeats = 2 if args.smoke else 15 if args.quick else 40
    args.batch = args.batch or (128 if args.smoke else 1024)
    rng = np.random.default_rng(0)
    x = backend.constant(rng.normal(size=(args.batch, DIM)).astype("float32"))
    rows = []
    print(f"{TREES} trees, {DIM} inputs, batch {args.batch}; {backend.describe()}")
    print(f"times: median (best) of {repeats} calls")
    print(f"{'depth':>5} {'op ms':>15} {'dense ms':>17} {'speedup':>15} {'flop ratio':>10}")
    for depth in depths:
        n = 2**depth - 1
        w = backend.constant((rng.normal(size=(TREES, n, DIM)) / np.sqrt(DIM)).astype("float32"))
        b = backend.constant(rng.normal(scale=0.1, size=(TREES, n)).astype("float32"))
        is_split = backend.constant(np.ones((TREES, n), bool))
        op = backend.jit(lambda x, w, b, m: tree_ops.hard_route(x, w, b, m, with_path_values=False)[0])
        dense = backend.jit(lambda x, w, b, m: tree_ops.hard_route_reference(x, w, b, m)[0])
        np.testing.assert_array_equal(backend.numpy(op(x, w, b, is_split)), backend.numpy(dense(x, w, b, is_split)))
        (t_op, b_op) = _speed.timed(lambda: op(x, w, b, is_split), repeats, backend.block)
        (t_dense, b_dense) = _speed.timed(lambda: dense(x, w, b, is_split), repeats, backend.block)
        row = {"depth": depth, "op_ms": 1e3 * t_op, "dense_ms": 1e3 * t_dense, "speedup": t_dense / t_op,
               "op_best_ms": 1e3 * b_op, "dense_best_ms": 1e3 * b_dense, "speedup_best": b_dense / b_op,
               "flop_ratio": n / depth}
        rows.append(row)
        print(f"{depth:>5} {row['op_ms']:>6.2f} ({row['op_best_ms']:>6.2f}) {row['dense_ms']:>7.2f} ({row['dense_best_ms']:>7.2f})"
              f" {row['speedup']:>5.1f}x ({row['speedup_best']:>5.1f}x) {row['flop_ratio']:>10.1f}", flush=True)
    _data.write_json(args.json, {"benchmark": "hard_routing_speed", "backend": backend.name, "trees": TREES,
                                 "inputs": DIM, "batch": args.batch, "rows": rows})


if __name__ == "__main__":
    main()
