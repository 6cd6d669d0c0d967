"""Interpreting trees on scikit-learn's breast cancer data (30 named features).

    python examples/interpret_breast_cancer.py [--epochs 30] [--png PATH] [--smoke]

A CART tree converted to a ``keras_trees.Forest``: rules as text (the names
come from the DataFrame's columns), gain importances (equal to scikit-learn's
``feature_importances_``) and a plot. Then a Tree Ensemble Layer: the features
its output is most sensitive to, permutation importances, and the hard-routed
trees extracted from it with their measured agreement to the soft model.
The plot goes to ``--png`` (default: ``cart.png`` in a ``keras_trees_examples``
folder of the system's temporary directory, never into the checkout).
"""

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from keras_trees.inspection import (  # noqa: E402
    export_text,
    feature_importances,
    hard_forest,
    permutation_importance,
    plot_tree,
    routing_sensitivity,
)
from keras_trees.interop import from_sklearn  # noqa: E402
from keras_trees.layers import TreeEnsembleLayer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 30 (--smoke: 1)")
    parser.add_argument("--png", default=None, help="where the CART tree's plot goes (default: "
                        "<temporary directory>/keras_trees_examples/cart.png)")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one epoch, the plot in a fresh temporary folder unless --png")
    args = parser.parse_args()
    args.epochs = args.epochs or (1 if args.smoke else 30)
    if args.png is None:
        folder = (tempfile.mkdtemp(prefix="keras_trees_smoke_") if args.smoke
                  else os.path.join(tempfile.gettempdir(), "keras_trees_examples"))
        os.makedirs(folder, exist_ok=True)
        args.png = os.path.join(folder, "cart.png")

    data = load_breast_cancer(as_frame=True)
    x_train, x_test, y_train, y_test = train_test_split(data.data.astype("float32"), data.target, random_state=0)
    classes = list(data.target_names)

    cart = DecisionTreeClassifier(max_depth=8, random_state=0).fit(x_train, y_train)
    forest = from_sklearn(cart)  # feature names from the DataFrame's columns
    print(export_text(forest, class_names=classes, max_depth=2, x=x_train))
    gain = feature_importances(forest, x_train, y_train, kind="gain")
    print("gain importances equal scikit-learn's:", np.allclose(gain, cart.feature_importances_))
    plot_tree(forest, x=x_train, y=y_train, class_names=classes).figure.savefig(args.png)
    print("plot:", args.png)

    mean, std = x_train.mean(), x_train.std()
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((30,)), TreeEnsembleLayer(num_trees=10, max_depth=3, units=2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=args.epochs, verbose=0)

    def top(scores):
        return list(x_train.columns[np.argsort(-np.asarray(scores))[:3]])

    print("most sensitive features:", top(routing_sensitivity(model, x_test)))
    importances = permutation_importance(model, x_test, y_test, n_repeats=1 if args.smoke else 5)
    print("largest permutation importances:", top(importances["importances_mean"]))
    hard = hard_forest(model, x_test)  # greedy-path trees, measured against the model
    print(f"hard trees agree with the soft model on {hard['agreement']:.1%} of the test set")


if __name__ == "__main__":
    main()
