"""keras_trees.Forest: the one trained-tree value type, and every layer's to_forest()."""

import dataclasses
import json

import keras
import numpy as np
import pytest

from keras_trees import Forest, topology
from keras_trees.layers import (
    ConvexPolytopeTree,
    EndToEndForest,
    EndToEndTree,
    HingeFern,
    HingeForest,
    NonGreedyTree,
    TreeEnsembleLayer,
)


# ------------------------------------------------------------ hand-built trees
def unbalanced(**kwargs):
    """Root: x0 > 0 goes right; left is leaf 1; right splits on x1 > 1 into leaves 5, 6."""
    state = topology.split_leaf(topology.stump(1, 2), 0, 2)
    leaves = np.zeros((1, 7, 2))
    leaves[0, 1], leaves[0, 5], leaves[0, 6] = [1, 0], [0.5, 0.5], [0, 1]
    args = dict(node_state=state, split_kind="axis_aligned", feature=[[0, 0, 1]], threshold=[[0.0, 0.0, 1.0]],
                leaves=leaves, input_dim=2, num_classes=2, family="hand_built")
    args.update(kwargs)
    return Forest(**args)


X = np.array([[-1.0, 5.0], [0.0, 0.0], [2.0, 0.5], [2.0, 1.0], [0.5, 3.0]])
LEAVES = [1, 1, 5, 5, 6]  # ties (value exactly 0) go left


def test_route_apply_decision_path_and_predict_of_a_hand_built_tree():
    forest = unbalanced()
    assert forest.num_trees == 1 and forest.max_depth == 2 and forest.output_dim == 2
    np.testing.assert_array_equal(forest.route(X)[:, 0], LEAVES)
    np.testing.assert_array_equal(forest.apply(X), forest.route(X))
    path = forest.decision_path(X)[:, 0]
    np.testing.assert_array_equal(path, [[0, 1, -1], [0, 1, -1], [0, 2, 5], [0, 2, 5], [0, 2, 6]])
    np.testing.assert_allclose(forest.predict(X), [[1, 0], [1, 0], [0.5, 0.5], [0.5, 0.5], [0, 1]])
    assert forest.tree_depths().tolist() == [2] and forest.num_leaves().tolist() == [3]
    assert "num_trees=1" in repr(forest) and "axis_aligned" in repr(forest)


def test_split_kinds_and_signs_agree():
    axis = unbalanced()
    w, b = axis.linear_form()
    np.testing.assert_array_equal(w[0, 2], [0, 1])
    np.testing.assert_array_equal(b[0], [0, 0, -1])
    linear = unbalanced(split_kind="linear", weights=w, bias=b, feature=None, threshold=None)
    negative = unbalanced(split_kind="linear", weights=-w, bias=-b, right_if="negative",
                          feature=None, threshold=None)
    x = np.random.default_rng(0).normal(size=(200, 2)) * 2
    for other in (linear, negative):
        np.testing.assert_array_equal(other.route(x), axis.route(x))
        np.testing.assert_array_equal(other.linear_form()[0], w)
    # a noisy-OR split: right iff 2 * softplus(x0 - x1) - 1 > 0
    noisy = Forest(node_state=topology.stump(1, 1), split_kind="noisy_or", weights=[[[[1.0, -1.0]]]],
                   bias=[[[0.0]]], expert_weights=[[[2.0]]], threshold=[[1.0]],
                   leaves=[[[0.0], [-1.0], [1.0]]], input_dim=2)
    right = 2 * np.logaddexp(0, x[:, 0] - x[:, 1]) - 1 > 0
    np.testing.assert_array_equal(noisy.route(x)[:, 0], np.where(right, 2, 1))
    with pytest.raises(ValueError, match="no linear form"):
        noisy.linear_form()


