"""Importances, rules, node statistics and plots over a stream of batches: the same
results as over arrays (with and without sample weights), summed over
(simulated) workers; the functions that need arrays in memory refuse a stream
with a TypeError naming the argument."""

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.inspection import (
    export_text,
    feature_importances,
    hard_forest,
    layer_statistics,
    permutation_importance,
    plot_decision_regions,
    plot_tree,
    routing_sensitivity,
)
from keras_trees.layers import EndToEndTree, TreeEnsembleLayer
from tests._streams import as_sources, lockstep_workers, two_workers

sklearn_tree = pytest.importorskip("sklearn.tree")
from keras_trees.interop import from_sklearn  # noqa: E402


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32") * np.array([1.0, 3.0, 0.5, 2.0], "float32") + 1.5
    y = ((x[:, 2] - 1.5) * 2 + 0.3 * (x[:, 0] - 1.5) + 0.3 * rng.normal(size=n) > 0).astype("int32") \
        + (x[:, 1] > 4).astype("int32")
    w = rng.integers(0, 4, size=n).astype("float64")  # integer weights: repeated rows (0: left out)
    return x, y, w


def linear_forest(units=None):
    """The linear splits of an end-to-end tree (unbalanced: paths of different lengths)."""
    keras.utils.set_random_seed(0)
    layer = EndToEndTree(max_depth=3, num_classes=None if units else 3, units=units, seed=0)
    keras.Sequential([keras.Input((4,)), layer])
    state = topology.root_leaf(1, 3)
    for node in (0, 2, 5):
        state = topology.split_leaf(state, 0, node)
    layer.node_state.assign(state)
    return layer.to_forest()


def cases():
    x, y, w = data()
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=4, random_state=0).fit(x, y)
    reg = sklearn_tree.DecisionTreeRegressor(max_depth=4, random_state=0).fit(x, x[:, 1] * 2 + x[:, 3])
    return {
        "axis_aligned gini": (from_sklearn(cart), y, dict(kind="gain")),
        "axis_aligned entropy": (from_sklearn(cart), y, dict(kind="gain", criterion="entropy")),
        "axis_aligned usage": (from_sklearn(cart), y, dict()),
        "regression": (from_sklearn(reg), np.stack([x[:, 1] * 2 + x[:, 3], x[:, 0]], 1), dict(kind="gain")),
        "linear usage": (linear_forest(), y, dict()),
        "linear gain": (linear_forest(), y, dict(kind="gain")),
        # leaves that are not class distributions, integer labels: max(y) + 1 classes over all the data
        "linear inferred classes": (linear_forest(units=2), y, dict(kind="gain", criterion="gini")),
        "linear regression": (linear_forest(units=2), x[:, :2] * 3.0, dict(kind="gain")),
    }


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("case", list(cases()))
def test_streamed_feature_importances_equal_those_of_arrays(case, weighted):
    x, _, w = data()
    forest, y, kwargs = cases()[case]
    if "classes" in case:
        order = np.argsort(y, kind="stable")  # the largest class appears in the last batches only
        x, y, w = x[order], y[order], w[order]
    w = w if weighted else None
    expected = feature_importances(forest, x, y, sample_weight=w, **kwargs)
    assert expected.sum() == pytest.approx(1.0) and (expected > 0).sum() >= 2
    for kind, source in as_sources(x, y, w, batch=64).items():
        np.testing.assert_allclose(feature_importances(forest, source, **kwargs), expected,
                                   rtol=1e-9, atol=1e-12, err_msg=kind)
    if weighted:  # integer weights are repeated rows
        rows = np.repeat(np.arange(len(x)), w.astype(int))
        np.testing.assert_allclose(feature_importances(forest, x[rows], y[rows], **kwargs), expected,
                                   rtol=1e-9, atol=1e-12)
        assert not np.allclose(feature_importances(forest, x, y, **kwargs), expected, rtol=1e-6, atol=0)


def test_weighted_gain_is_sklearns_feature_importances_with_sample_weight():
    x, y, w = data()
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=4, random_state=0).fit(x, y, sample_weight=w)
    forest = from_sklearn(cart)
    np.testing.assert_allclose(feature_importances(forest, x, y, kind="gain", sample_weight=w),
                               cart.feature_importances_, atol=1e-10)
    np.testing.assert_allclose(feature_importances(forest, as_sources(x, y, w)["dataset"], kind="gain"),
                               cart.feature_importances_, atol=1e-10)


