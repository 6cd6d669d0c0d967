"""hard_forest: the hard view of soft layers and its measured agreement."""

import keras
import numpy as np
import pytest

from keras_trees.inspection import hard_forest
from keras_trees.inspection.extraction import agreement
from keras_trees.layers import HingeFern, HingeForest, TreeEnsembleLayer


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).normal(size=(400, 5)).astype("float32")


def test_an_effectively_hard_tree_ensemble_agrees_fully(x):
    tel = TreeEnsembleLayer(num_trees=3, max_depth=3, units=4, transition_width=1e-5)
    result = hard_forest(tel, x)
    assert result["task"] == "classification" and result["agreement"] == 1.0
    np.testing.assert_allclose(result["hard"], result["soft"], atol=1e-4)  # the same function
    assert result["forest"].family == "tree_ensemble"


def test_a_soft_tree_ensemble_in_a_model(x):
    tel = TreeEnsembleLayer(num_trees=3, max_depth=3, units=1, transition_width=5.0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), tel])
    result = hard_forest(model, x)
    assert result["task"] == "regression"
    assert -np.inf < result["r2"] <= 1.0 and -1.0 <= result["correlation"] <= 1.0
    assert result["soft"].shape == result["hard"].shape == (400, 1)
    assert hard_forest(model, x, task="classification")["agreement"] <= 1.0
    crisp = hard_forest(TreeEnsembleLayer(num_trees=3, max_depth=3, units=1, transition_width=1e-5), x)
    assert crisp["r2"] == pytest.approx(1.0) and crisp["correlation"] == pytest.approx(1.0)


@pytest.mark.parametrize("cls,reduction", [(HingeForest, "sum"), (HingeFern, "none")])
def test_hinge_layers(x, cls, reduction):
    layer = cls(num_trees=4, max_depth=3, units=3, reduction=reduction, seed=0)
    model = keras.Sequential([keras.Input((5,)), layer])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.MeanSquaredError())
    target = x[:, :3] if reduction == "sum" else np.repeat(x[:, None, :3], 4, 1)  # per tree for "none"
    model.fit(x, target, epochs=2, verbose=0)
    raw = hard_forest(model, x)
    assert 0.0 <= raw["agreement"] <= 1.0
    np.testing.assert_allclose(raw["hard"], raw["forest"].predict(x).reshape(-1, 3))
    # the routing is the layer's own: the raw hard forest reaches the leaves traverse() reports
    np.testing.assert_array_equal(raw["forest"].route(x), np.asarray(layer.traverse(x)["leaf"]) + 2**3 - 1)


def test_agreement_measures():
    soft = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    assert agreement(soft, soft[:, ::-1])["agreement"] == 0.0
    assert agreement(soft, soft + 1)["agreement"] == 1.0
    assert agreement(soft[:, :1] - 0.5, soft[:, 1:] - 0.5, task="classification")["agreement"] == 0.0
    reg = agreement(soft[:, :1], soft[:, :1])
    assert reg == {"task": "regression", "agreement": 1.0, "r2": 1.0, "correlation": pytest.approx(1.0)}
    with pytest.raises(ValueError, match="task must be"):
        agreement(soft, soft, task="ranking")
    with pytest.raises(ValueError, match="differ in shape"):
        agreement(soft, soft[:, :1])


def test_a_model_with_two_tree_layers_needs_layer(x):
    first, second = TreeEnsembleLayer(2, 2, 3), TreeEnsembleLayer(2, 2, 3)
    model = keras.Sequential([keras.Input((5,)), first, second])
    with pytest.raises(ValueError, match="pass layer="):
        hard_forest(model, x)
    assert hard_forest(model, x, layer=second)["forest"].input_dim == 3
