"""Tutorial: convex polytope trees (Armandpour & Zhou, AISTATS 2021) on the two-circles problem.

The paper's Figure 1: points uniform on [-1, 1]^2, positive between two
concentric circles. Axis-aligned and oblique trees need many leaves; a convex
polytope tree needs two splits, because each split is a noisy-OR of K linear
experts whose "left" region is a convex polytope (Theorem 1).

1. Grow a depth-2 tree greedily (Section 3.3.2): each stump trains on its node's
   samples with the conditional-entropy objective (Eq. 13) and the gamma-process
   prior (Eq. 14); the threshold with the best information gain becomes the
   deterministic split; leaves are the empirical class distributions.
2. Inspect it: active facets per node and the polytope inequalities of Theorem 1.
3. Draw each node's noisy-OR probability f(x) with its decision boundary and the
   active facets, and the tree's decision regions beside CART of depth 2 and 10.
4. Save the model and reload it: predictions are identical, served by the
   compiled hard-routing op.

    python tutorials/convex_polytope_trees/convex_polytope_trees.py [--quick | --smoke] [--out DIR]

Figures go to tutorials/convex_polytope_trees/_out/ (git-ignored) by default.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Run from a checkout without installing: make the repository importable.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import keras  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

import _data  # noqa: E402  (benchmarks/_data.py: the two-circles generator and protocol split)
from keras_trees.layers import ConvexPolytopeTree  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one or two epochs, the smallest settings; its figures mean nothing")
    parser.add_argument("--out", default=os.path.join(HERE, "_out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    keras.utils.set_random_seed(0)

    # ---------------------------------------------------------------- 1. data and growth
    split = _data.split(*_data.two_circles(), seed=0)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=20, num_classes=2, seed=0, name="cpt")
    model = keras.Sequential([keras.Input((2,)), tree])
    epochs = 1 if args.smoke else 10 if args.quick else 60
    history = tree.fit_greedy(split.x_train, split.y_train, epochs=epochs, batch_size=256,
                              learning_rate=0.05, min_gain=0.01)
    scores = model.predict(split.x_test, verbose=0)
    auc = _data.auc(split.y_test, scores, 2)
    print(f"convex polytope tree: depth {history['depth']}, {history['leaves']} leaves, test AUC {auc:.4f}")
    for d in (2, 10):
        cart = DecisionTreeClassifier(max_depth=d, random_state=0).fit(split.x_train, split.y_train)
        print(f"CART depth {d}: {cart.get_n_leaves()} leaves, test AUC "
              f"{_data.auc(split.y_test, cart.predict_proba(split.x_test), 2):.4f}")

    # ---------------------------------------------------------------- 2. interpretation
    print(tree.describe())
    for p in tree.polytopes():
        print(f"node {p['node']}: {len(p['active'])} active facets of {tree.num_experts}; left region inside")
        for w, b, o in list(zip(p["weights"], p["bias"], p["offsets"]))[:3]:
            print(f"    {w[0]:+.3f} x1 {w[1]:+.3f} x2 {b:+.3f} <= {o:.3f}")
        if len(p["active"]) > 3:
            print(f"    ... ({len(p['active']) - 3} more)")

    # ---------------------------------------------------------------- 3. figures
    lim = np.abs(split.x_train).max() * 1.02
    g = np.linspace(-lim, lim, 300)
    gx, gy = np.meshgrid(g, g)
    grid = np.stack([gx.ravel(), gy.ravel()], 1).astype("float32")
    rates = np.asarray(tree.split_values(grid))
    nodes = tree.polytopes()
    fig, axes = plt.subplots(1, len(nodes) + 1, figsize=(5 * (len(nodes) + 1), 4.6))
    route = np.asarray(tree.route(split.x_train))[:, 0]
    for ax, p in zip(axes, nodes):
        n = p["node"]
        f = -np.expm1(-rates[:, n]).reshape(gx.shape)  # noisy-OR probability of going right
        ax.imshow(f, origin="lower", extent=(-lim, lim, -lim, lim), cmap="viridis", vmin=0, vmax=1, alpha=0.8)
        ax.contour(gx, gy, rates[:, n].reshape(gx.shape), levels=[p["threshold"]], colors="k", linestyles="--")
        for w, b, o in zip(p["weights"], p["bias"], p["offsets"]):  # facets of Theorem 1
            if abs(w[1]) > 1e-9:
                ax.plot(g, (o - b - w[0] * g) / w[1], color="w", lw=0.6, alpha=0.6)
        # the samples that reach this node
        reach = ((route + 1) >> np.maximum(_depth(route) - p["depth"], 0)) - 1 == n
        xs, ys = split.x_train[reach], split.y_train[reach]
        ax.scatter(xs[:, 0], xs[:, 1], c=np.where(ys == 1, "r", "b"), s=3)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_title(f"node {n}: f(x), boundary (dashed), {len(p['active'])} facets")
    pred = model.predict(grid, verbose=0)[:, 1].reshape(gx.shape)
    axes[-1].imshow(pred, origin="lower", extent=(-lim, lim, -lim, lim), cmap="coolwarm", vmin=0, vmax=1)
    axes[-1].scatter(split.x_test[:, 0], split.x_test[:, 1], c=np.where(split.y_test == 1, "r", "b"), s=3)
    axes[-1].set_title(f"tree: {tree.num_leaves()} leaves, test AUC {auc:.3f}")
    fig.tight_layout()
    path = os.path.join(args.out, "polytopes.png")
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")

    fig, axes = plt.subplots(1, 2, figsize=(9, 4.4))
    for ax, d in zip(axes, (2, 10)):
        cart = DecisionTreeClassifier(max_depth=d, random_state=0).fit(split.x_train, split.y_train)
        ax.imshow(cart.predict_proba(grid)[:, 1].reshape(gx.shape), origin="lower",
                  extent=(-lim, lim, -lim, lim), cmap="coolwarm", vmin=0, vmax=1)
        ax.set_title(f"CART depth {d}: {cart.get_n_leaves()} leaves")
    fig.tight_layout()
    path = os.path.join(args.out, "cart.png")
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")

    # ---------------------------------------------------------------- 4. save and reload
    path = os.path.join(args.out, "cpt.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    same = np.array_equal(reloaded.predict(split.x_test, verbose=0), scores)
    print(f"saved {path}; reloaded predictions identical: {same}")
    if not same:
        raise SystemExit("reloaded model predicts differently")


def _depth(node):
    return np.floor(np.log2(np.asarray(node) + 1) + 1e-9).astype(np.int64)


if __name__ == "__main__":
    main()
