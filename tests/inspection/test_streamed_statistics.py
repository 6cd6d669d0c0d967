"""tree_statistics over a stream of batches: the same means as over arrays,
and summed over (simulated) workers."""

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.inspection import tree_statistics
from keras_trees.layers import EndToEndTree, TreeEnsembleLayer
from tests._streams import as_sources, two_workers


def model_and_data(n=150, units=None):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    keras.utils.set_random_seed(0)
    grown = EndToEndTree(max_depth=3, num_classes=None if units else 2, units=units, seed=0, name="hard")
    soft = TreeEnsembleLayer(2, 3, 2, name="soft")
    inputs = keras.Input((3,))
    model = keras.Model(inputs, [grown(inputs), soft(inputs)])
    # An unbalanced topology: samples take paths of different lengths.
    state = topology.root_leaf(1, 3)
    state = topology.split_leaf(state, 0, 0)
    state = topology.split_leaf(state, 0, 2)
    grown.node_state.assign(state)
    return model, x, y


def test_streamed_tree_statistics_equal_those_of_arrays():
    model, x, y = model_and_data()
    expected = tree_statistics(model, x)
    evals = [s["split_evaluations"] for s in expected]
    assert 1.0 < evals[0] < 2.0  # means over samples of different path lengths: the test can fail
    for kind, data in as_sources(x, y, batch=32).items():
        got = tree_statistics(model, data)
        assert [set(s) for s in got] == [set(s) for s in expected]
        for g, e in zip(got, expected):
            for key in ("split_evaluations", "reachable_leaves"):
                if key in e:
                    assert g[key] == pytest.approx(e[key], rel=1e-6), (kind, key)
            assert g["leaves"] == e["leaves"]
    with pytest.raises(ValueError, match="tree_statistics: the data is empty"):
        tree_statistics(model, lambda: iter([]))


def test_streamed_tree_statistics_of_two_workers_sum_to_one_worker(monkeypatch):
    model, x, y = model_and_data()
    expected = tree_statistics(model, x)
    got, local, summed = two_workers(monkeypatch, lambda: tree_statistics(model, as_sources(x, y)["list"]),
                                     lambda: None)
    for g, e in zip(got, expected):
        assert g["split_evaluations"] == pytest.approx(e["split_evaluations"], rel=1e-6)
    assert 0 < local[0][0][0, 2] < summed[0][0][0, 2] == len(x)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_streamed_export_trees_counts_equal_those_of_arrays(task):
    from keras_trees.inspection import export_trees

    model, x, y = model_and_data(units=2 if task == "regression" else None)
    if task == "regression":
        y = np.stack([x[:, 0], x[:, 1] * 2], 1).astype("float32")
    expected = export_trees(model, x, y)
    keys = ("samples", "class_counts") if task == "classification" else ("samples", "target_mean")
    assert any(keys[1] in node for node in expected[0]["trees"][0]["nodes"])
    for kind, data in as_sources(x, y, batch=32).items():
        got = export_trees(model, data, feature_names=["a", "b", "c"])
        for g, e in zip(got, expected):
            assert g["feature_names"] == ["a", "b", "c"]
            for gt, et in zip(g["trees"], e["trees"]):
                assert [n["id"] for n in gt["nodes"]] == [n["id"] for n in et["nodes"]]
                for gn, en in zip(gt["nodes"], et["nodes"]):
                    assert gn["samples"] == en["samples"], kind
                    for key in keys[1:]:
                        assert (key in gn) == (key in en)
                        if key in en:
                            np.testing.assert_allclose(gn[key], en[key], rtol=1e-6, err_msg=kind)


def test_streamed_export_of_two_workers_sums_to_one_worker(monkeypatch):
    from keras_trees.inspection import export_trees

    model, x, y = model_and_data()
    expected = export_trees(model, x, y)
    got, local, _ = two_workers(monkeypatch, lambda: export_trees(model, as_sources(x, y)["list"]), lambda: None)
    assert got[0]["trees"] == expected[0]["trees"]
    assert 0 < local[0][0][0, 0] < len(x)  # worker 1's root count: its share only