def test_forests_aggregate_and_split_into_trees():
    one = unbalanced()
    two = Forest(node_state=np.concatenate([one.node_state, topology.perfect(1, 2)]), split_kind="axis_aligned",
                 feature=[[0, 0, 1], [1, 1, 1]], threshold=[[0, 0, 1], [0, -1, 1]],
                 leaves=np.concatenate([one.leaves, np.full((1, 7, 2), 0.25)]), input_dim=2, aggregation="sum")
    assert two.num_trees == 2
    np.testing.assert_allclose(two.predict(X), one.predict(X) + 0.25)
    for aggregation, expected in (("mean", (one.predict(X) + 0.25) / 2), ("none", None)):
        out = dataclasses.replace(two, aggregation=aggregation).predict(X)
        if expected is None:
            assert out.shape == (len(X), 2, 2)
        else:
            np.testing.assert_allclose(out, expected)
    first = two.tree(0)
    np.testing.assert_array_equal(first.route(X)[:, 0], LEAVES)
    np.testing.assert_array_equal(two.tree(-1).route(X)[:, 0], two.route(X)[:, 1])
    np.testing.assert_array_equal(two.tree(-2).route(X)[:, 0], LEAVES)  # Python's negative indexing
    for bad in (2, -3, 0.5, True):
        with pytest.raises(ValueError, match=r"tree index i must be an integer in \[-2, 2\) \(negative: counted"):
            two.tree(bad)


def test_node_statistics_counts_add_up():
    forest = unbalanced()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 2)) * 2
    y = rng.integers(0, 2, 500)
    stats = forest.node_statistics(x, y)
    samples, classes = stats["samples"][0], stats["class_counts"][0]
    assert samples[0] == 500 and samples[0] == samples[1] + samples[2] and samples[2] == samples[5] + samples[6]
    assert samples[3] == samples[4] == 0
    np.testing.assert_array_equal(classes.sum(-1), samples)
    leaf = forest.route(x)[:, 0]
    np.testing.assert_array_equal(classes[5], np.bincount(y[leaf == 5], minlength=2))
    target = rng.normal(size=(500, 3))
    means = dataclasses.replace(forest, num_classes=None).node_statistics(x, target)["target_mean"][0]
    np.testing.assert_allclose(means[6], target[leaf == 6].mean(0))
    np.testing.assert_allclose(means[0], target.mean(0))
    assert np.isnan(means[3]).all()
    assert set(forest.node_statistics(x)) == {"samples"}


def test_dict_round_trip_through_json():
    forest = unbalanced(feature_names=["a", "b"], source_node=[[0, 1, 2, -1, -1, 3, 4]], extra={"k": 1})
    doc = json.loads(json.dumps(forest.to_dict(X, [0, 1, 1, 0, 1])))
    assert doc["num_classes"] == 2 and doc["feature_names"] == ["a", "b"]
    assert doc["trees"][0]["nodes"][0]["samples"] == len(X)
    back = Forest.from_dict(doc)
    for name in ("node_state", "feature", "threshold", "leaves", "source_node"):
        np.testing.assert_array_equal(getattr(back, name), getattr(forest, name))
    for name in ("split_kind", "right_if", "aggregation", "family", "leaf_output", "inputs",
                 "leaf_prediction", "num_classes", "feature_names", "extra", "input_dim"):
        assert getattr(back, name) == getattr(forest, name), name
    assert back.to_dict() == forest.to_dict()
    # documents written before split_kind, num_classes and feature_names existed
    for key in ("split_kind", "num_classes", "feature_names"):
        del doc[key]
    np.testing.assert_array_equal(Forest.from_dict(doc).route(X), forest.route(X))
    with pytest.raises(ValueError, match="format"):
        Forest.from_dict({"format": "something else"})


def test_pad_to_perfect_keeps_routing_to_values():
    forest = unbalanced(source_node=[[0, 1, 2, -1, -1, 3, 4]])
    padded = forest.pad_to_perfect(3)
    np.testing.assert_array_equal(padded.node_state, topology.perfect(1, 3))
    x = np.random.default_rng(2).normal(size=(300, 2)) * 2
    np.testing.assert_allclose(padded.predict(x), forest.predict(x))
    reached = forest.source_node[0, forest.route(x)[:, 0]]
    np.testing.assert_array_equal(padded.source_node[0, padded.route(x)[:, 0]], reached)
    with pytest.raises(ValueError, match="more than the requested depth"):
        forest.pad_to_perfect(1)


