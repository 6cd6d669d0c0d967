"""Bad inputs to the tools around the layers (forests, exported documents,
scikit-learn conversion, inspection, export, callbacks, HyperModels): a clear
``ValueError``/``TypeError`` naming the argument, never NumPy wrap-around, a
raw ``KeyError``/``IndexError``/reshape error, or a terabyte allocation."""

import copy

import keras
import numpy as np
import pytest

import keras_trees
from keras_trees import Forest, inspection, interop, topology
from keras_trees.callbacks import (
    EMLeafUpdate, GreedyLevelGrowth, PolytopeAnnealing, PolytopeLeafUpdate, SteepnessAnnealing, StableSGD,
)
from keras_trees.forest import node_sums
from keras_trees.layers import ConvexPolytopeTree, EndToEndTree, NonGreedyTree, TreeEnsembleLayer

X = np.random.default_rng(0).normal(size=(24, 3)).astype("float32")
Y = (X[:, 0] > 0).astype("int32")


def _tree_model():
    return keras.Sequential([keras.Input((3,)), EndToEndTree(max_depth=2, num_classes=2, seed=0)])


def _stump(**kwargs):
    fields = dict(node_state=topology.stump(1, 1), split_kind="axis_aligned", feature=np.array([[1]]),
                  threshold=np.array([[0.5]]), leaves=np.array([[[0.0], [-1.0], [1.0]]]), input_dim=2)
    fields.update(kwargs)
    return Forest(**fields)


class _ChainTree:
    """The ``tree_`` arrays of a scikit-learn tree that is a chain of ``depth`` splits."""

    def __init__(self, depth):
        n = 2 * depth + 1
        self.node_count, self.n_features = n, 1
        self.children_left, self.children_right = np.full(n, -1), np.full(n, -1)
        self.children_left[0:-1:2] = np.arange(1, n, 2)
        self.children_right[0:-1:2] = np.arange(2, n + 1, 2)
        self.feature = np.zeros(n, np.int64)
        self.threshold = np.arange(n, dtype=np.float64)
        self.value = np.ones((n, 1, 1))


# ------------------------------------------------------------------ labels
def test_string_labels_are_a_type_error_naming_labels():
    with pytest.raises(TypeError, match="labels must be integer class ids"):
        inspection.export_trees(_tree_model(), X, np.array(["a", "b"] * 12))


@pytest.mark.parametrize("labels", [Y - 1, Y + 2, Y + 0.5, np.full(24, 2**32 + 1, np.int64)],
                         ids=["negative", "too_large", "fractional", "int64_beyond_int32"])
def test_labels_out_of_range_are_refused_not_wrapped(labels):
    with pytest.raises(ValueError, match=r"y: labels must"):
        inspection.export_trees(_tree_model(), X, labels)


def test_scalar_labels_are_a_value_error():
    with pytest.raises(ValueError, match="y must have one entry per sample"):
        inspection.export_trees(_tree_model(), X, 1)


def test_empty_batch_exports_zero_counts():
    doc = inspection.export_trees(_tree_model(), X[:0], Y[:0])[0]
    assert all(node["samples"] == 0 for node in doc["trees"][0]["nodes"])
    assert all(sum(node["class_counts"]) == 0 for node in doc["trees"][0]["nodes"])


def test_refit_leaves_checks_labels_before_use():
    tree = NonGreedyTree(max_depth=2, num_classes=2)
    tree(X[:2])
    with pytest.raises(ValueError, match="refit_leaves: labels must lie in"):
        tree.refit_leaves(X, -Y)
    with pytest.raises(TypeError, match="refit_leaves: labels must be integer class ids"):
        tree.refit_leaves(X, Y.astype(str))


def test_regression_targets_are_checked():
    forest = _stump()
    with pytest.raises(TypeError, match="targets must be numbers"):
        forest.node_statistics(np.zeros((2, 2)), np.array(["a", "b"]))
    with pytest.raises(ValueError, match="targets contain NaN"):
        forest.node_statistics(np.zeros((2, 2)), np.array([0.0, np.nan]))


def test_gain_importances_check_labels_before_counting_classes():
    with pytest.raises(ValueError, match="labels must lie in"):
        inspection.feature_importances(_stump(), np.zeros((3, 2)), np.array([0, -1, 1]), kind="gain",
                                       criterion="gini")


def test_node_sums_refuses_positions_outside_the_heap():
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 3\)"):
        node_sums(np.array([0, -1]), np.ones(2), 3)
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 3\)"):
        node_sums(np.array([0, 3]), np.ones(2), 3)


