"""EM E-step of the end-to-end letter forest: the fused kernel against the two walks it replaced.

The E-step of ``EMLeafUpdate`` (Hehn et al. 2019, Eq. 10) needs each sample's
likelihood ``p(y|x)`` over the kept leaves before it can add the sample's
responsibilities to the leaf counts. ``pruned_em_statistics`` walks every
(sample, tree) once and keeps the sample's leaves in between; before it, the
E-step ran ``pruned_route`` (for ``p(y|x)``) and then ``pruned_leaf_statistics``
(for the counts), two walks. Both run here on the same grown forest (the
forest of ``end_to_end_finetune_speed.py``: 70 trees of depth <= 10 at
steepness 5.5, loaded from ``--grown`` or grown with one epoch per level),
over all 16,000 training rows in batches of 4096 as ``EMLeafUpdate`` does,
alternating, ``--repeats`` times each. Printed: seconds (wall and CPU of all
threads) per E-step, the ratio, and the largest difference between the
counts of the two.

    python benchmarks/em_estep_speed.py [--grown PATH] [--repeats 3] [--smoke] [--json PATH]

``--smoke`` (CI): 2 trees of depth <= 3 grown on 600 letter rows, one repeat.
"""

import os
import tempfile
import time

import _data
import numpy as np
from _speed import cpu_seconds


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--grown", metavar="PATH", help="grown forest (.keras): loaded if it exists, else grown there")
    parser.add_argument("--repeats", type=int, default=None, help="alternating repeats (default 3; --smoke 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import keras
    from keras import ops

    import end_to_end_finetune_speed as finetune
    from keras_trees.layers._end_to_end import find_layers
    from keras_trees.ops import pruned_routing as pr

    args.repeats = args.repeats or (1 if args.smoke else 3)
    split = next(_data.splits("letter", [args.seed], rows=_data.smoke_rows(args)))[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = args.grown or os.path.join(tmp, "grown.keras")
        if not os.path.exists(path):
            args.trees, args.depth = (2, 3) if args.smoke else (70, 10)
            args.growth_epochs, args.schedule_epochs = 1, 45
            finetune.grow(split, args, path)
        model = keras.models.load_model(path)
    forest = find_layers(model)[0]
    epochs = ops.convert_to_numpy(forest.node_epochs)
    forest.gamma.assign((1.0 + 0.1 * epochs).astype("float32"))  # SteepnessAnnealing(0.1) at finetune start
    x, y = split.x_fit.astype("float32"), split.y_fit.astype("int32")
    kernel, bias, steepness = forest.effective_kernel(), forest.split_bias, forest.gamma
    is_split, leaves = forest.is_split(), ops.cast(forest.leaf_values, "float32")
    threshold = forest.prune_threshold
    trees, classes = forest.num_trees, forest.num_classes
    batches = [slice(i, i + 4096) for i in range(0, len(x), 4096)]

    def fused():
        return sum(np.asarray(pr.pruned_em_statistics(x[s], kernel, bias, steepness, is_split, leaves, y[s],
                                                      prune_threshold=threshold), np.float64) for s in batches)

    def two_walks():
        total = 0.0
        for s in batches:
            onehot = np.eye(classes, dtype="float32")[y[s]]
            out = np.asarray(pr.pruned_route(x[s], kernel, bias, steepness, is_split, leaves, threshold))
            p_y = (out.sum(1) * onehot).sum(1) / trees
            r = onehot / (trees * np.maximum(p_y, 1e-30))[:, None]
            weights = np.broadcast_to(r[:, None], out.shape)
            stats = pr.pruned_leaf_statistics(x[s], kernel, bias, steepness, is_split, weights, threshold)
            total = total + np.asarray(stats, np.float64) * np.asarray(leaves, np.float64)
        return total

    times = {"fused": [], "two walks": []}
    results = {}
    for name, fn in (("fused", fused), ("two walks", two_walks)):
        results[name] = fn()  # warm up (tracing, thread pools)
    for _ in range(args.repeats):
        for name, fn in (("fused", fused), ("two walks", two_walks)):
            start, cpu = time.perf_counter(), cpu_seconds()
            fn()
            times[name].append((time.perf_counter() - start, cpu_seconds() - cpu))
    print(f"letter forest: {trees} trees, depth <= {forest.max_depth}, prune_threshold {threshold:g}, "
          f"{len(x)} rows in batches of 4096, {os.cpu_count()} CPUs, {args.repeats} alternating repeats")
    wall = {k: float(np.mean([t[0] for t in v])) for k, v in times.items()}
    cpu = {k: float(np.mean([t[1] for t in v])) for k, v in times.items()}
    for name in times:
        print(f"{name:>10}: {wall[name]:.2f} s wall, {cpu[name]:.2f} s CPU per E-step")
    print(f"two walks / fused: {wall['two walks'] / wall['fused']:.2f}x wall, {cpu['two walks'] / cpu['fused']:.2f}x CPU; "
          f"largest count difference {np.max(np.abs(results['fused'] - results['two walks'])):.2e} "
          f"(counts sum to {results['fused'].sum():.1f})")
    difference = float(np.max(np.abs(results["fused"] - results["two walks"])))
    _data.write_json(args.json, {"benchmark": "em_estep_speed", "trees": trees, "rows": len(x),
                                 "repeats": args.repeats, "wall": wall, "cpu": cpu,
                                 "largest_count_difference": difference})


if __name__ == "__main__":
    main()
