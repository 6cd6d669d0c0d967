"""Feature importances: split usage and gain for every family with splits,
routing sensitivity for soft layers, permutation importance for any model."""

import keras
import numpy as np
import pytest

from keras_trees.inspection import (
    feature_importances,
    permutation_importance,
    routing_sensitivity,
)
from keras_trees.layers import (
    ConvexPolytopeTree,
    EndToEndTree,
    HingeForest,
    NonGreedyTree,
    TreeEnsembleLayer,
)

sklearn_tree = pytest.importorskip("sklearn.tree")
from keras_trees.interop import from_sklearn  # noqa: E402

DECIDING = 2  # the feature that decides the label


@pytest.fixture(scope="module")
def data():
    x = np.random.default_rng(0).normal(size=(600, 4)).astype("float32")
    return x, (x[:, DECIDING] > 0.2).astype("int32")


def _check(importance, p=4):
    assert importance.shape == (p,)
    assert importance.sum() == pytest.approx(1.0)
    assert (importance >= -1e-12).all()
    assert int(np.argmax(importance)) == DECIDING


@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_gain_of_a_converted_sklearn_tree_is_sklearns_feature_importances(criterion):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(800, 5)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] + 0.3 * rng.normal(size=800) > 0).astype(int) + (x[:, 3] > 1)
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=6, criterion=criterion, random_state=0).fit(x, y)
    forest = from_sklearn(cart)
    gain = feature_importances(forest, x, y, kind="gain", criterion=criterion)
    np.testing.assert_allclose(gain, cart.feature_importances_, atol=1e-10)
    usage = feature_importances(forest, x)
    assert usage.sum() == pytest.approx(1.0) and usage.argmax() == 0
    unweighted = feature_importances(forest)  # splits counted once each
    np.testing.assert_allclose(unweighted * forest.num_splits()[0],
                               np.bincount(cart.tree_.feature[cart.tree_.feature >= 0], minlength=5))


def test_gain_of_a_regressor_is_sklearns_feature_importances():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 3))
    y = np.sin(2 * x[:, 1]) + 0.1 * x[:, 0]
    reg = sklearn_tree.DecisionTreeRegressor(max_depth=5, random_state=0).fit(x, y)
    gain = feature_importances(reg, x, y, kind="gain")  # a fitted sklearn tree converts itself
    np.testing.assert_allclose(gain, reg.feature_importances_, atol=1e-10)


def test_sklearn_forest_and_split_usage_pick_the_deciding_feature(data):
    x, y = data
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)
    for kind in ("split_usage", "gain"):
        _check(feature_importances(from_sklearn(cart), x, y, kind=kind))


@pytest.mark.slow
def test_end_to_end_tree(data):
    x, y = data
    tree = EndToEndTree(max_depth=2, num_classes=2, seed=0)
    model = keras.Sequential([keras.Input((4,)), tree])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
    model.fit(x, y, batch_size=100, epochs=15, verbose=0)
    forest = tree.to_forest()
    for kind in ("split_usage", "gain"):
        _check(feature_importances(forest, x, y, kind=kind))
    _check(feature_importances(tree))  # |weights| alone, no data


@pytest.mark.slow
def test_non_greedy_tree(data):
    x, y = data
    model = NonGreedyTree(max_depth=3, num_classes=2, nu=2.0)
    model.initialize_from(from_sklearn(sklearn_tree.DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, y)))
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9))
    model.fit(x, y, batch_size=100, epochs=3, verbose=0)
    for kind in ("split_usage", "gain"):
        _check(feature_importances(model.to_forest(), x, y, kind=kind))


@pytest.mark.slow
def test_convex_polytope_tree(data):
    x, y = data
    tree = ConvexPolytopeTree(max_depth=2, num_experts=3, num_classes=2, seed=0)
    keras.Sequential([keras.Input((4,)), tree])
    tree.fit_greedy(x, y, epochs=10, batch_size=200, learning_rate=0.05)
    forest = tree.to_forest()
    assert forest.split_kind == "noisy_or"
    for kind in ("split_usage", "gain"):
        _check(feature_importances(forest, x, y, kind=kind))


@pytest.mark.slow
@pytest.mark.parametrize("layer", [
    lambda: TreeEnsembleLayer(num_trees=4, max_depth=2, units=2),
    lambda: HingeForest(num_trees=8, max_depth=2, units=2, reduction="sum", seed=0),
])
def test_routing_sensitivity_of_soft_layers(data, layer):
    x, y = data
    layer = layer()
    model = keras.Sequential([keras.Input((4,)), layer])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=100, epochs=10, verbose=0)
    _check(routing_sensitivity(layer, x))
    np.testing.assert_allclose(routing_sensitivity(model, x[:200]), routing_sensitivity(layer, x[:200]), rtol=1e-4)


@pytest.mark.slow
def test_permutation_importance_of_any_model(data):
    x, y = data
    y = np.where(np.random.default_rng(3).random(len(y)) < 0.1, 1 - y, y)  # 10% label noise
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)
    forest = from_sklearn(cart)
    for model in (cart, forest, forest.predict):  # predict() / predict_proba-like scores / a callable
        result = permutation_importance(model, x, y, n_repeats=3)
        assert result["importances"].shape == (4, 3)
        assert int(np.argmax(result["importances_mean"])) == DECIDING
        assert result["baseline"] == pytest.approx((cart.predict(x) == y).mean())
    again = permutation_importance(forest, x, y, n_repeats=3)
    np.testing.assert_array_equal(again["importances"], result["importances"])  # seeded
    keras_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    keras_model.layers[0].set_weights([np.eye(4)[:, DECIDING:DECIDING + 1] * 10, np.array([-2.0])])
    result = permutation_importance(keras_model, x, y, n_repeats=2)  # one probability per sample
    assert int(np.argmax(result["importances_mean"])) == DECIDING and result["baseline"] > 0.85
    neg_mse = permutation_importance(forest, x, y, metric=lambda t, p: -np.mean((p[:, 1] - t) ** 2), n_repeats=2)
    assert int(np.argmax(neg_mse["importances_mean"])) == DECIDING


def test_bad_arguments(data):
    x, y = data
    forest = from_sklearn(sklearn_tree.DecisionTreeClassifier(max_depth=2).fit(x, y))
    with pytest.raises(ValueError, match="kind must be"):
        feature_importances(forest, kind="shap")
    with pytest.raises(ValueError, match="needs samples x and labels y"):
        feature_importances(forest, x, kind="gain")
    with pytest.raises(ValueError, match="squared_error"):
        feature_importances(forest, x, y, kind="gain", criterion="squared_error")
    with pytest.raises(TypeError, match="Forest"):
        feature_importances("tree")
