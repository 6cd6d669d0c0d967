"""Export, statistics and plots for every family: the JSON routes like the model."""

import json

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth
from keras_trees.inspection import (
    export_trees,
    predict_exported,
    route_exported,
    to_json,
    tree_statistics,
)
from keras_trees.layers import (
    EndToEndForest,
    EndToEndTree,
    HingeFern,
    HingeForest,
    TreeEnsembleLayer,
)


def _roundtrip(model, x, y=None):
    docs = json.loads(to_json(model, x=x, y=y))
    assert docs == json.loads(json.dumps(export_trees(model, x, y)))
    return docs


def _check_counts(doc, n):
    for tree in doc["trees"]:
        nodes = {node["id"]: node for node in tree["nodes"]}
        assert nodes[0]["samples"] == n
        for node in nodes.values():
            if node["type"] == "split":
                assert nodes[node["left"]]["samples"] + nodes[node["right"]]["samples"] == node["samples"]
            if "class_counts" in node:
                assert sum(node["class_counts"]) == node["samples"]


def test_tree_ensemble_layer_export_routes_like_the_most_probable_leaf(rng):
    x = rng.normal(size=(300, 5)).astype("float32")
    y = rng.integers(0, 3, 300)
    tel = TreeEnsembleLayer(num_trees=3, max_depth=3, units=3, transition_width=0.05)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), tel])
    [doc] = _roundtrip(model, x, y)
    assert doc["family"] == "tree_ensemble" and doc["split_rule"] == "right if value > 0"
    assert doc["input_dim"] == 4 and len(doc["trees"][0]["nodes"]) == 15
    _check_counts(doc, 300)
    features = np.asarray(model.layers[0](x))
    probs = np.asarray(tel.leaf_probabilities(features))
    crisp = probs.max(-1) > 0.5  # the most probable leaf is then on the greedy path
    assert crisp.mean() > 0.9
    expected = probs.argmax(-1) + 2**3 - 1
    np.testing.assert_array_equal(route_exported(doc, features)[crisp], expected[crisp])
    [stats] = tree_statistics(model, x)
    assert stats["leaves"] == [8, 8, 8]
    assert stats["reachable_leaves"] == pytest.approx(tel.mean_reachable_leaves(features), rel=1e-6)
    assert 3 * 3 <= stats["split_evaluations"] <= 3 * 7
    with pytest.raises(ValueError, match="leaf_prediction"):
        predict_exported(doc, features)


@pytest.mark.parametrize("cls", [HingeForest, HingeFern])
def test_hinge_export_routes_like_traverse(rng, cls):
    x = rng.normal(size=(200, 6)).astype("float32")
    layer = cls(num_trees=4, max_depth=3, units=2, reduction="sum", seed=0)
    model = keras.Sequential([keras.Input((6,)), layer])
    [doc] = _roundtrip(model, x)
    assert doc["family"] == ("hinge_fern" if cls is HingeFern else "hinge_forest")
    assert doc["trees"][0]["nodes"][0]["split"]["kind"] == "axis_aligned"
    _check_counts(doc, 200)
    leaves = np.asarray(layer.traverse(x)["leaf"]) + 2**3 - 1
    np.testing.assert_array_equal(route_exported(doc, x), leaves)
    assert tree_statistics(model, x)[0]["split_evaluations"] == pytest.approx(4 * 3)


def grown_tree(rng, max_depth=4, **kwargs):
    x = rng.normal(size=(400, 3)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5)).astype("int32")
    tree = EndToEndTree(max_depth=max_depth, num_classes=3, seed=0, **kwargs)
    model = keras.Sequential([keras.Input((3,)), tree])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
    g = GreedyLevelGrowth(x, y, epochs_per_level=2, finetune_epochs=1, min_samples_split=60)
    model.fit(x, y, batch_size=100, epochs=g.max_epochs(max_depth), verbose=0, callbacks=[g, EMLeafUpdate(x, y)])
    return model, tree, x, y


