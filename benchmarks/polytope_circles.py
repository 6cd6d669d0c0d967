"""Convex polytope tree on the two-circles problem (Armandpour & Zhou 2021, Section 4.1, Figure 1).

Paper: CPT reaches AUC 0.962 with 3 leaves at depth 2 (K = 50); CART needs
depth 10 (11 leaves) for AUC 0.897. Here, on the protocol splits of the
2,000-point problem (benchmarks/_data.py two_circles), a depth-2 CPT grown
greedily beside CART of depths 2, 6 and 10.

    python benchmarks/polytope_circles.py --quick           # seed 0
    python benchmarks/polytope_circles.py --json out.json   # seeds 0, 1, 2
    python benchmarks/polytope_circles.py --smoke           # CI: 600 points, 2 experts, 1 epoch per level
"""

import time

import numpy as np

import _data


def run_cpt(split, k, epochs, lr, min_gain, seed):
    import keras

    from keras_trees.layers import ConvexPolytopeTree

    keras.utils.set_random_seed(seed)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=k, num_classes=2, seed=seed)
    start = time.perf_counter()
    tree.fit_greedy(split.x_train, split.y_train, epochs=epochs, batch_size=256, learning_rate=lr,
                    min_gain=min_gain)
    seconds = time.perf_counter() - start
    scores = np.asarray(tree(split.x_test, training=False))
    return {"auc": _data.auc(split.y_test, scores, 2), "accuracy": float((scores.argmax(1) == split.y_test).mean()),
            "leaves": tree.num_leaves(), "depth": tree.depth(), "train_seconds": seconds,
            "active_facets": [len(p["active"]) for p in tree.polytopes()]}


def run_cart(split, depth, seed):
    from sklearn.tree import DecisionTreeClassifier

    cart = DecisionTreeClassifier(max_depth=depth, random_state=seed).fit(split.x_train, split.y_train)
    return {"auc": _data.auc(split.y_test, cart.predict_proba(split.x_test), 2), "leaves": int(cart.get_n_leaves()),
            "depth": int(cart.get_depth())}


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, default=None, help="K experts per node (default 20; --smoke 2)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per level (default 60; --smoke 1)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--min-gain", type=float, default=0.01, help="smallest information gain (nats) of a split")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    args = parser.parse_args()
    seeds = _data.run_seeds(args)
    args.experts = args.experts or (2 if args.smoke else 20)
    args.epochs = args.epochs or (1 if args.smoke else 60)
    results = {"cpt": [], "cart_d2": [], "cart_d6": [], "cart_d10": []}
    for seed, split in _data.splits("two_circles", seeds, rows=_data.smoke_rows(args)):
        results["cpt"].append(run_cpt(split, args.experts, args.epochs, args.lr, args.min_gain, seed))
        for d in (2, 6, 10):
            results[f"cart_d{d}"].append(run_cart(split, d, seed))
        for name, rows in results.items():
            r = rows[-1]
            print(f"seed {seed} {name:8s} AUC {r['auc']:.4f} leaves {r['leaves']:3d} depth {r['depth']:2d}"
                  + (f" facets {r['active_facets']} time {r['train_seconds']:.1f}s" if name == "cpt" else ""), flush=True)
    summary = {}
    for name, rows in results.items():
        auc = _data.mean_std([r["auc"] for r in rows])
        summary[name] = {"auc_mean": auc[0], "auc_std": auc[1], "leaves_mean": float(np.mean([r["leaves"] for r in rows]))}
        print(f"{name:8s} AUC {auc[0]:.4f} +- {auc[1]:.4f}  leaves {summary[name]['leaves_mean']:.1f}")
    print("target (paper): CPT AUC >= 0.96 with depth 2 and 3 leaves; CART 0.5 / 0.708 / 0.897 at depths 2 / 6 / 10")
    _data.write_json(args.json, {"benchmark": "polytope_circles", "experts": args.experts, "epochs": args.epochs,
                                 "seeds": seeds, "results": results, "summary": summary})


if __name__ == "__main__":
    main()
