"""scikit-learn trees and grown end-to-end trees as keras_trees.Forest values."""

import warnings

import numpy as np
import pytest

sklearn_tree = pytest.importorskip("sklearn.tree")

from keras_trees import Forest, topology  # noqa: E402
import keras_trees  # noqa: E402
from keras_trees.interop import sklearn as interop  # noqa: E402
from keras_trees.interop.sklearn import from_sklearn, pad_to_perfect  # noqa: E402


def data(rng, n=600, p=5, dtype="float32"):
    x = rng.normal(size=(n, p)).astype(dtype)
    # repeated values and ties at thresholds
    x[:, 0] = np.round(x[:, 0], 1)
    y = (x[:, 0] > 0.1).astype(int) + (x[:, 1] * x[:, 2] > 0.2) + (x[:, 3] > 1.0)
    return x, y


def sklearn_ids(forest, x):
    """scikit-learn's node id of the leaf each sample reaches."""
    return forest.source_node[0, forest.apply(x)[:, 0]]


@pytest.mark.parametrize("max_depth", [1, 3, None])
def test_classifier_routing_equals_sklearn_apply_and_predict(rng, max_depth):
    x, y = data(rng)
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=max_depth, random_state=0).fit(x, y)
    forest = from_sklearn(cart)
    assert isinstance(forest, Forest) and forest.split_kind == "axis_aligned"
    assert forest.max_depth == cart.get_depth() and forest.num_classes == 4
    assert forest.num_leaves()[0] == cart.get_n_leaves()
    x_new = np.concatenate([x, rng.normal(size=(300, 5)).astype("float32")])
    np.testing.assert_array_equal(sklearn_ids(forest, x_new), cart.apply(x_new))
    np.testing.assert_allclose(forest.predict(x_new), cart.predict_proba(x_new), atol=1e-6)
    # thresholds themselves (x exactly on sklearn's float64 threshold, rounded to float32)
    f, t = cart.tree_.feature, cart.tree_.threshold
    for n in np.flatnonzero(f >= 0)[:10]:
        probe = x_new[:50].copy()
        probe[:, f[n]] = np.float32(t[n])
        np.testing.assert_array_equal(sklearn_ids(forest, probe), cart.apply(probe))


def test_regressor_multi_output_and_float64(rng):
    x, _ = data(rng, dtype="float64")
    y = np.stack([x[:, 0] ** 2, np.sin(x[:, 1])], 1)
    reg = sklearn_tree.DecisionTreeRegressor(max_depth=6, random_state=0).fit(x, y)
    forest = from_sklearn(reg, dtype="float64")
    assert forest.output_dim == 2 and forest.num_classes is None
    np.testing.assert_array_equal(sklearn_ids(forest, x), reg.apply(x))
    np.testing.assert_allclose(forest.predict(x), reg.predict(x), rtol=1e-12)


def test_feature_names_of_a_dataframe(rng):
    pd = pytest.importorskip("pandas")
    x, y = data(rng, n=100)
    frame = pd.DataFrame(x, columns=list("abcde"))
    forest = from_sklearn(sklearn_tree.DecisionTreeClassifier(max_depth=2, random_state=0).fit(frame, y))
    assert forest.feature_names == list("abcde")


def test_truncation_and_padding_keep_predictions(rng):
    x, y = data(rng)
    cart = sklearn_tree.DecisionTreeClassifier(random_state=0).fit(x, y)
    assert cart.get_depth() > 4
    cut = from_sklearn(cart, max_depth=4)
    topology.validate(cut.node_state, 4)
    ref = sklearn_tree.DecisionTreeClassifier(max_depth=4, random_state=0).fit(x, y)
    # truncating the full tree at depth 4 is the depth-4 tree (same greedy splits)
    np.testing.assert_allclose(cut.predict(x), ref.predict_proba(x), atol=1e-6)
    for depth in (4, 7):
        padded = pad_to_perfect(cut, depth)
        assert padded.split_kind == "linear"
        np.testing.assert_array_equal(padded.node_state, topology.perfect(1, depth))
        np.testing.assert_allclose(padded.predict(x), cut.predict(x))
        np.testing.assert_array_equal(sklearn_ids(padded, x), sklearn_ids(cut, x))
    with pytest.raises(ValueError, match="more than the requested depth"):
        pad_to_perfect(cut, 3)


def test_bad_input():
    with pytest.raises(TypeError, match="fitted scikit-learn"):
        from_sklearn(object())
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=2).fit([[0.0], [1.0]], [0, 1])
    with pytest.raises(ValueError, match="max_depth"):
        from_sklearn(cart, max_depth=0)
    with pytest.raises(ValueError, match="dtype"):
        from_sklearn(cart, dtype="int32")


def test_end_to_end_tree_to_forest_and_the_deprecated_names(rng):
    import keras

    from keras_trees.layers.end_to_end_tree import EndToEndTree

    x, y = data(rng, n=200)
    layer = EndToEndTree(max_depth=3, num_classes=4, initial_topology="stump", seed=0)
    model = keras.Sequential([keras.Input((5,)), layer])
    forest = layer.to_forest().tree(0)
    np.testing.assert_allclose(forest.predict(x), model.predict(x, verbose=0), atol=1e-6)
    padded = pad_to_perfect(forest, 3)
    np.testing.assert_allclose(padded.predict(x), model.predict(x, verbose=0), atol=1e-6)
    with pytest.warns(DeprecationWarning, match="to_forest"):
        old = interop.from_end_to_end(layer)
    np.testing.assert_array_equal(old.route(x), forest.route(x))
    with pytest.warns(DeprecationWarning):  # Python's indexing: -1 is the last (here the only) tree
        np.testing.assert_array_equal(interop.from_end_to_end(layer, tree_index=-1).route(x), forest.route(x))
    for bad in (1, -2):
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match=r"in \[-1, 1\) \(negative"):
            interop.from_end_to_end(layer, tree_index=bad)
    with pytest.warns(DeprecationWarning, match="Forest"):
        heap_tree = interop.HeapTree
    w, b = forest.linear_form()
    rebuilt = heap_tree(forest.node_state, w, b, forest.leaves, None)
    assert isinstance(rebuilt, Forest)
    np.testing.assert_allclose(rebuilt.predict(x), forest.predict(x))
    with warnings.catch_warnings():  # a star import reads __all__: no deprecated name there
        warnings.simplefilter("error")
        for name in keras_trees.interop.__all__:
            getattr(keras_trees.interop, name)
    with pytest.raises(AttributeError):
        _ = interop.NoSuchThing