@pytest.mark.slow
def test_grown_end_to_end_tree_export_predicts_like_the_model(rng):
    model, tree, x, y = grown_tree(rng)
    [doc] = _roundtrip(model, x, y)
    assert doc["family"] == "end_to_end_tree" and doc["leaf_prediction"]
    state = np.asarray(tree.node_state)
    assert len(doc["trees"][0]["nodes"]) == int((state[0] != topology.ABSENT).sum())
    assert doc["trees"][0]["num_leaves"] == tree.num_leaves()
    _check_counts(doc, 400)
    np.testing.assert_array_equal(route_exported(doc, x), np.asarray(tree.route(x)))
    np.testing.assert_allclose(predict_exported(doc, x), model.predict(x, verbose=0), rtol=1e-6)
    [stats] = tree_statistics(model, x)
    assert stats["split_evaluations"] == pytest.approx(tree.split_evaluations(x))
    assert stats["leaves"] == [tree.num_leaves()]


def test_forest_export_with_feature_subsets(rng):
    x = rng.normal(size=(100, 6)).astype("float32")
    forest = EndToEndForest(num_trees=3, max_depth=3, num_classes=2, features_per_split=2, seed=0)
    model = keras.Sequential([keras.Input((6,)), forest])
    [doc] = _roundtrip(model, x)
    assert doc["family"] == "end_to_end_forest" and doc["num_trees"] == 3
    weights = np.asarray(doc["trees"][1]["nodes"][0]["split"]["weights"])
    assert (weights != 0).sum() == 2
    np.testing.assert_array_equal(route_exported(doc, x), np.asarray(forest.route(x)))
    np.testing.assert_allclose(predict_exported(doc, x), model.predict(x, verbose=0), rtol=1e-6)


