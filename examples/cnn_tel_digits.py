"""CNN-TEL vs CNN-Dense on scikit-learn's 8x8 digits (the paper's Section 4.3, small images).

    python examples/cnn_tel_digits.py [--seeds 3] [--epochs 60] [--smoke]

Both models share the same convolutional trunk. CNN-Dense ends in two dense
layers; CNN-TEL ends in one dense layer followed by a Tree Ensemble Layer.
Prints test accuracy, test loss and parameter counts side by side (mean and
standard deviation over seeds).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import _data  # noqa: E402
from keras_trees.layers import TreeEnsembleLayer  # noqa: E402


def trunk(inputs):
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Dropout(0.25)(h)
    return keras.layers.Flatten()(h)


def cnn_dense():
    inputs = keras.Input((8, 8, 1))
    h = trunk(inputs)
    h = keras.layers.Dense(256, activation="relu")(h)
    h = keras.layers.Dropout(0.5)(h)
    h = keras.layers.Dense(128, activation="relu")(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h), name="cnn_dense")


def cnn_tel():
    inputs = keras.Input((8, 8, 1))
    h = trunk(inputs)
    h = keras.layers.Dense(32)(h)
    h = keras.layers.BatchNormalization()(h)
    outputs = TreeEnsembleLayer(num_trees=20, max_depth=4, units=10, transition_width=1.0)(h)
    return keras.Model(inputs, outputs, name="cnn_tel")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="how many seeds (default 3; --smoke: 1)")
    parser.add_argument("--epochs", type=int, default=None, help="at most (default 60; --smoke: 1)")
    parser.add_argument("--smoke", action="store_true", help=_data.SMOKE_HELP)
    args = parser.parse_args()
    args.seeds = args.seeds or (1 if args.smoke else 3)
    args.epochs = args.epochs or (1 if args.smoke else 60)

    x, y = _data.load("digits")
    results = {"cnn_dense": [], "cnn_tel": []}
    params = {}
    for seed in range(args.seeds):
        data = _data.split(x / 16.0, y, seed, rows=_data.smoke_rows(args))
        shape = (-1, 8, 8, 1)
        for build in (cnn_dense, cnn_tel):
            keras.utils.set_random_seed(seed)
            model = build()
            model.compile(keras.optimizers.Adam(0.003),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          metrics=["accuracy"])
            model.fit(data.x_train.reshape(shape), data.y_train,
                      validation_data=(data.x_val.reshape(shape), data.y_val),
                      epochs=args.epochs, batch_size=64, verbose=0,
                      callbacks=[keras.callbacks.EarlyStopping(patience=10, restore_best_weights=True)])
            loss, acc = model.evaluate(data.x_test.reshape(shape), data.y_test, verbose=0)
            results[model.name].append((acc, loss))
            params[model.name] = model.count_params()
            print(f"seed {seed} {model.name:>9}: test accuracy {acc:.4f}, test loss {loss:.4f}", flush=True)

    print(f"\n{'model':>9} | {'test accuracy':>15} | {'test loss':>15} | {'# params':>9}")
    for name, rows in results.items():
        acc, loss = np.array(rows).T
        print(f"{name:>9} | {acc.mean():.4f} ± {acc.std():.4f} | {loss.mean():.4f} ± {loss.std():.4f} | "
              f"{params[name]:>9,}")


if __name__ == "__main__":
    main()