def test_bad_input_names_the_argument():
    forest = unbalanced()
    with pytest.raises(ValueError, match="x must have 2 columns"):
        forest.route(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="x must have shape"):
        forest.predict(np.zeros(2))
    with pytest.raises(ValueError, match="NaN or Inf"):
        forest.apply([[np.nan, 0.0]])
    with pytest.raises(ValueError, match="but y has"):
        forest.node_statistics(X, [0, 1])
    with pytest.raises(ValueError, match="labels must lie"):
        forest.node_statistics(X, [0, 1, 2, 0, 1])
    for kwargs, match in (
        (dict(split_kind="oblique"), "split_kind must be one of"),
        (dict(aggregation="max"), "aggregation must be one of"),
        (dict(right_if="left"), "right_if must be one of"),
        (dict(node_state=np.array([[2, 1, 0, 0, 0, 0, 0]])), "position 2"),
        (dict(threshold=[[0.0, 1.0]]), "threshold must have shape"),
        (dict(feature=[[0, 0, 2]]), "feature ids"),
        (dict(leaves=np.zeros((1, 3, 2))), "leaves must have shape"),
        (dict(input_dim=0), "input_dim"),
        (dict(num_classes=3), "num_classes"),
        (dict(feature_names=["a"]), "feature_names"),
        (dict(split_kind="linear"), "weights is required"),
    ):
        with pytest.raises(ValueError, match=match):
            unbalanced(**kwargs)


# ------------------------------------------------------------- every family
def _data(rng, n=300, p=4):
    return rng.normal(size=(n, p)).astype("float32")


def test_to_forest_needs_a_built_layer():
    with pytest.raises(ValueError, match="not built"):
        EndToEndTree(max_depth=2, num_classes=2).to_forest()


def test_tree_ensemble_layer_forest_routes_to_the_certain_leaf(rng):
    x = _data(rng)
    layer = TreeEnsembleLayer(num_trees=3, max_depth=3, units=2, transition_width=1e-3)
    layer(x[:1])
    forest = layer.to_forest()
    assert forest.split_kind == "linear" and forest.right_if == "positive" and not forest.leaf_prediction
    probs = np.asarray(layer.leaf_probabilities(x))
    certain = probs.max(-1) == 1.0  # smooth-step routing is hard outside +-transition_width/2
    assert certain.mean() > 0.95
    np.testing.assert_array_equal(forest.route(x)[certain], (probs.argmax(-1) + 7)[certain])
    rows = certain.all(1)  # there the layer's output is the sum of the reached leaves
    np.testing.assert_allclose(forest.predict(x)[rows], np.asarray(layer(x))[rows], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [HingeForest, HingeFern])
def test_hinge_forest_routes_like_traverse(rng, cls):
    x = _data(rng)
    layer = cls(num_trees=4, max_depth=3, units=2, reduction="sum", seed=0)
    layer(x[:1])
    forest = layer.to_forest()
    assert forest.split_kind == "axis_aligned" and forest.aggregation == "sum" and not forest.leaf_prediction
    np.testing.assert_array_equal(forest.route(x), np.asarray(layer.traverse(x)["leaf"]) + 7)
    np.testing.assert_array_equal(layer.forest_features(x[None]), x)