@pytest.mark.parametrize("case", ["linear inferred classes", "regression", "linear usage"])
def test_streamed_feature_importances_of_two_workers_equal_one_worker(monkeypatch, case):
    x, _, w = data()
    forest, y, kwargs = cases()[case]
    if y.ndim == 1:
        # Only worker 1 (batches 1 and 3 of 64 rows) sees the largest class: worker 0 pads its class
        # counts to the width the workers agree on. (The simulation gives worker 1, which runs first,
        # its own width back: so the workers' widths agree only when worker 1 holds the largest class.)
        order = np.argsort(y, kind="stable")
        top = int((y == y.max()).sum())
        order = np.concatenate([order[:64], order[-top:], order[64:-top]])
        x, y, w = x[order], y[order], w[order]
        assert y.max() in y[64:128] and y.max() not in np.concatenate([y[:64], y[128:192], y[256:]])
    expected = feature_importances(forest, x, y, sample_weight=w, **kwargs)
    source = as_sources(x, y, w, batch=64)["list"]
    got, local, summed = two_workers(monkeypatch, lambda: feature_importances(forest, source, **kwargs),
                                     lambda: None)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    # worker 1 reads batches 1 and 3 of 5: its root holds its own weight only
    share = w[64:128].sum() + w[192:256].sum()
    assert local[-1][0][0, 0] == pytest.approx(share) and summed[-1][0][0, 0] == pytest.approx(w.sum())


def test_streamed_feature_importances_of_lockstep_workers(monkeypatch):
    x, _, w = data()
    forest, y, kwargs = cases()["linear inferred classes"]
    order = np.argsort(y, kind="stable")  # worker 0 alone reads the largest class (the last batch)
    x, y, w = x[order], y[order], w[order]
    expected = feature_importances(forest, x, y, sample_weight=w, **kwargs)
    source = as_sources(x, y, w, batch=64)["dataset"]
    got, calls = lockstep_workers(monkeypatch, lambda: feature_importances(forest, source, **kwargs))
    for result in got:
        np.testing.assert_allclose(result, expected, rtol=1e-9, atol=1e-12)
    assert [float(c[1][0].max()) for c in calls[:1]] == [y.max()]  # worker 1 knows max(y) classes only
    assert calls[0][0][0].max() == y.max() + 1


def test_streamed_feature_importances_bad_input():
    x, y, w = data()
    forest = linear_forest()
    with pytest.raises(ValueError, match="labels and weights are in the batches"):
        feature_importances(forest, as_sources(x, y)["list"], y, kind="gain")
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        feature_importances(forest, x, y, sample_weight=w[:-1])
    with pytest.raises(ValueError, match="nonnegative"):
        feature_importances(forest, x, y, sample_weight=-w)
    with pytest.raises(ValueError, match="empty"):
        feature_importances(forest, as_sources(x, y, np.zeros(len(y)))["list"])


def soft_layer():
    keras.utils.set_random_seed(1)
    layer = TreeEnsembleLayer(num_trees=3, max_depth=2, units=2)
    keras.Sequential([keras.Input((4,)), layer])
    return layer


@pytest.mark.parametrize("weighted", [False, True])
def test_streamed_routing_sensitivity_equals_that_of_arrays(weighted):
    x, y, w = data(n=200)
    w = w if weighted else None
    layer = soft_layer()
    expected = routing_sensitivity(layer, x, step=0.05, sample_weight=w)
    assert expected.sum() == pytest.approx(1.0) and (expected > 0).all()
    for kind, source in as_sources(x, y, w, batch=64).items():
        np.testing.assert_allclose(routing_sensitivity(layer, source, step=0.05), expected, rtol=2e-4,
                                   err_msg=kind)
    if weighted:  # integer weights are repeated rows
        rows = np.repeat(np.arange(len(x)), w.astype(int))
        np.testing.assert_allclose(routing_sensitivity(layer, x[rows], step=0.05), expected, rtol=2e-4)


