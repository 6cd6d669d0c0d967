"""Hard-routing speed: the compiled op (one path per sample and tree) vs dense evaluation.

A forest of 100 oblique trees over 64 inputs; for each depth, the same weights
are routed two ways, side by side in one run:

* ``op``: ``KerasTrees>HardRouting``, which evaluates only the <= depth splits
  on each sample's path,
* ``dense``: every split of every tree as one matrix product (BLAS), then the
  heap walk of ``keras_trees.ops.hard_route_reference`` (what a dense
  implementation such as a soft tree at inference has to do).

Both return identical leaves (checked). The target is op >= 30x faster at
depth 10, where the flop ratio is (2**10 - 1) / 10 ~ 100.

    python benchmarks/hard_routing_speed.py [--quick] [--json results/hard_routing_speed.json]
"""

import statistics
import time

import _data
import numpy as np
import tensorflow as tf

from keras_trees import ops as tree_ops

TREES, DIM = 100, 64


def timed(fn, repeats):
    """(median, best) seconds over ``repeats`` calls after a warm-up call. On a
    shared machine the best of N (timeit's convention) is the steadier figure."""
    fn()  # warm up (tracing)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    depths = [4, 6, 8, 10] if args.quick else [2, 4, 6, 8, 10, 12]
    repeats = 15 if args.quick else 40
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(args.batch, DIM)).astype("float32"))
    rows = []
    print(f"{TREES} trees, {DIM} inputs, batch {args.batch}, {tf.config.threading.get_intra_op_parallelism_threads() or 'all'} threads")
    print(f"times: median (best) of {repeats} calls")
    print(f"{'depth':>5} {'op ms':>15} {'dense ms':>17} {'speedup':>15} {'flop ratio':>10}")
    for depth in depths:
        n = 2**depth - 1
        w = tf.constant((rng.normal(size=(TREES, n, DIM)) / np.sqrt(DIM)).astype("float32"))
        b = tf.constant(rng.normal(scale=0.1, size=(TREES, n)).astype("float32"))
        is_split = tf.ones((TREES, n), tf.bool)
        op = tf.function(lambda: tree_ops.hard_route(x, w, b, is_split, with_path_values=False)[0])
        dense = tf.function(lambda: tree_ops.hard_route_reference(x, w, b, is_split)[0])
        np.testing.assert_array_equal(op().numpy(), dense().numpy())
        (t_op, b_op), (t_dense, b_dense) = timed(op, repeats), timed(dense, repeats)
        row = {"depth": depth, "op_ms": 1e3 * t_op, "dense_ms": 1e3 * t_dense, "speedup": t_dense / t_op,
               "op_best_ms": 1e3 * b_op, "dense_best_ms": 1e3 * b_dense, "speedup_best": b_dense / b_op,
               "flop_ratio": n / depth}
        rows.append(row)
        print(f"{depth:>5} {row['op_ms']:>6.2f} ({row['op_best_ms']:>6.2f}) {row['dense_ms']:>7.2f} ({row['dense_best_ms']:>7.2f})"
              f" {row['speedup']:>5.1f}x ({row['speedup_best']:>5.1f}x) {row['flop_ratio']:>10.1f}")
    _data.write_json(args.json, {"benchmark": "hard_routing_speed", "trees": TREES, "inputs": DIM,
                                 "batch": args.batch, "rows": rows})


if __name__ == "__main__":
    main()
