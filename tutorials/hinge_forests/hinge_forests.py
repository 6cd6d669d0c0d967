"""Random hinge forests and ferns walk-through (Lay et al. 2018).

    python tutorials/hinge_forests/hinge_forests.py [--quick | --smoke] [--out DIR]

1. A single hinge tree on one input: crisp routing, piecewise-linear output
   ``w_leaf * |r*|`` (figure ``hinge_tree_1d.png``), and what ``traverse`` reports.
2. Regression on scikit-learn's diabetes data: 100 learned inner-product
   features -> HingeBatchNormalization -> HingeForest(mean of 100 trees),
   squared error, trained end-to-end; test RMSE beside linear regression.
3. Classification on scikit-learn's digits: the same feature pool in front of a
   forest and of ferns (trees summed into 10 logits, softmax), and a
   convolutional feature pool in front of a forest (the paper's Figure 2c).
4. Save and reload: the fixed random feature indices travel with the model.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import _data  # noqa: E402
import keras_trees  # noqa: E402,F401  (loads the custom ops)
from keras_trees.layers import HingeBatchNormalization, HingeFern, HingeForest  # noqa: E402


def one_tree(out):
    """A depth-2 hinge tree on a single input, weights set by hand."""
    tree = HingeForest(num_trees=1, max_depth=2, units=1, reduction="sum")
    tree.build((None, 1))
    # Vertices in heap order: root 0 (x > 0?), left child 1 (x > -1?), right child 2 (x > 1?).
    tree.thresholds.assign([[0.0, -1.0, 1.0]])
    # Leaves left to right: x <= -1, (-1, 0], (0, 1], x > 1.
    tree.leaf_weights.assign(np.array([[[-1.0], [0.5], [1.0], [2.0]]]))
    x = np.linspace(-2.5, 2.5, 501, dtype="float32")[:, None]
    y = tree(x).numpy()[:, 0]
    plt.figure(figsize=(5, 3.2))
    plt.plot(x[:, 0], y)
    for t in (-1.0, 0.0, 1.0):
        plt.axvline(t, color="gray", lw=0.5, ls="--")
    plt.xlabel("x")
    plt.ylabel("tree output  w_leaf * |r*|")
    plt.title("one hinge tree of depth 2")
    plt.tight_layout()
    path = os.path.join(out, "hinge_tree_1d.png")
    plt.savefig(path, dpi=120)
    plt.close()
    probe = np.array([[-1.5], [-0.2], [0.4], [1.7]], dtype="float32")
    trav = tree.traverse(probe)
    print("1. one hinge tree of depth 2 on one input (thresholds 0, -1, 1):")
    print("       x   leaf  vertex v*   margin r*   output")
    for i, xv in enumerate(probe[:, 0]):
        print(f"   {xv:5.1f}   {int(trav['leaf'][i, 0]):4d}   {int(trav['vertex'][i, 0]):9d}"
              f"   {float(trav['margin'][i, 0]):9.2f}   {float(tree(probe[i:i + 1])[0, 0]):6.2f}")
    print(f"   piecewise linear, zero at every threshold: {path}")


def feature_pool_forest(input_dim, units, layer, reduction, seed, trees=100, max_depth=6,
                        features=100):
    """Learned inner-product features -> modified batch norm -> hinge trees (Figure 2)."""
    return keras.Sequential([
        keras.Input((input_dim,)),
        keras.layers.Dense(features, use_bias=False, name="inner_product_features"),
        HingeBatchNormalization(),
        layer(num_trees=trees, max_depth=max_depth, units=units, reduction=reduction, seed=seed),
    ])


def regression(quick, seed=0, smoke=False):
    from sklearn.linear_model import LinearRegression

    x, y = _data.load("diabetes")
    split = _data.split(x, y, seed, regression=True)
    mu, sd = split.y_train.mean(), split.y_train.std()
    keras.utils.set_random_seed(seed)
    model = feature_pool_forest(x.shape[1], 1, HingeForest, "mean", seed, max_depth=2)
    model.compile(keras.optimizers.Adam(0.005), "mse")
    start = time.perf_counter()
    model.fit(
        split.x_train, (split.y_train - mu) / sd,
        validation_data=(split.x_val, (split.y_val - mu) / sd),
        epochs=1 if smoke else 40 if quick else 200, batch_size=32, verbose=0,
        callbacks=[keras.callbacks.EarlyStopping(patience=30, restore_best_weights=True)],
    )
    seconds = time.perf_counter() - start
    pred = model.predict(split.x_test, verbose=0)[:, 0] * sd + mu
    rmse = float(np.sqrt(np.mean((pred - split.y_test) ** 2)))
    linear = LinearRegression().fit(split.x_train, split.y_train).predict(split.x_test)
    print("\n2. regression, diabetes (442 samples, 10 features), standardized target, MSE loss:")
    print(f"   hinge forest (100 features, 100 trees of depth 2, mean)  test RMSE {rmse:.1f}"
          f"  ({seconds:.0f} s)")
    print(f"   linear regression                                        test RMSE "
          f"{np.sqrt(np.mean((linear - split.y_test) ** 2)):.1f}")
    print(f"   predicting the training mean                             test RMSE "
          f"{np.sqrt(np.mean((mu - split.y_test) ** 2)):.1f}")
    return rmse


def classification(quick, out, seed=0, smoke=False):
    x, y = _data.load("digits")
    split = _data.split(x, y, seed, rows=600 if smoke else None)
    epochs = 1 if smoke else 8 if quick else 30
    models = {
        "inner-product features + forest": feature_pool_forest(64, 10, HingeForest, "sum", seed),
        "inner-product features + ferns": feature_pool_forest(64, 10, HingeFern, "sum", seed),
        "3x3 conv features + forest": keras.Sequential([
            keras.Input((64,)),
            keras.layers.Reshape((8, 8, 1)),
            keras.layers.Conv2D(16, 3, use_bias=False, name="conv_features"),
            keras.layers.Flatten(),            # 6 x 6 x 16 = 576 features
            HingeBatchNormalization(),
            HingeForest(num_trees=100, max_depth=6, units=10, reduction="sum", seed=seed),
        ]),
    }
    print(f"\n3. classification, digits (8x8 images, 10 classes), {epochs} epochs, Adam 0.005, "
          "trees summed into logits:")
    accuracies = {}
    for name, model in models.items():
        keras.utils.set_random_seed(seed)
        model.compile(keras.optimizers.Adam(0.005),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        start = time.perf_counter()
        model.fit(split.x_fit, split.y_fit, epochs=epochs, batch_size=32, verbose=0)
        seconds = time.perf_counter() - start
        accuracies[name] = float(np.mean(model.predict(split.x_test, verbose=0).argmax(1)
                                         == split.y_test))
        print(f"   {name:34s} test accuracy {accuracies[name]:.4f}  ({seconds:.0f} s)")

    model = models["inner-product features + forest"]
    path = os.path.join(out, "digits_hinge_forest.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    same = np.array_equal(model.predict(split.x_test, verbose=0),
                          reloaded.predict(split.x_test, verbose=0))
    same_indices = np.array_equal(model.layers[-1].feature_indices.numpy(),
                                  reloaded.layers[-1].feature_indices.numpy())
    print(f"\n4. saved to {path} and reloaded: identical predictions = {same}, "
          f"identical feature indices = {same_indices}")
    return accuracies


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs (about 30 s)")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one or two epochs, the smallest settings; its figures mean nothing")
    parser.add_argument("--out", default=os.path.join(HERE, "_out"), help="folder for outputs")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    one_tree(args.out)
    regression(args.quick, smoke=args.smoke)
    classification(args.quick, args.out, smoke=args.smoke)


if __name__ == "__main__":
    main()