@pytest.mark.parametrize("cls, kwargs", [
    (EndToEndTree, dict(max_depth=4, num_classes=3)),
    (EndToEndForest, dict(num_trees=3, max_depth=3, units=2, features_per_split=2)),
    (EndToEndTree, dict(max_depth=3, num_classes=2, split_type="axis_aligned")),
])
def test_end_to_end_forest_routes_and_predicts_like_the_layer(rng, cls, kwargs):
    x = _data(rng)
    layer = cls(seed=0, **kwargs)
    model = keras.Sequential([keras.Input((4,)), layer])
    forest = layer.to_forest()
    assert forest.leaf_prediction and forest.num_trees == layer.num_trees
    np.testing.assert_array_equal(forest.route(x), np.asarray(layer.route(x)))
    np.testing.assert_allclose(forest.predict(x), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


def test_end_to_end_soft_inference_and_split_features(rng):
    x = rng.normal(size=(50, 6)).astype("float32")
    soft = EndToEndTree(max_depth=2, num_classes=2, inference_routing="soft", seed=0)
    soft(x[:1])
    assert not soft.to_forest().leaf_prediction
    tree = EndToEndTree(max_depth=2, num_classes=2, split_features=keras.layers.Dense(3), seed=0)
    model = keras.Sequential([keras.Input((6,)), tree])
    forest = tree.to_forest()
    features = tree.forest_features(x)
    assert forest.input_dim == 3 and features.shape == (50, 3)
    np.testing.assert_array_equal(forest.route(features), np.asarray(tree.route(x)))
    np.testing.assert_allclose(forest.predict(features), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


def test_convex_polytope_tree_forest_routes_and_predicts_like_the_layer(rng):
    x = _data(rng)
    tree = ConvexPolytopeTree(max_depth=3, num_experts=3, num_classes=3, seed=0)
    model = keras.Sequential([keras.Input((4,)), tree])
    tree.node_state.assign(topology.perfect(1, 3))  # every split of the random experts in use
    tree.threshold.assign(np.median(np.asarray(tree.split_values(x)), axis=0)[None])  # halves at each split
    values = rng.dirichlet(np.ones(3), size=(1, 15)).astype("float32")
    tree.leaf_values.assign(values)
    forest = tree.to_forest()
    assert forest.split_kind == "noisy_or" and forest.leaf_prediction
    node = np.asarray(tree.route(x))
    assert len(np.unique(node)) >= 4
    np.testing.assert_array_equal(forest.route(x), node)
    np.testing.assert_allclose(forest.predict(x), model.predict(x, verbose=0), rtol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(num_classes=3), dict(units=2)])
def test_non_greedy_tree_forest_routes_and_predicts_like_the_model(rng, kwargs):
    x = _data(rng)
    model = NonGreedyTree(max_depth=3, nu=2.0, seed=0, **kwargs)
    model.build((None, 4))
    model.leaf_values.assign(rng.normal(size=(8, model.output_dim)).astype("float32"))
    forest = model.to_forest()
    assert forest.num_trees == 1 and forest.leaf_prediction
    np.testing.assert_array_equal(forest.route(x), np.asarray(model.route(x)))
    np.testing.assert_allclose(forest.predict(x), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    # the forest initializes another tree with the same predictions
    again = NonGreedyTree(max_depth=3, nu=2.0, **kwargs)
    again.initialize_from(forest)
    np.testing.assert_array_equal(np.asarray(again.route(x)), np.asarray(model.route(x)))


def test_node_sums_counts_and_subtree_totals():
    from keras_trees.forest import node_sums

    # tree 0: the root and its left child split (leaves 2, 3, 4); tree 1: a stump (leaves 1, 2)
    leaf = np.array([[3, 1], [4, 2], [2, 2], [3, 1]])
    values = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    weights = np.array([1.0, 2.0, 3.0, 0.5])
    sums = node_sums(leaf, values, 7, weights)
    assert sums.shape == (2, 7, 2)
    np.testing.assert_allclose(sums[0, 3], [1.0, 0.5])
    np.testing.assert_allclose(sums[1, 2], [3.0, 2.0])
    totals = node_sums(leaf, values, 7, weights, subtrees=True)
    np.testing.assert_allclose(totals[0, 1], sums[0, 3] + sums[0, 4])
    np.testing.assert_allclose(totals[:, 0], values.T @ weights * np.ones((2, 1)))
    np.testing.assert_allclose(node_sums(leaf[:, 0], values, 7), node_sums(leaf, values, 7)[0])
