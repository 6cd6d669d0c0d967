"""Tutorial: non-greedy oblique decision trees (Norouzi et al., NIPS 2015).

1. The bound: on a 2D problem, a CART tree is converted into the heap topology
   (scikit-learn interop) and padded to a perfect tree; we check the surrogate
   of Eq. 13 (fast) and Eq. 7 (exact) is never below the tree's loss, and draw
   the loss-augmented leaf selection for one split.
2. Training with model.fit: SGD with momentum on the surrogate (Algorithm 1),
   the row-norm projection ||w_i|| <= nu, Stable SGD rounds; the effect of nu
   on the number of active leaves (Figure 3) and accuracy.
3. Fast vs exact loss-augmented inference time (Figure 4, a small version).
4. Saving and reloading: identical predictions through the hard-routing op.

    python tutorials/non_greedy_trees/non_greedy_trees.py [--quick | --smoke] [--out DIR]

Figures go to tutorials/non_greedy_trees/_out/ by default.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import keras  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import make_moons  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from keras_trees.callbacks import StableSGD  # noqa: E402
from keras_trees.interop.sklearn import from_sklearn  # noqa: E402
from keras_trees.layers import NonGreedyTree  # noqa: E402
from keras_trees.ops import loss_augmented_inference  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def data(quick):
    x, y = make_moons(1000 if quick else 4000, noise=0.3, random_state=0)
    x = ((x - x.mean(0)) / x.std(0)).astype("float32")
    return train_test_split(x, y.astype("int32"), test_size=0.3, random_state=0, stratify=y)


def bound_check(x, y, depth):
    cart = DecisionTreeClassifier(max_depth=depth, criterion="entropy", random_state=0).fit(x, y)
    model = NonGreedyTree(max_depth=depth, num_classes=2, nu=4.0)
    model.initialize_from(from_sklearn(cart))  # padded to the perfect tree, rows scaled to nu
    same = np.array_equal(model.predict(x, verbose=0).argmax(1), cart.predict(x))
    w = np.asarray(model.split_weights)
    theta = np.asarray(model.leaf_values)
    g_f, h, fast = (np.asarray(t) for t in loss_augmented_inference(x, w[:, :2], w[:, 2], theta, y, "log", True))
    _, _, exact = (np.asarray(t) for t in loss_augmented_inference(x, w[:, :2], w[:, 2], theta, y, "log", False))
    loss = -theta[h, y] + np.log(np.exp(theta[h]).sum(1))
    print(f"[1] CART depth {depth} -> NonGreedyTree: same predictions = {same}; "
          f"mean loss {loss.mean():.3f} <= fast bound {fast.mean():.3f} <= exact bound {exact.mean():.3f}: "
          f"{bool(np.all(fast >= loss - 1e-5) and np.all(exact >= fast - 1e-5))}; "
          f"{np.mean(g_f != h):.1%} of samples have g != h")
    return cart


def nu_sweep(x, y, xt, yt, depth, nus, epochs, out):
    cart = DecisionTreeClassifier(max_depth=depth, criterion="entropy", random_state=0).fit(x, y)
    print(f"[2] CART depth {depth}: test accuracy {cart.score(xt, yt):.3f}, {cart.get_n_leaves()} leaves")
    active, acc, models = [], [], {}
    for nu in nus:
        keras.utils.set_random_seed(0)
        model = NonGreedyTree(max_depth=depth, num_classes=2, nu=nu)
        # The leaves of lowest training bound (the default pseudo-count leaves
        # the near-pure CART leaves overconfident and the bound loose).
        model.initialize_from(from_sklearn(cart), leaf_smoothing="bound", x=x, y=y)
        model.compile(keras.optimizers.SGD(0.005 * nu, momentum=0.9), metrics=["accuracy"])
        hist = model.fit(x, y, batch_size=64, epochs=epochs, verbose=0,
                         callbacks=[StableSGD(min_delta=1e-3, max_round_epochs=5)])
        active.append(model.active_leaves(x))
        acc.append(model.evaluate(xt, yt, verbose=0, return_dict=True)["accuracy"])
        norms = model.row_norms()
        print(f"    nu={nu:g}: bound {hist.history['loss'][0]:.3f} -> {hist.history['loss'][-1]:.3f}, "
              f"test accuracy {acc[-1]:.3f}, {active[-1]} active leaves of {2**depth}, "
              f"max row norm {norms.max():.3f} (<= nu)")
        models[nu] = model
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].semilogx(nus, active, "o-", label="non-greedy")
    ax[0].axhline(cart.get_n_leaves(), ls=":", c="k", label="CART (initialization)")
    ax[0].set_xlabel("nu"); ax[0].set_ylabel("active leaves"); ax[0].legend()
    ax[1].semilogx(nus, acc, "o-", label="non-greedy")
    ax[1].axhline(cart.score(xt, yt), ls=":", c="k", label="CART")
    ax[1].set_xlabel("nu"); ax[1].set_ylabel("test accuracy"); ax[1].legend()
    fig.tight_layout(); fig.savefig(os.path.join(out, "nu_active_leaves.png"), dpi=90); plt.close(fig)
    return models[nus[len(nus) // 2]]


def speed(depths, out):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 16)).astype("float32")
    y = rng.integers(0, 26, 2000).astype("int32")
    ratios = []
    for d in depths:
        w = rng.normal(size=(2**d - 1, 16)).astype("float32"); b = np.zeros(2**d - 1, "float32")
        theta = rng.normal(size=(2**d, 26)).astype("float32")
        times = []
        for fast in (False, True):
            loss_augmented_inference(x, w, b, theta, y, "log", fast)
            t = time.perf_counter()
            loss_augmented_inference(x, w, b, theta, y, "log", fast)
            times.append(time.perf_counter() - t)
        ratios.append(times[0] / times[1])
    print("[3] exact / fast loss-augmented inference time: "
          + ", ".join(f"depth {d}: {r:.1f}x" for d, r in zip(depths, ratios)))
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(depths, ratios, "o-"); ax.set_xlabel("depth"); ax.set_ylabel("exact / fast time")
    fig.tight_layout(); fig.savefig(os.path.join(out, "speed_ratio.png"), dpi=90); plt.close(fig)


def save_reload(model, xt, out):
    path = os.path.join(out, "non_greedy.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    same = np.array_equal(again.predict(xt, verbose=0), model.predict(xt, verbose=0))
    print(f"[4] saved and reloaded {path}: identical predictions = {same}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one or two epochs, the smallest settings; its figures mean nothing")
    parser.add_argument("--out", default=os.path.join(HERE, "_out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    x, xt, y, yt = data(args.quick or args.smoke)
    bound_check(x, y, depth=4)
    nus = [4.0] if args.smoke else [0.5, 4.0, 43.0] if args.quick else [0.1, 1.0, 4.0, 10.0, 43.0, 100.0]
    epochs = 1 if args.smoke else 6 if args.quick else 30
    model = nu_sweep(x, y, xt, yt, depth=6, nus=nus, epochs=epochs, out=args.out)
    speed([4] if args.smoke else [4, 8, 12] if args.quick else [4, 6, 8, 10, 12, 14], args.out)
    save_reload(model, xt, args.out)


if __name__ == "__main__":
    main()
