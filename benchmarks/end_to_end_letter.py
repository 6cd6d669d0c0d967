"""End-to-end trees on letter: Greedy and Finetune accuracy vs depth (Hehn et al. Fig. 2).

A single oblique EndToEndTree per depth is grown greedily
(GreedyLevelGrowth, EMLeafUpdate, SteepnessAnnealing +0.1/epoch, Adam 1e-3,
batch 1000 as in the paper), evaluated ("Greedy"), then finetuned end to end
("Finetune"), side by side with a scikit-learn CART tree of the same maximum
depth on the same protocol split (shared/benchmarks.md). Target: 86.3% at the
best depth. Also printed: leaves and split evaluations per test sample.

    python benchmarks/end_to_end_letter.py [--quick | --smoke] [--json results/end_to_end_letter.json]

``--smoke`` (CI): depth 2 on 600 letter rows, 1 epoch per level and 1 finetune epoch.
"""

import time

import _data
import keras
import numpy as np
from sklearn.tree import DecisionTreeClassifier

from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.layers import EndToEndTree
from keras_trees.layers._end_to_end import PHASE_DONE


def accuracy(model, x, y):
    return float((np.argmax(model.predict(x, batch_size=4096, verbose=0), 1) == y).mean())


def run_depth(split, depth, epochs_per_level, finetune_epochs, lr, seed):
    keras.utils.set_random_seed(seed)
    tree = EndToEndTree(max_depth=depth, num_classes=split.num_classes, seed=seed)
    model = keras.Sequential([keras.Input((split.x_train.shape[1],)), tree])
    loss = keras.losses.SparseCategoricalCrossentropy()
    model.compile(keras.optimizers.Adam(lr), loss)
    x, y = split.x_fit, split.y_fit  # train + validation (epochs are fixed, no selection)
    growth = GreedyLevelGrowth(x, y, epochs_per_level=epochs_per_level, finetune_epochs=0)
    start = time.time()
    model.fit(x, y, batch_size=1000, epochs=growth.max_epochs(depth), verbose=0,
              callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    if int(np.asarray(tree.growth_phase)) != PHASE_DONE:  # else "finetuning" would only train stumps
        raise RuntimeError(f"depth {depth}: growth did not finish within {growth.max_epochs(depth)} epochs")
    greedy = accuracy(model, split.x_test, split.y_test)
    greedy_time = time.time() - start
    model.compile(keras.optimizers.Adam(lr), loss)  # fresh optimizer for finetuning
    model.fit(x, y, batch_size=1000, epochs=finetune_epochs, verbose=0,
              callbacks=[EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    return {
        "depth": depth, "greedy": greedy, "finetune": accuracy(model, split.x_test, split.y_test),
        "train_finetune": accuracy(model, x, y), "leaves": tree.num_leaves(),
        "split_evals": tree.split_evaluations(split.x_test), "seconds": time.time() - start,
        "greedy_seconds": greedy_time,
    }


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--epochs-per-level", type=int, default=None)
    parser.add_argument("--finetune-epochs", type=int, default=None)
    parser.add_argument("--depths", type=int, nargs="*", default=None)
    parser.add_argument("--seeds", type=int, nargs="*", default=None)
    args = parser.parse_args()
    depths = args.depths or ([2] if args.smoke else [2, 4, 6, 8, 10] if args.quick else list(range(2, 19, 2)))
    seeds = _data.run_seeds(args)
    epl = args.epochs_per_level or (1 if args.smoke else 8 if args.quick else 20)
    fte = args.finetune_epochs if args.finetune_epochs is not None else (1 if args.smoke else 16 if args.quick else 40)
    print(f"letter, depths {depths}, seeds {seeds}, {epl} epochs per level, {fte} finetune epochs")
    rows = []
    for seed, split in _data.splits("letter", seeds, rows=_data.smoke_rows(args)):
        for depth in depths:
            row = run_depth(split, depth, epl, fte, 1e-3, seed)
            cart = DecisionTreeClassifier(max_depth=depth, random_state=seed).fit(split.x_fit, split.y_fit)
            row["cart"] = float(cart.score(split.x_test, split.y_test))
            row["seed"] = seed
            rows.append(row)
            print(f"seed {seed} depth {depth:>2}: greedy {row['greedy']:.4f} finetune {row['finetune']:.4f} "
                  f"CART {row['cart']:.4f} | leaves {row['leaves']}, {row['split_evals']:.2f} splits/sample, "
                  f"{row['seconds']:.0f}s", flush=True)
    print(f"\n{'depth':>5} {'Greedy':>15} {'Finetune':>15} {'CART':>15}")
    summary = []
    for depth in depths:
        sel = [r for r in rows if r["depth"] == depth]
        stats = {k: _data.mean_std([r[k] for r in sel]) for k in ("greedy", "finetune", "cart")}
        summary.append({"depth": depth, **{k: {"mean": m, "std": s} for k, (m, s) in stats.items()}})
        print(f"{depth:>5} " + " ".join(f"{100 * m:>8.2f} ± {100 * s:4.2f}" for m, s in stats.values()))
    best = max(summary, key=lambda r: r["finetune"]["mean"])
    print(f"best Finetune: {100 * best['finetune']['mean']:.2f}% at depth {best['depth']} (target 86.3%)")
    _data.write_json(args.json, {"benchmark": "end_to_end_letter", "epochs_per_level": epl,
                                 "finetune_epochs": fte, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
