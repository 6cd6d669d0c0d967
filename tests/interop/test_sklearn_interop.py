"""scikit-learn trees and grown end-to-end trees in the shared heap topology."""

import numpy as np
import pytest

sklearn_tree = pytest.importorskip("sklearn.tree")

from keras_trees import topology  # noqa: E402
from keras_trees.interop.sklearn import from_end_to_end, from_sklearn, pad_to_perfect  # noqa: E402


def data(rng, n=600, p=5, dtype="float32"):
    x = rng.normal(size=(n, p)).astype(dtype)
    # repeated values and ties at thresholds
    x[:, 0] = np.round(x[:, 0], 1)
    y = (x[:, 0] > 0.1).astype(int) + (x[:, 1] * x[:, 2] > 0.2) + (x[:, 3] > 1.0)
    return x, y


@pytest.mark.parametrize("max_depth", [1, 3, None])
def test_classifier_routing_equals_sklearn_apply_and_predict(rng, max_depth):
    x, y = data(rng)
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=max_depth, random_state=0).fit(x, y)
    heap = from_sklearn(cart)
    topology.validate(heap.node_state)
    assert heap.max_depth == cart.get_depth()
    assert topology.num_leaves(heap.node_state)[0] == cart.get_n_leaves()
    x_new = np.concatenate([x, rng.normal(size=(300, 5)).astype("float32")])
    pos = heap.route(x_new)
    np.testing.assert_array_equal(heap.source_node[0, pos], cart.apply(x_new))
    np.testing.assert_allclose(heap.predict(x_new), cart.predict_proba(x_new), atol=1e-6)
    # thresholds themselves (x exactly on sklearn's float64 threshold, rounded to float32)
    f, t = cart.tree_.feature, cart.tree_.threshold
    on = np.repeat(x_new[:50], 1, axis=0)
    for n in np.flatnonzero(f >= 0)[:10]:
        probe = on.copy()
        probe[:, f[n]] = np.float32(t[n])
        np.testing.assert_array_equal(heap.source_node[0, heap.route(probe)], cart.apply(probe))


def test_regressor_multi_output_and_float64(rng):
    x, _ = data(rng, dtype="float64")
    y = np.stack([x[:, 0] ** 2, np.sin(x[:, 1])], 1)
    reg = sklearn_tree.DecisionTreeRegressor(max_depth=6, random_state=0).fit(x, y)
    heap = from_sklearn(reg, dtype="float64")
    assert heap.leaf_values.shape[-1] == 2
    np.testing.assert_array_equal(heap.source_node[0, heap.route(x)], reg.apply(x))
    np.testing.assert_allclose(heap.predict(x), reg.predict(x), rtol=1e-12)


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
        np.testing.assert_array_equal(padded.node_state, topology.perfect(1, depth))
        np.testing.assert_allclose(padded.predict(x), cut.predict(x))
        np.testing.assert_array_equal(padded.source_node[0, padded.route(x)], cut.source_node[0, cut.route(x)])
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


def test_from_end_to_end_tree(rng):
    import keras

    from keras_trees.layers.end_to_end_tree import EndToEndTree

    x, y = data(rng, n=200)
    layer = EndToEndTree(max_depth=3, num_classes=4, initial_topology="stump", seed=0)
    model = keras.Sequential([keras.Input((5,)), layer])
    heap = from_end_to_end(layer)
    np.testing.assert_allclose(heap.predict(x), model.predict(x, verbose=0), atol=1e-6)
    padded = pad_to_perfect(heap, 3)
    np.testing.assert_allclose(padded.predict(x), model.predict(x, verbose=0), atol=1e-6)
