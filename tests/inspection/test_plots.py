"""plot_tree draws deep trees: cut with max_depth / max_leaves, no refusal."""

import numpy as np
import pytest

from keras_trees import Forest, topology
from keras_trees.inspection import plot_tree

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def perfect_classifier(depth, p=4, k=3, seed=0):
    rng = np.random.default_rng(seed)
    internal = topology.num_internal(depth)
    leaves = rng.dirichlet(np.ones(k), size=(1, 2 ** depth))
    return Forest(node_state=topology.perfect(1, depth), split_kind="axis_aligned",
                  feature=rng.integers(0, p, (1, internal)), threshold=rng.normal(size=(1, internal)),
                  leaves=np.concatenate([np.zeros((1, internal, k)), leaves], 1), input_dim=p, num_classes=k,
                  feature_names=[f"feature_{j}" for j in range(p)])


@pytest.mark.slow
@pytest.mark.parametrize("depth", [8, 10])
def test_deep_trees_draw(depth, tmp_path):
    forest = perfect_classifier(depth)
    x = np.random.default_rng(1).normal(size=(300, 4))  # most of the 2**depth leaves stay empty
    ax = plot_tree(forest, x=x, class_names=["a", "b", "c"])
    assert isinstance(ax, matplotlib.axes.Axes)
    assert ax.get_title().endswith(f"{2 ** depth} leaves, depth {depth}")
    assert ax.figure.get_size_inches()[0] <= 60
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("feature_") for t in texts)  # the top splits are labelled
    assert "0" not in texts  # empty leaves carry no text
    ax.figure.savefig(tmp_path / "deep.png", dpi=40)
    plt.close("all")


def test_max_depth_and_max_leaves_cut_the_tree():
    forest = perfect_classifier(7)
    x = np.random.default_rng(1).normal(size=(300, 4))
    ax = plot_tree(forest, x=x, max_depth=3)
    assert ax.get_title().endswith("depth 7, drawn to depth 3")
    assert sum(t.get_text() == "..." for t in ax.texts) == 8
    ax = plot_tree(forest, max_leaves=20)  # 16 cut branches fit
    assert ax.get_title().endswith("drawn to depth 4")
    plt.close("all")