# ------------------------------------------------------------------ forests
def test_forest_refuses_non_finite_parameters_and_fractional_feature_ids():
    with pytest.raises(ValueError, match="threshold contains NaN or Inf"):
        _stump(threshold=np.array([[np.nan]]))
    with pytest.raises(ValueError, match="leaves contains NaN or Inf"):
        _stump(leaves=np.array([[[0.0], [np.inf], [1.0]]]))
    with pytest.raises(ValueError, match="feature must hold integer ids"):
        _stump(feature=np.array([[1.5]]))
    with pytest.raises(TypeError, match="leaves must hold numbers"):
        _stump(leaves=np.array([[["a"], ["b"], ["c"]]]))


def test_route_of_an_empty_batch():
    assert _stump().route(np.zeros((0, 2))).shape == (0, 1)


def test_topology_route_checks_its_arguments():
    with pytest.raises(ValueError, match=r"split_values must have shape \(batch, num_internal=1\)"):
        topology.route(topology.stump(1, 1)[0], np.zeros((4, 2)))
    with pytest.raises(ValueError, match="no root"):
        topology.route(np.zeros(3, np.int32), np.zeros((4, 1)))


def test_pad_to_perfect_refuses_a_depth_that_cannot_fit_in_memory():
    with pytest.raises(ValueError, match=r"pad_to_perfect: max_depth=45 would need about .* TiB"):
        _stump().pad_to_perfect(45)


# ---------------------------------------------------------------- documents
def _doc():
    return inspection.export_trees(_tree_model())[0]


def _set(path, value):
    def mutate(doc):
        *parents, last = path
        target = doc
        for key in parents:
            target = target[key]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
    return mutate


_DELETE = object()
_MALFORMED = {
    "split_rule_not_a_rule": (_set(["split_rule"], 1), r'doc\["split_rule"\] must be one of'),
    "missing_num_trees": (_set(["num_trees"], _DELETE), r"missing the field\(s\) \['num_trees'\]"),
    "fractional_max_depth": (_set(["max_depth"], 1.5), r'doc\["max_depth"\] must be an integer'),
    "trees_not_a_list": (_set(["trees"], {"0": {}}), r'doc\["trees"\] must be a list of num_trees=1'),
    "too_few_trees": (_set(["num_trees"], 2), r'doc\["trees"\] must be a list of num_trees=2'),
    "tree_without_nodes": (_set(["trees", 0], {"index": 0}), r'doc\["trees"\]\[0\] must be a dict with a list'),
    "node_id_out_of_heap": (_set(["trees", 0, "nodes", 0, "id"], 99), r'\["id"\] must lie in \[0, 7\)'),
    "node_without_type": (_set(["trees", 0, "nodes", 0, "type"], _DELETE), r'missing "type"'),
    "unknown_node_type": (_set(["trees", 0, "nodes", 0, "type"], "branch"), r'must be "leaf" or "split"'),
    "split_weights_wrong_length": (_set(["trees", 0, "nodes", 0, "split", "weights"], [1.0]),
                                   r'\["weights"\] must be numbers of shape \(3,\)'),
    "split_without_bias": (_set(["trees", 0, "nodes", 0, "split", "bias"], _DELETE), r'missing "bias"'),
    "unknown_split_field": (_set(["trees", 0, "nodes", 0, "split", "gain"], 1.0), r"unknown field\(s\) \['gain'\]"),
    "leaf_value_not_numbers": (_set(["trees", 0, "nodes", -1, "value"], "a"), r'\["value"\] must be numbers'),
    "missing_child": (_set(["trees", 0, "nodes", -1], _DELETE), "doc does not describe a valid forest"),
    "huge_max_depth": (_set(["max_depth"], 40), r"doc: max_depth=40 would need about .* TiB"),
}


@pytest.mark.parametrize("name", sorted(_MALFORMED))
def test_malformed_document_is_a_clear_value_error(name):
    mutate, message = _MALFORMED[name]
    doc = copy.deepcopy(_doc())
    mutate(doc)
    with pytest.raises(ValueError, match=message):
        inspection.route_exported(doc, X)


def test_document_that_is_not_a_dict_is_a_type_error():
    with pytest.raises(TypeError, match="doc must be a dict of an exported tree layer"):
        inspection.route_exported(inspection.export_trees(_tree_model()), X)


def test_document_round_trip_still_routes():
    model = _tree_model()
    doc = inspection.export_trees(model)[0]
    np.testing.assert_array_equal(inspection.route_exported(doc, X), model.layers[0].to_forest().route(X))


# ------------------------------------------------------------------ sklearn
def test_from_sklearn_refuses_a_heap_that_cannot_fit_before_allocating():
    with pytest.raises(ValueError, match=r"from_sklearn: max_depth=40 would need about .* TiB.*max_depth <= \d+"):
        interop.from_sklearn(_ChainTree(40))
    forest = interop.from_sklearn(_ChainTree(40), max_depth=6)  # truncated: fits
    assert forest.max_depth == 6


