"""Feature names from feature_names= or a pandas DataFrame's columns, into
exports, rules, plots and importances."""

import json
import warnings

import keras
import numpy as np
import pytest

from keras_trees import Forest
from keras_trees.inspection import export_text, export_trees, permutation_importance, to_json
from keras_trees.inspection.names import as_forest, resolve
from keras_trees.layers import EndToEndTree, TreeEnsembleLayer

pd = pytest.importorskip("pandas")
sklearn_tree = pytest.importorskip("sklearn.tree")
from keras_trees.interop import from_sklearn  # noqa: E402


@pytest.fixture(scope="module")
def frame():
    x = np.random.default_rng(0).normal(size=(200, 3)).astype("float32")
    return pd.DataFrame(x, columns=["age", "income", "height"]), (x[:, 1] > 0).astype(int)


def test_resolve_order():
    forest = from_sklearn(sklearn_tree.DecisionTreeRegressor(max_depth=1).fit([[0.0, 1.0], [1.0, 0.0]], [0.0, 1.0]))
    assert resolve(2) == ["x[0]", "x[1]"]
    forest.feature_names = ["f", "g"]
    assert resolve(2, forest=forest) == ["f", "g"]
    assert resolve(2, x=pd.DataFrame([[1, 2]], columns=["a", "b"]), forest=forest) == ["a", "b"]
    assert resolve(2, ["u", "v"], pd.DataFrame([[1, 2]], columns=["a", "b"]), forest) == ["u", "v"]
    with pytest.raises(ValueError, match="must hold 2 names"):
        resolve(2, ["u"])


def test_a_dataframe_names_rules_and_exports(frame):
    x, y = frame
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, y)
    forest = from_sklearn(cart)  # sklearn kept the columns (feature_names_in_)
    assert forest.feature_names == ["age", "income", "height"]
    assert export_text(forest).startswith("|--- income <= ")
    anonymous = Forest.from_dict({**forest.to_dict(), "feature_names": None})
    assert export_text(anonymous).startswith("|--- x[1] <= ")
    assert export_text(anonymous, x=x).startswith("|--- income <= ")  # from the DataFrame
    assert export_text(anonymous, feature_names=["a", "b", "c"], x=x).startswith("|--- b <= ")


def test_export_trees_names_the_layers_that_read_the_model_inputs(frame):
    x, y = frame
    first = EndToEndTree(max_depth=2, num_classes=2, seed=0)
    model = keras.Sequential([keras.Input((3,)), first])
    [doc] = export_trees(model, x, y)
    assert doc["feature_names"] == ["age", "income", "height"] and doc["trees"][0]["nodes"][0]["samples"] == 200
    [doc] = json.loads(to_json(model, feature_names=["a", "b", "c"]))
    assert doc["feature_names"] == ["a", "b", "c"]
    deeper = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), TreeEnsembleLayer(2, 2, 2)])
    [doc] = export_trees(deeper, x)  # its splits read the Dense outputs: no names
    assert doc["feature_names"] is None


def test_permutation_importance_keeps_the_dataframe(frame):
    x, y = frame
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sklearn sees the columns it was fitted with: no warning
        result = permutation_importance(cart, x, y, n_repeats=2)
    assert result["feature_names"] == ["age", "income", "height"]
    assert int(np.argmax(result["importances_mean"])) == 1


def test_as_forest_takes_what_inspection_reads():
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=1).fit([[0.0], [1.0]], [0, 1])
    forest = as_forest(cart)
    assert as_forest(forest) is forest and as_forest(forest.to_dict()).num_splits()[0] == 1
    with pytest.raises(TypeError, match="expected a Forest"):
        as_forest([1, 2])