@pytest.mark.slow
def test_export_needs_a_tree_layer_and_matching_data(rng):
    with pytest.raises(ValueError, match="no keras-trees tree layer"):
        export_trees(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
    model, tree, x, y = grown_tree(rng, max_depth=2)
    with pytest.raises(ValueError, match="but y has"):
        export_trees(model, x, y[:-1])
    [doc] = export_trees(model)
    assert "samples" not in doc["trees"][0]["nodes"][0]
    with pytest.raises(ValueError, match="3 columns"):
        route_exported(doc, x[:, :2])


@pytest.mark.slow
def test_plots_for_every_family(rng, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from keras_trees.inspection import plot_decision_regions, plot_split_weights, plot_tree

    model, tree, x, y = grown_tree(rng, max_depth=3)
    [doc] = export_trees(model, x, y)
    ax = plot_tree(doc, class_names=["a", "b", "c"])
    ax.figure.savefig(tmp_path / "tree.png")
    assert plot_tree(tree.to_forest()).get_title().startswith("end_to_end_tree, tree 0")  # a Forest draws too
    axes = plot_split_weights(doc, (3, 1))
    assert len(axes) == doc["trees"][0]["num_splits"]
    x2 = rng.normal(size=(100, 2)).astype("float32")
    model2 = keras.Sequential([keras.Input((2,)), EndToEndTree(max_depth=2, num_classes=2, seed=0)])
    plot_decision_regions(model2, x2, (x2[:, 0] > 0).astype(int), resolution=20).figure.savefig(tmp_path / "r.png")
    for layer in (TreeEnsembleLayer(2, 2, 2), HingeForest(2, 2, 2, reduction="mean", seed=0)):
        m = keras.Sequential([keras.Input((4,)), layer])
        [d] = export_trees(m, rng.normal(size=(20, 4)).astype("float32"))
        plot_tree(d, tree=1).figure.savefig(tmp_path / f"{d['family']}.png")
    assert (tmp_path / "tree.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="image_shape"):
        plot_split_weights(doc, (2, 2))


@pytest.mark.slow
def test_grown_convex_polytope_tree_export_predicts_like_the_model(rng):
    from keras_trees.layers import ConvexPolytopeTree

    x = rng.uniform(-1, 1, size=(300, 2)).astype("float32")
    r = np.linalg.norm(x, axis=1)
    y = ((r > 0.4) & (r < 0.8)).astype("int32")
    tree = ConvexPolytopeTree(max_depth=2, num_experts=4, num_classes=2, seed=0)
    tree.fit_greedy(x, y, epochs=3)
    model = keras.Sequential([keras.Input((2,)), tree])
    [doc] = _roundtrip(model, x, y)
    assert doc["family"] == "convex_polytope_tree" and doc["trees"][0]["num_splits"] >= 1
    assert doc["trees"][0]["nodes"][0]["split"]["kind"] == "noisy_or"
    _check_counts(doc, 300)
    np.testing.assert_array_equal(route_exported(doc, x), np.asarray(tree.route(x)))
    np.testing.assert_allclose(predict_exported(doc, x), model.predict(x, verbose=0), rtol=1e-6)
    _plot_runs(doc, image_shape=(2, 1))


def _plot_runs(doc, image_shape):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_trees.inspection import plot_split_weights, plot_tree

    ax = plot_tree(doc)
    assert len(ax.patches) >= doc["trees"][0]["num_leaves"]  # one box per leaf
    assert len(plot_split_weights(doc, image_shape)) == min(12, doc["trees"][0]["num_splits"])
    plt.close("all")


def test_non_greedy_tree_export_predicts_like_the_model(rng):
    from sklearn.tree import DecisionTreeClassifier

    from keras_trees.interop.sklearn import from_sklearn
    from keras_trees.layers import NonGreedyTree

    x = rng.normal(size=(200, 4)).astype("float32")
    y = (np.digitize(x[:, 0] + x[:, 1], [-0.5, 0.5])).astype("int32")
    model = NonGreedyTree(max_depth=3, num_classes=3, nu=2.0)
    model.initialize_from(from_sklearn(DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)))
    [doc] = _roundtrip(model, x, y)
    assert doc["family"] == "non_greedy_tree" and doc["num_trees"] == 1
    _check_counts(doc, 200)
    np.testing.assert_array_equal(route_exported(doc, x), np.asarray(model.route(x)))
    np.testing.assert_allclose(predict_exported(doc, x), model.predict(x, verbose=0), rtol=1e-5, atol=1e-7)
    assert tree_statistics(model, x)[0]["split_evaluations"] == pytest.approx(3.0)
    _plot_runs(doc, image_shape=(2, 2))


def test_export_of_a_tree_behind_a_split_feature_extractor(rng):
    x = rng.normal(size=(50, 5)).astype("float32")
    tree = EndToEndTree(max_depth=2, num_classes=2, split_features=keras.layers.Dense(3), seed=0)
    model = keras.Sequential([keras.Input((5,)), tree])
    [doc] = export_trees(model, x)
    assert doc["input_dim"] == 3 and doc["inputs"].startswith("split_features")
    _check_counts(doc, 50)
    features = np.asarray(tree.features(x, training=False))
    np.testing.assert_array_equal(route_exported(doc, features), np.asarray(tree.route(x)))


def test_former_names_of_the_view_api(rng):
    import keras_trees
    from keras_trees import inspection

    layer = EndToEndTree(max_depth=2, num_classes=2, seed=0)
    layer(rng.normal(size=(2, 3)).astype("float32"))
    with pytest.warns(DeprecationWarning, match="keras_trees.Forest"):
        assert inspection.ForestView is keras_trees.Forest
    with pytest.warns(DeprecationWarning, match="to_forest"):
        forest = inspection.view(layer)
    np.testing.assert_array_equal(forest.node_state, layer.to_forest().node_state)
    with pytest.raises(AttributeError, match="to_forest"):
        _ = inspection.register_family