def test_from_sklearn_checks_the_tree_arrays():
    tree = _ChainTree(3)
    tree.feature = np.full(tree.node_count, 5)
    with pytest.raises(ValueError, match=r"feature ids must lie in \[0, n_features=1\)"):
        interop.from_sklearn(tree)
    with pytest.raises(ValueError, match="max_depth must be an integer"):
        interop.from_sklearn(_ChainTree(3), max_depth="deep")


# --------------------------------------------------------------- inspection
def test_tree_statistics_of_an_empty_batch_is_a_value_error():
    with pytest.raises(ValueError, match="x is an empty batch"):
        inspection.tree_statistics(_tree_model(), X[:0])
    tel = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(2, 2, 3)])
    with pytest.raises(ValueError, match="x is an empty batch"):
        inspection.tree_statistics(tel, X[:0])
    assert inspection.tree_statistics(tel)[0]["leaves"] == [4, 4]  # no x: sizes only


@pytest.mark.parametrize("kwargs, message", [
    ({"n_repeats": 0}, "n_repeats must be >= 1"),
    ({"batch_size": 0}, "batch_size must be >= 1"),
    ({"metric": "accuracy"}, "metric must be a function"),
])
def test_permutation_importance_arguments(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        inspection.permutation_importance(_stump(), np.zeros((4, 2)), np.zeros(4), **kwargs)


def test_routing_sensitivity_and_export_text_arguments():
    with pytest.raises(ValueError, match="step must be a finite number > 0"):
        inspection.routing_sensitivity(_stump(), np.zeros((4, 2)), step=0)
    with pytest.raises(ValueError, match="spacing must be >= 1"):
        inspection.export_text(_stump(), spacing=0)


def test_to_json_path_must_be_a_path():
    # open(3, "w") would write into file descriptor 3.
    with pytest.raises(TypeError, match="path must be a file path"):
        inspection.to_json(_tree_model(), path=3)


def test_plots_check_the_tree_index_and_the_document():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from keras_trees.inspection import plots

    doc = _doc()
    with pytest.raises(ValueError, match=r"tree must be an integer in \[0, 1\)"):
        plots.plot_tree(doc, tree=3)
    with pytest.raises(ValueError, match=r"tree must be an integer in \[0, 1\)"):
        plots.plot_split_weights(doc, (3, 1), tree=1)
    broken = copy.deepcopy(doc)
    broken["trees"][0]["nodes"][0]["id"] = 99
    with pytest.raises(ValueError, match=r'\["id"\] must lie in'):
        plots.plot_tree(broken)


# ------------------------------------------------------------------- export
@pytest.fixture
def tensorflow_backend():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("export_portable writes a TF SavedModel")


def test_export_portable_names_a_wrong_argument(tensorflow_backend, tmp_path):
    with pytest.raises(TypeError, match="model must be a built keras.Model"):
        keras_trees.export_portable("model", str(tmp_path / "p"))
    model = _tree_model()
    with pytest.raises(TypeError, match="filepath must be a path"):
        keras_trees.export_portable(model, 3)


def test_export_portable_refuses_non_finite_weights(tensorflow_backend, tmp_path):
    model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(2, 2, 3, name="tel")])
    model(X)
    weights = model.layers[0].node_weights
    value = keras.ops.convert_to_numpy(weights).copy()
    value.flat[0] = np.nan
    weights.assign(value)
    with pytest.raises(ValueError, match="TreeEnsembleLayer 'tel': variable node_weights contains NaN or Inf"):
        keras_trees.export_portable(model, str(tmp_path / "p"), verbose=False)
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_export_portable_of_a_grown_end_to_end_tree(tensorflow_backend, tmp_path):
    # candidate_gain holds -inf by design ("no candidate"): not a reason to refuse.
    model = _tree_model()
    model(X)
    keras_trees.export_portable(model, str(tmp_path / "p"), verbose=False)


@pytest.mark.slow
def test_portable_saved_model_rejects_nan_inputs(tensorflow_backend, tmp_path):
    import tensorflow as tf

    model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(2, 2, 3)])
    model(X)
    keras_trees.export_portable(model, str(tmp_path / "p"), verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="x contains NaN or Inf"):
        loaded.serve(tf.constant(bad))


