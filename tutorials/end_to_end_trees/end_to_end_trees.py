"""Tutorial: end-to-end learned decision trees (Hehn, Kooij & Hamprecht 2019).

1. Posterior convergence (the paper's Figure 3): a depth-4 oblique tree trained
   end to end on a 2D problem with steepness annealing; the probabilistic
   posterior (Eq. 2) and the deterministic one (hard routing) are drawn side by
   side after several epochs and become indistinguishable as the steepness grows.
2. Spatial regularization (Figure 4): trees grown greedily on 8x8 digits with
   and without the spatial Laplacian penalty (Eq. 15); their split weights are
   drawn as images.
3. Saving the grown tree and routing with the compiled op.

    python tutorials/end_to_end_trees/end_to_end_trees.py [--quick | --smoke] [--out DIR]

Figures go to tutorials/end_to_end_trees/_out/ (git-ignored) by default.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run from a checkout without installing: make the repository importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import keras  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits, make_moons  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing  # noqa: E402
from keras_trees.layers import EndToEndTree  # noqa: E402
from keras_trees.regularizers import SpatialLaplacian  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def posterior_convergence(out, quick, smoke=False):
    x, y = make_moons(2000, noise=0.25, random_state=0)
    x = ((x - x.mean(0)) / x.std(0)).astype("float32")
    y = y.astype("int32")
    tree = EndToEndTree(max_depth=4, num_classes=2, seed=0)  # balanced tree, "Finetune" training
    model = keras.Sequential([keras.Input((2,)), tree])
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    grid = np.stack(np.meshgrid(np.linspace(-2.5, 2.5, 150), np.linspace(-2.5, 2.5, 150)), -1)
    flat = grid.reshape(-1, 2).astype("float32")
    stages = [1, 2] if smoke else [1, 4, 12] if quick else [2, 8, 40]
    callbacks = [EMLeafUpdate(x, y), SteepnessAnnealing(0.1)]
    fig, axes = plt.subplots(2, len(stages), figsize=(4 * len(stages), 8))
    done = 0
    for col, stage in enumerate(stages):
        model.fit(x, y, batch_size=200, epochs=stage, initial_epoch=done, verbose=0, callbacks=callbacks)
        done = stage
        soft = np.asarray(tree.posterior(flat, routing="soft"))[:, 1].reshape(150, 150)
        hard = model.predict(flat, verbose=0)[:, 1].reshape(150, 150)
        gap = float(np.abs(soft - hard).mean())
        steepness = float(np.asarray(tree.gamma).mean())  # per-split steepness (variable `gamma`)
        for row, (img, name) in enumerate(((soft, "probabilistic"), (hard, "deterministic"))):
            ax = axes[row, col]
            ax.imshow(img, origin="lower", extent=(-2.5, 2.5, -2.5, 2.5), cmap="RdBu", vmin=0, vmax=1)
            ax.scatter(x[:300, 0], x[:300, 1], c=y[:300], s=4, cmap="RdBu", edgecolors="k", linewidths=0.2)
            ax.set_title(f"{name}, epoch {stage}, steepness {steepness:.1f}")
            ax.set_xticks([]), ax.set_yticks([])
        print(f"epoch {stage:>3}: steepness {steepness:.2f}, mean |soft - hard| posterior gap {gap:.4f}, "
              f"accuracy (hard) {(np.argmax(model.predict(x, verbose=0), 1) == y).mean():.3f}")
    fig.tight_layout()
    path = os.path.join(out, "posterior_convergence.png")
    fig.savefig(path, dpi=80)
    print(f"wrote {path}")


def spatial_regularization(out, quick, smoke=False):
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32").reshape(-1, 8, 8)
    y = digits.target.astype("int32")
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    epochs = 1 if smoke else 4 if quick else 15
    fig, axes = plt.subplots(2, 6, figsize=(12, 4.4))
    for row, strength in enumerate((0.0, 0.01)):
        reg = SpatialLaplacian(strength, (8, 8)) if strength else None
        tree = EndToEndTree(max_depth=4, num_classes=10, split_regularizer=reg, seed=0)
        model = keras.Sequential([keras.Input((8, 8)), tree])
        model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
        growth = GreedyLevelGrowth(x_tr, y_tr, epochs_per_level=epochs, finetune_epochs=epochs)
        model.fit(x_tr, y_tr, batch_size=200, epochs=growth.max_epochs(4), verbose=0,
                  callbacks=[growth, EMLeafUpdate(x_tr, y_tr), SteepnessAnnealing(0.1)])
        acc = (np.argmax(model.predict(x_te, verbose=0), 1) == y_te).mean()
        print(f"digits, lambda={strength}: test accuracy {acc:.3f}, {tree.num_leaves()} leaves, "
              f"{tree.split_evaluations(x_te):.2f} split evaluations per sample")
        kernels = np.asarray(tree.effective_kernel())[0]
        splits = np.flatnonzero(np.asarray(tree.node_state)[0, : tree.num_internal] == 2)[:6]
        for col, node in enumerate(splits):
            k = kernels[node].reshape(8, 8)
            axes[row, col].imshow(k, cmap="gray")
            axes[row, col].set_title(f"node {node}" + (", regularized" if strength else ""), fontsize=8)
            axes[row, col].axis("off")
        if row == 0:
            model.save(os.path.join(out, "digits_tree.keras"))
            saved_predictions = model.predict(x_te, verbose=0)
    fig.tight_layout()
    path = os.path.join(out, "split_weights.png")
    fig.savefig(path, dpi=80)
    print(f"wrote {path}")
    reloaded = keras.saving.load_model(os.path.join(out, "digits_tree.keras"))
    same = np.array_equal(reloaded.predict(x_te, verbose=0), saved_predictions)
    print(f"reloaded grown tree: identical predictions = {same}")
    print("reloaded tree routes the test set with the compiled op:",
          np.asarray(reloaded.layers[-1].route(x_te[:5]))[:, 0].tolist())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one or two epochs, the smallest settings; its figures mean nothing")
    parser.add_argument("--out", default=os.path.join(HERE, "_out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    keras.utils.set_random_seed(0)
    posterior_convergence(args.out, args.quick, args.smoke)
    spatial_regularization(args.out, args.quick, args.smoke)


if __name__ == "__main__":
    main()
