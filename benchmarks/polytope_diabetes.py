"""Convex polytope regression tree on scikit-learn's diabetes data beside CART (RMSE).

Variance-reduction objective (Eq. 15-16) for each greedy stump, thresholds by
variance reduction, depth chosen on validation data (for CART too: the depth
in 1..max-depth with the lowest validation RMSE). Protocol splits of
benchmarks/_data.py (80/20, 20% of train for validation, seeds 0, 1, 2).

    python benchmarks/polytope_diabetes.py --quick          # seed 0
    python benchmarks/polytope_diabetes.py --json out.json  # seeds 0, 1, 2
    python benchmarks/polytope_diabetes.py --smoke          # CI: depth 2, 2 experts, 1 epoch per level
"""

import time

import numpy as np

import _data


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a).ravel() - np.asarray(b).ravel()) ** 2)))


def run_cpt(split, k, depth, epochs, lr, seed):
    import keras

    from keras_trees.layers import ConvexPolytopeTree

    keras.utils.set_random_seed(seed)
    tree = ConvexPolytopeTree(max_depth=depth, num_experts=k, units=1, seed=seed)
    start = time.perf_counter()
    tree.fit_greedy(split.x_train, split.y_train, validation_data=(split.x_val, split.y_val), epochs=epochs,
                    batch_size=128, learning_rate=lr, min_samples_split=20, min_samples_leaf=5)
    seconds = time.perf_counter() - start
    return {"rmse": rmse(tree(split.x_test, training=False), split.y_test), "leaves": tree.num_leaves(),
            "depth": tree.depth(), "train_seconds": seconds}


def run_cart(split, max_depth, seed):
    from sklearn.tree import DecisionTreeRegressor

    best = None
    for d in range(1, max_depth + 1):
        cart = DecisionTreeRegressor(max_depth=d, min_samples_leaf=5, random_state=seed).fit(split.x_train, split.y_train)
        val = rmse(cart.predict(split.x_val), split.y_val)
        if best is None or val < best[0]:
            best = (val, cart)
    cart = best[1]
    return {"rmse": rmse(cart.predict(split.x_test), split.y_test), "leaves": int(cart.get_n_leaves()),
            "depth": int(cart.get_depth())}


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, default=None, help="K experts per node (default 5; --smoke 2)")
    parser.add_argument("--depth", type=int, default=None, help="maximum depth (default 4; --smoke 2)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per level (default 40; --smoke 1)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    args = parser.parse_args()
    seeds = _data.run_seeds(args)
    args.experts = args.experts or (2 if args.smoke else 5)
    args.depth = args.depth or (2 if args.smoke else 4)
    args.epochs = args.epochs or (1 if args.smoke else 40)
    results = {"cpt": [], "cpt_k1": [], "cart": []}
    for seed, split in _data.splits("diabetes", seeds, regression=True):
        results["cpt"].append(run_cpt(split, args.experts, args.depth, args.epochs, args.lr, seed))
        results["cpt_k1"].append(run_cpt(split, 1, args.depth, args.epochs, args.lr, seed))
        results["cart"].append(run_cart(split, 8, seed))
        for name, rows in results.items():
            r = rows[-1]
            print(f"seed {seed} {name:7s} RMSE {r['rmse']:.2f} leaves {r['leaves']:3d} depth {r['depth']:2d}", flush=True)
    summary = {}
    for name, rows in results.items():
        m, s = _data.mean_std([r["rmse"] for r in rows])
        summary[name] = {"rmse_mean": m, "rmse_std": s, "leaves_mean": float(np.mean([r["leaves"] for r in rows]))}
        print(f"{name:7s} RMSE {m:.2f} +- {s:.2f}  leaves {summary[name]['leaves_mean']:.1f}")
    _data.write_json(args.json, {"benchmark": "polytope_diabetes", "experts": args.experts, "depth": args.depth,
                                 "epochs": args.epochs, "seeds": seeds, "results": results, "summary": summary})


if __name__ == "__main__":
    main()
