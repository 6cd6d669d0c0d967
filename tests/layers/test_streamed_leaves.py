"""ConvexPolytopeTree.set_leaves_from_data and NonGreedyTree.refit_leaves from
a stream of batches: the same leaves as from arrays, and summed over
(simulated) workers."""

import numpy as np
import pytest

from keras_trees import topology
from keras_trees.layers import ConvexPolytopeTree
from keras_trees.layers.non_greedy_tree import NonGreedyTree
from tests._streams import as_sources, two_workers


def problem(n=150, seed=0, task="classification"):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3)).astype("int32")
    if task == "regression":
        y = np.stack([x[:, 0] - x[:, 1], x[:, 2]], 1).astype("float32")
    w = rng.uniform(0.2, 3.0, size=n)
    return x, y, w


def polytope(task):
    tree = ConvexPolytopeTree(max_depth=2, num_experts=2, seed=0,
                              **({"num_classes": 3} if task == "classification" else {"units": 2}))
    tree.build((None, 3))
    tree.node_state.assign(topology.perfect(1, 2))
    return tree


def non_greedy(task):
    tree = NonGreedyTree(max_depth=2, nu=1.0, seed=0,
                         **({"num_classes": 3} if task == "classification" else {"units": 2}))
    tree.build((None, 3))
    tree.leaf_values.assign(np.full(tree.leaf_values.shape, 0.5, "float32"))
    return tree


def set_polytope(tree, data, y=None, **kwargs):
    counts = tree.set_leaves_from_data(data, y, **kwargs)
    return np.asarray(tree.leaf_values).copy(), counts


def refit(tree, data, y=None, **kwargs):
    filled = tree.refit_leaves(data, y, **kwargs)
    return np.asarray(tree.leaf_values).copy(), filled


SITES = {"polytope": (polytope, set_polytope), "non_greedy": (non_greedy, refit)}


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("task, weights", [
    ("classification", "none"), ("classification", "sample_weight"), ("classification", "class_weight"),
    ("regression", "none"), ("regression", "sample_weight"),  # class_weight is for classification
])
def test_leaves_from_a_dataset_or_a_list_of_batches_equal_those_from_arrays(site, task, weights):
    make, fit = SITES[site]
    x, y, w = problem(task=task)
    cw = {0: 2.0, 2: 0.25} if weights == "class_weight" else None
    sw = w if weights == "sample_weight" else None
    leaves, out = fit(make(task), x, y, sample_weight=sw, class_weight=cw, batch_size=40)
    reached = leaves[..., 3:, :] if site == "polytope" else leaves
    assert not np.allclose(reached, reached[..., :1, :])  # samples reach different leaves: the test can fail
    for kind, data in as_sources(x, y, sw).items():
        got, got_out = fit(make(task), data, class_weight=cw)
        np.testing.assert_allclose(got, leaves, rtol=1e-5, atol=1e-6, err_msg=kind)
        np.testing.assert_allclose(got_out, out, rtol=1e-6, err_msg=kind)
    if weights != "none":
        plain, _ = fit(make(task), x, y)
        assert not np.allclose(plain, leaves, atol=1e-4)


@pytest.mark.parametrize("site", SITES)
def test_stream_errors_name_the_problem(site):
    make, fit = SITES[site]
    where = "set_leaves_from_data" if site == "polytope" else "refit_leaves"
    x, y, w = problem()
    with pytest.raises(ValueError, match=f"{where}: x is an array, so y"):
        fit(make("classification"), x)
    with pytest.raises(ValueError, match=f"{where}: with a dataset, give sample weights inside its batches"):
        fit(make("classification"), as_sources(x, y)["list"], sample_weight=w)
    with pytest.raises(ValueError, match=f"{where}: sample weights .* must be finite and >= 0"):
        fit(make("classification"), [(x, y, -w)])
    with pytest.raises(ValueError, match=f"{where}: the data holds no samples of positive weight"):
        fit(make("classification"), [(x, y, 0 * w)])
    with pytest.raises(ValueError, match=f"{where}: labels must lie in"):
        fit(make("classification"), [(x, y + 5)])
    with pytest.raises(ValueError, match=f"{where}: class_weight has class"):
        fit(make("classification"), [(x, y)], class_weight={7: 1.0})
    with pytest.raises(ValueError, match="a batch has 150 samples in x but 149 in y"):
        fit(make("classification"), [(x, y[:-1])])
    once = iter([(x, y)])
    fit(make("classification"), once)
    with pytest.raises(ValueError, match="the data holds no samples of positive weight"):
        fit(make("classification"), once)  # a new call reads the exhausted iterator: no samples


def test_set_leaves_from_data_builds_the_layer_from_a_stream():
    x, y, _ = problem()
    tree = ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=3, seed=0)
    counts = tree.set_leaves_from_data(as_sources(x, y)["dataset"])
    assert tree.built and counts[0] == len(x)


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("source", ["arrays", "dataset"])
def test_statistics_of_two_workers_sum_to_the_one_worker_statistics(monkeypatch, site, source):
    make, fit = SITES[site]
    x, y, w = problem()
    expected, _ = fit(make("classification"), x, y, sample_weight=w)
    state = {}

    def reset():
        state["tree"] = make("classification")

    def run():
        if source == "arrays":
            return fit(state["tree"], x, y, sample_weight=w, batch_size=32)
        return fit(state["tree"], as_sources(x, y, w)["dataset"])

    (leaves, _), local, summed = two_workers(monkeypatch, run, reset)
    np.testing.assert_allclose(leaves, expected, rtol=1e-5, atol=1e-6)
    theirs = local[0][-1 if site == "non_greedy" else 0]
    total = summed[0][-1 if site == "non_greedy" else 0]
    assert 0 < theirs.sum() < total.sum()
    weight_of = (lambda s: s[0].sum()) if site == "polytope" else (lambda s: s.sum())
    np.testing.assert_allclose(weight_of(total), w.sum(), rtol=1e-6)
