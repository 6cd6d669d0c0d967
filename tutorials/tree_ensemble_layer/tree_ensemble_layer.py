"""Tree Ensemble Layer walk-through: smooth-step routing and conditional computation.

    python tutorials/tree_ensemble_layer/tree_ensemble_layer.py [--quick | --smoke] [--out DIR]

1. Plots the smooth-step against the paper's logistic (Figure 1).
2. Trains a single tree of depth 10 on the Pima diabetes data with Adam
   (lr 0.1, batch 256, as in the paper's Appendix B) for several transition
   widths (the paper's gamma) and plots the mean number of reachable leaves
   per sample after every epoch (Figure 2): with a width <= 1 it collapses
   towards 1 leaf of 1024.
3. Reports test AUC of each width, and shows how to save, reload and export.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import tensorflow as tf  # noqa: E402

import _data  # noqa: E402
import keras_trees  # noqa: E402
from keras_trees.layers import TreeEnsembleLayer  # noqa: E402


class ReachableLeaves(keras.callbacks.Callback):
    """Records the layer's mean reachable leaves on fixed data after each epoch."""

    def __init__(self, x):
        super().__init__()
        self.x = x
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        norm, tel = self.model.layers[0], self.model.layers[1]
        self.history.append(tel.mean_reachable_leaves(norm(self.x, training=False)))


def plot_activations(out):
    t = np.linspace(-1.5, 1.5, 301)
    plt.figure(figsize=(5, 3.5))
    plt.plot(t, np.asarray(keras_trees.ops.smooth_step(t, 1.0)), label="smooth-step, width 1")
    plt.plot(t, np.asarray(keras_trees.ops.logistic_step(t, 1.0)), "--", label="logistic 1/(1+e^{-6t})")
    plt.xlabel("t = <w, x> + b")
    plt.ylabel("probability of going left")
    plt.legend()
    plt.tight_layout()
    path = os.path.join(out, "activations.png")
    plt.savefig(path, dpi=120)
    plt.close()
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one or two epochs, the smallest settings; its figures mean nothing")
    parser.add_argument("--out", default=os.path.join(HERE, "_out"))
    args = parser.parse_args()
    tf.get_logger().setLevel("ERROR")  # one model per width retraces predict; that is expected
    os.makedirs(args.out, exist_ok=True)
    print("wrote", plot_activations(args.out))

    data = _data.split(*_data.load("pima"), seed=0)
    epochs = 1 if args.smoke else 8 if args.quick else 40
    widths = (1.0,) if args.smoke else (0.1, 1.0, 10.0) if args.quick else (0.01, 0.1, 1.0, 10.0)
    curves = {}
    for width in widths:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([
            keras.Input((data.x_train.shape[1],)),
            keras.layers.BatchNormalization(),
            TreeEnsembleLayer(num_trees=1, max_depth=10, units=2, transition_width=width),
        ])
        model.compile(keras.optimizers.Adam(0.1),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        tracker = ReachableLeaves(data.x_train)
        model.fit(data.x_train, data.y_train, epochs=epochs, batch_size=256, verbose=0,
                  callbacks=[tracker])
        auc = _data.auc(data.y_test, model.predict(data.x_test, verbose=0), 2)
        curves[width] = tracker.history
        print(f"transition_width {width:>5}: reachable leaves after epoch 1 {tracker.history[0]:7.1f}, "
              f"after epoch {epochs} {tracker.history[-1]:6.2f} (of 1024); test AUC {auc:.3f}")

    plt.figure(figsize=(5, 3.5))
    for width, curve in curves.items():
        plt.semilogy(range(1, len(curve) + 1), curve, label=f"transition_width={width}")
    plt.xlabel("epoch")
    plt.ylabel("mean reachable leaves per sample")
    plt.title("one tree of depth 10 (1024 leaves), Pima")
    plt.legend()
    plt.tight_layout()
    path = os.path.join(args.out, "reachable_leaves.png")
    plt.savefig(path, dpi=120)
    plt.close()
    print("wrote", path)

    # Deployment: .keras round trip, SavedModel with our ops, portable SavedModel.
    saved = os.path.join(args.out, "tel.keras")
    model.save(saved)
    reloaded = keras.saving.load_model(saved)
    same = np.array_equal(reloaded.predict(data.x_test, verbose=0), model.predict(data.x_test, verbose=0))
    keras_trees.export_portable(model, os.path.join(args.out, "tel_portable"), verbose=False)
    print(f"reloaded {saved}: identical predictions = {same}; portable SavedModel in "
          f"{os.path.join(args.out, 'tel_portable')}")


if __name__ == "__main__":
    main()