def test_streamed_routing_sensitivity_of_two_workers_equals_one_worker(monkeypatch):
    x, y, w = data(n=200)
    layer = soft_layer()
    expected = routing_sensitivity(layer, x, step=0.05, sample_weight=w)
    source = as_sources(x, y, w, batch=64)["list"]
    # Two passes (the steps h need every worker's moments): the workers run in lockstep.
    got, calls = lockstep_workers(monkeypatch, lambda: routing_sensitivity(layer, source, step=0.05))
    for result in got:
        np.testing.assert_allclose(result, expected, rtol=2e-4)
    assert len(calls) == 3  # the feature count, the moments, the derivative sums
    assert calls[-1][1][1][0] == pytest.approx(w[64:128].sum() + w[192:].sum())  # worker 1's weight
    assert calls[-1][0][1][0] + calls[-1][1][1][0] == pytest.approx(w.sum())


def test_streamed_routing_sensitivity_reads_a_generator_once_only():
    x, y, _ = data(n=64)
    gen = (batch for batch in as_sources(x, y)["list"])
    with pytest.raises(ValueError, match="one-shot iterator"):
        routing_sensitivity(soft_layer(), gen)


def test_streamed_export_text_counts_equal_those_of_arrays(monkeypatch):
    x, y, _ = data()
    forest = from_sklearn(sklearn_tree.DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y))
    expected = export_text(forest, x=x)
    assert "(samples: " in expected
    for kind, source in as_sources(x, y).items():
        assert export_text(forest, x=source) == expected, kind
    got, local, _ = two_workers(monkeypatch, lambda: export_text(forest, x=as_sources(x, y, batch=64)["list"]),
                                lambda: None)
    assert got == expected
    assert local[0][0][0, 0] == 128  # worker 1's root: its two batches


def test_array_only_functions_refuse_a_stream():
    x, y, _ = data(n=64)
    source = as_sources(x, y)["dataset"]
    forest = from_sklearn(sklearn_tree.DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, y))
    layer = soft_layer()
    calls = {
        "permutation_importance": lambda: permutation_importance(forest, source, None),
        "hard_forest": lambda: hard_forest(layer, source),
        "plot_decision_regions": lambda: plot_decision_regions(forest, source),
        "layer_statistics": lambda: layer_statistics(layer, source),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=f"{name} needs arrays in memory: .*(x|features) is a stream"):
            call()


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_streamed_node_statistics_equal_those_of_arrays(monkeypatch, task):
    x, y, w = data()
    if task == "classification":
        forest = from_sklearn(sklearn_tree.DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y))
        key = "class_counts"
    else:
        y = np.stack([x[:, 0] * 2, x[:, 1]], 1)
        forest = linear_forest(units=2)
        key = "target_mean"
    expected = forest.node_statistics(x, y)
    assert key in expected
    for kind, source in as_sources(x, y, w, batch=64).items():  # weights are not used
        got = forest.node_statistics(source)
        np.testing.assert_array_equal(got["samples"], expected["samples"], err_msg=kind)
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-9, err_msg=kind)
        assert forest.to_dict(source)["trees"] == forest.to_dict(x, y)["trees"]
    got, calls = lockstep_workers(monkeypatch, lambda: forest.node_statistics(as_sources(x, y, batch=64)["dataset"]))
    for result in got:
        np.testing.assert_array_equal(result["samples"], expected["samples"])
        np.testing.assert_allclose(result[key], expected[key], rtol=1e-9)
    assert calls[-1][1][0][0, 0] == 128  # worker 1's root: its two batches
    with pytest.raises(ValueError, match="y must be None"):
        forest.node_statistics(as_sources(x, y)["list"], y)


def test_plot_tree_of_a_stream():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    x, y, _ = data()
    forest = from_sklearn(sklearn_tree.DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y))
    texts = lambda ax: sorted(t.get_text() for t in ax.texts)  # noqa: E731
    expected = texts(plot_tree(forest, x=x, y=y))
    assert sum(int(t) for t in expected if t.isdigit()) == len(x)  # the leaves' sample counts are drawn
    assert texts(plot_tree(forest, x=as_sources(x, y)["dataset"])) == expected
