"""export_text: scikit-learn's rule text for converted trees, readable oblique
and noisy-OR tests, leaves with sample counts, truncation."""

import keras
import numpy as np
import pytest

from keras_trees import Forest, topology
from keras_trees.inspection import export_text
from keras_trees.layers import ConvexPolytopeTree, EndToEndTree

sklearn_tree = pytest.importorskip("sklearn.tree")
datasets = pytest.importorskip("sklearn.datasets")
from keras_trees.interop import from_sklearn  # noqa: E402


@pytest.mark.parametrize("max_depth", [None, 2])
def test_converted_iris_tree_prints_sklearns_rules(max_depth):
    iris = datasets.load_iris()
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=5, random_state=0).fit(iris.data, iris.target)
    names, classes = list(iris.feature_names), list(iris.target_names)
    expected = sklearn_tree.export_text(cart, feature_names=names, class_names=classes, decimals=3,
                                        max_depth=10 if max_depth is None else max_depth)
    assert export_text(from_sklearn(cart), feature_names=names, class_names=classes,
                       max_depth=max_depth) == expected
    if max_depth is None:
        assert "|--- petal width (cm) <= 0.800\n|   |--- class: setosa\n" in expected


def test_regression_values_and_sample_counts():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2))
    y = 2.0 * (x[:, 1] > 0.3) + x[:, 0]
    reg = sklearn_tree.DecisionTreeRegressor(max_depth=3, random_state=0).fit(x, y)
    expected = sklearn_tree.export_text(reg, feature_names=["a", "b"], decimals=3)
    forest = from_sklearn(reg, dtype="float64")
    assert export_text(forest, feature_names=["a", "b"]) == expected
    counted = export_text(forest, feature_names=["a", "b"], x=x)
    counts = [int(line.split("samples: ")[1].rstrip(")")) for line in counted.splitlines() if "samples" in line]
    assert sum(counts) == 300 and len(counts) == reg.get_n_leaves()
    assert export_text(forest).startswith("|--- x[1] <= ")  # default names


def test_right_if_negative_flips_the_comparison():
    stump = Forest(node_state=topology.stump(1, 1), split_kind="axis_aligned", feature=np.array([[0]]),
                   threshold=np.array([[1.5]]), leaves=np.array([[[0.0], [1.0], [2.0]]]), input_dim=1,
                   right_if="negative")
    assert export_text(stump, decimals=1) == ("|--- x[0] >= 1.5\n|   |--- value: [1.0]\n"
                                               "|--- x[0] <  1.5\n|   |--- value: [2.0]\n")


def test_oblique_splits_print_their_largest_terms():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6)).astype("float32")
    tree = EndToEndTree(max_depth=2, num_classes=3, initial_topology="perfect", seed=0)
    keras.Sequential([keras.Input((6,)), tree])
    names = [f"f{j}" for j in range(6)]
    text = export_text(tree, feature_names=names, class_names=["a", "b", "c"], x=x)
    first = text.splitlines()[0]
    w, b = tree.to_forest().weights[0, 0], tree.to_forest().bias[0, 0]
    top = np.argsort(-np.abs(w))[:3]
    assert first.startswith(f"|--- {'-' if w[top[0]] < 0 else ''}{abs(w[top[0]]):.3f}*f{top[0]}")
    assert "+ ... (3 more of 6 terms) <= " in first and first.endswith(f"{-b:.3f}")
    assert text.count("class: ") == 4 and "(samples: " in text
    assert len(export_text(tree, terms=6).splitlines()[0]) > len(first)


@pytest.mark.slow
def test_noisy_or_splits_are_readable():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(300, 2)).astype("float32")
    y = (np.linalg.norm(x, axis=1) < 0.6).astype("int32")
    tree = ConvexPolytopeTree(max_depth=1, num_experts=4, num_classes=2, seed=0)
    keras.Sequential([keras.Input((2,)), tree])
    tree.fit_greedy(x, y, epochs=5, batch_size=100, learning_rate=0.05)
    text = export_text(tree, feature_names=["u", "v"])
    assert "*sp(" in text and " <= " in text and " >  " in text and "class: " in text


def test_bad_class_names():
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=1).fit([[0.0], [1.0]], [0, 1])
    with pytest.raises(ValueError, match="class_names must hold 2"):
        export_text(from_sklearn(cart), class_names=["a"])
