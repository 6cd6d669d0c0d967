"""End-to-end forest on letter and the steepness ablation (Hehn et al. Table 1, Fig. 6).

EndToEndForest with 8 random features per split and depth <= 10, grown greedily
(GreedyLevelGrowth: ``E`` epochs per level, then 3E finetune epochs), steepness
1.0 + increment per epoch, Adam 1e-3, batch 1000. Prints test accuracy and split
evaluations per sample for each steepness increment (Table 1: 0, 0.01, 0.1).
Paper setting: 70 trees, E = 45, target 95.5% with <= 700 split evaluations.
The quick and default runs are reductions (fewer trees / epochs); the exact
setting is printed and written to the JSON.

    python benchmarks/end_to_end_forest.py [--quick | --smoke] [--trees 70 --epochs 45] [--json PATH]

``--smoke`` (CI): 2 trees of depth <= 3 on 600 letter rows, 1 epoch per level, increment 0.1 only.
"""

import time

import _data
import numpy as np


def run(split, trees, depth, epochs, increment, seed):
    start = time.time()
    model, forest, hist = _data.grow_end_to_end_forest(split, trees, depth, epochs, finetune_epochs=3 * epochs,
                                                       increment=increment, seed=seed)
    pred = model.predict(split.x_test, batch_size=4096, verbose=0)
    return {
        "increment": increment, "accuracy": float((np.argmax(pred, 1) == split.y_test).mean()),
        "split_evals": forest.split_evaluations(split.x_test),
        "max_split_evals": int(forest.tree_depths().sum()),
        "splits_per_tree": float(forest.num_splits().mean()), "epochs_run": len(hist.history["loss"]),
        "seconds": time.time() - start,
    }


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None, help="greedy epochs per level (finetune: 3x)")
    parser.add_argument("--depth", type=int, default=None, help="maximum depth (default 10; --smoke 3)")
    parser.add_argument("--increments", type=float, nargs="*", default=None)
    parser.add_argument("--seeds", type=int, nargs="*", default=None)
    args = parser.parse_args()
    trees = args.trees or (2 if args.smoke else 4 if args.quick else 20)
    epochs = args.epochs or (1 if args.smoke else 2 if args.quick else 10)
    args.depth = args.depth or (3 if args.smoke else 10)
    increments = args.increments if args.increments is not None else [0.1] if args.smoke else [0.0, 0.01, 0.1]
    seeds = args.seeds or [0]
    print(f"letter forest: {trees} trees, depth <= {args.depth}, 8 features/split, {epochs} epochs/level "
          f"+ {3 * epochs} finetune, increments {increments}, seeds {seeds} "
          f"(paper: 70 trees, 45 + 135 epochs)")
    rows = []
    for seed, split in _data.splits("letter", seeds, rows=_data.smoke_rows(args)):
        for inc in increments:
            row = run(split, trees, args.depth, epochs, inc, seed)
            row["seed"] = seed
            rows.append(row)
            print(f"seed {seed} increment {inc:<5}: accuracy {row['accuracy']:.4f}, "
                  f"{row['split_evals']:.1f} split evaluations/sample (max {row['max_split_evals']}), "
                  f"{row['splits_per_tree']:.0f} splits/tree, {row['epochs_run']} epochs, {row['seconds']:.0f}s",
                  flush=True)
    print(f"\n{'increment':>9} {'accuracy':>16} {'splits/sample':>14}")
    for inc in increments:
        sel = [r for r in rows if r["increment"] == inc]
        m, s = _data.mean_std([r["accuracy"] for r in sel])
        print(f"{inc:>9} {100 * m:>9.2f} ± {100 * s:4.2f} {np.mean([r['split_evals'] for r in sel]):>14.1f}")
    print("paper (70 trees, 45 epochs): 84.7 / 92.5 / 95.5 for increments 0 / 0.01 / 0.1")
    _data.write_json(args.json, {"benchmark": "end_to_end_forest", "trees": trees, "epochs_per_level": epochs,
                                 "finetune_epochs": 3 * epochs, "depth": args.depth, "rows": rows})


if __name__ == "__main__":
    main()