# ---------------------------------------------------------------- callbacks
@pytest.mark.parametrize("make, error, message", [
    (lambda: GreedyLevelGrowth(X, Y, epochs_per_level=2.5), TypeError, "epochs_per_level must be an integer"),
    (lambda: GreedyLevelGrowth(X, Y, finetune_epochs=-1), ValueError, "finetune_epochs must be >= 0"),
    (lambda: GreedyLevelGrowth(X, Y, best_first="yes", max_leaves=4), TypeError, "best_first must be True or"),
    (lambda: GreedyLevelGrowth(X, Y, layers=3), TypeError, "layers must be None, a layer name"),
    (lambda: EMLeafUpdate(X, Y, batch_size="big"), TypeError, "batch_size must be an integer"),
    (lambda: EMLeafUpdate(X, 1), ValueError, "EMLeafUpdate: y must hold one entry per training sample"),
    (lambda: SteepnessAnnealing(increment="fast"), TypeError, "increment must be a number"),
    (lambda: SteepnessAnnealing(increment=None), TypeError, "increment must be a number"),
    (lambda: SteepnessAnnealing(max_steepness="high"), TypeError, "max_steepness must be a number"),
    (lambda: PolytopeAnnealing(increment=-0.1), ValueError, "increment must be a finite number >= 0"),
    (lambda: PolytopeLeafUpdate(X, Y, batch_size=0.5), TypeError, "batch_size must be an integer"),
    (lambda: StableSGD(patience=1.5), TypeError, "patience must be an integer"),
    (lambda: StableSGD(min_delta="small"), TypeError, "min_delta must be a number"),
    (lambda: StableSGD(monitor=3), TypeError, "monitor must be the name"),
])
def test_callback_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_stable_sgd_names_a_monitor_missing_from_the_logs():
    callback = StableSGD(monitor="val_bound")
    callback._best, callback._wait, callback._round_epochs = np.inf, 0, 0
    with pytest.raises(ValueError, match="StableSGD: monitor='val_bound' is not in the logs"):
        callback.on_epoch_end(0, {"loss": 1.0})


def test_em_leaf_update_refuses_class_weight_of_unknown_classes():
    model = _tree_model()
    model(X)
    callback = EMLeafUpdate(X, Y, class_weight={5: 2.0})
    callback.set_model(model)
    with pytest.raises(ValueError, match=r"class_weight has class ids \[5\] outside \[0, 2\)"):
        callback.update()


def test_em_leaf_update_checks_labels_before_use():
    model = _tree_model()
    model(X)
    callback = EMLeafUpdate(X, Y - 1)
    callback.set_model(model)
    with pytest.raises(ValueError, match="EMLeafUpdate: labels must lie in"):
        callback.update()


def test_polytope_leaf_update_checks_labels_before_use():
    model = keras.Sequential([keras.Input((3,)), ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=2,
                                                                   seed=0)])
    model(X)
    callback = PolytopeLeafUpdate(X, Y - 1)
    callback.set_model(model)
    with pytest.raises(ValueError, match="PolytopeLeafUpdate: labels must lie in"):
        callback.on_epoch_end(0)


# ------------------------------------------------------------------- tuner
def test_hypermodel_arguments():
    tuner = pytest.importorskip("keras_tuner")  # noqa: F841
    from keras_trees.tuner import TreeEnsembleHyperModel

    with pytest.raises(TypeError, match="max_depth must be an integer"):
        TreeEnsembleHyperModel((3,), num_classes=2, max_depth=2.5)
    with pytest.raises(ValueError, match="max_trees must be >= 1"):
        TreeEnsembleHyperModel((3,), num_classes=2, max_trees=0)
    with pytest.raises(TypeError, match="input_shape must be a tuple"):
        TreeEnsembleHyperModel(3, num_classes=2)
    with pytest.raises(TypeError, match="batch_sizes must be an integer"):
        TreeEnsembleHyperModel((3,), num_classes=2, batch_sizes=(64.5,))


# ------------------------------------------------------------------ losses
@pytest.mark.parametrize("labels", [np.array([0, 2]), np.array([-1, 0]), np.array([0.5, 1.0]),
                                    np.array([0, 2**32 + 1], np.int64)],
                         ids=["too_large", "negative", "fractional", "int64_beyond_int32"])
def test_conditional_entropy_refuses_labels_out_of_range(labels):
    from keras_trees.losses import conditional_entropy

    with pytest.raises(ValueError, match="y_true must"):
        conditional_entropy(labels, np.array([[1.0, 0.0], [0.0, 1.0]]), 2)


def test_conditional_entropy_checks_labels_inside_a_compiled_training_step():
    from keras_trees.losses import ConditionalEntropy

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("sgd", ConditionalEntropy(num_classes=2))
    with pytest.raises(Exception, match=r"y_true must lie in \[0, 2\)"):
        model.fit(X, Y + 1, epochs=1, batch_size=24, verbose=0)


def test_loss_arguments():
    from keras_trees.losses import ConditionalEntropy, GammaProcessPrior

    with pytest.raises(TypeError, match="num_classes must be an integer"):
        ConditionalEntropy(num_classes=2.5)
    with pytest.raises(TypeError, match="gamma0 must be a number"):
        GammaProcessPrior(gamma0="one")
    with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
        GammaProcessPrior(weight=-1.0)
