"""Exact vs fast loss-augmented inference time vs tree depth (Norouzi et al.
2015, Figure 4), measured side by side in one run as a ratio.

Both searches run in the compiled ``KerasTrees>LossAugmentedInference`` op on
the same random tree and data (letter-sized inputs: 16 features, 26 classes,
log loss): the exact search over all 2**d leaves (Eq. 10, O(2**d p)) and the
fast one over the Hamming ball of radius 1 (Eq. 13, O(d**2 p)). Also timed: the
hard-routing op (prediction, O(d p)) for scale.

    python benchmarks/non_greedy_speed.py [--quick | --smoke] [--json PATH]

``--smoke`` (CI): depth 4, batch 200, one call each.
"""

import numpy as np
from _data import arg_parser, write_json
from _speed import timed

from keras_trees.ops.hard_routing import hard_route
from keras_trees.ops import loss_augmented_inference


def best_time(fn, repeats):
    return timed(fn, repeats)[1]


def main():
    parser = arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+")
    parser.add_argument("--batch", type=int)
    args = parser.parse_args()
    depths = args.depths or ([4] if args.smoke else [4, 6, 8, 10, 12, 14] if args.quick else
                             [4, 6, 8, 10, 12, 14, 16, 18])
    batch = args.batch or (200 if args.smoke else 2000 if args.quick else 10000)
    p, k = 16, 26
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, p)).astype("float32")
    y = rng.integers(0, k, size=batch).astype("int32")
    rows = []
    print(f"batch {batch}, {p} features, {k} classes (log loss); seconds per call, best of repeats")
    print(f"{'depth':>5} {'exact_s':>10} {'fast_s':>10} {'route_s':>10} {'exact/fast':>11} {'agree':>7}")
    for d in depths:
        w = rng.normal(size=(2**d - 1, p)).astype("float32")
        b = (rng.normal(size=2**d - 1) * 0.3).astype("float32")
        theta = rng.normal(size=(2**d, k)).astype("float32")
        repeats = 1 if args.smoke or d > 12 else 3
        exact = best_time(lambda: loss_augmented_inference(x, w, b, theta, y, "log", False), repeats)
        fast = best_time(lambda: loss_augmented_inference(x, w, b, theta, y, "log", True), repeats)
        mask = np.ones((1, 2**d - 1), bool)
        route = best_time(lambda: hard_route(x, w[None], b[None], mask, with_path_values=False), repeats)
        g_e = np.asarray(loss_augmented_inference(x, w, b, theta, y, "log", False)[0])
        g_f = np.asarray(loss_augmented_inference(x, w, b, theta, y, "log", True)[0])
        agree = float(np.mean(g_e == g_f))
        rows.append(dict(depth=d, exact_s=exact, fast_s=fast, route_s=route, ratio=exact / fast, agree=agree))
        print(f"{d:>5} {exact:>10.4f} {fast:>10.4f} {route:>10.4f} {exact / fast:>11.1f} {agree:>7.3f}", flush=True)
    write_json(args.json, {"benchmark": "non_greedy_speed", "batch": batch, "features": p, "classes": k,
                           "rows": rows})


if __name__ == "__main__":
    main()
