"""Single trees print as the smallest tree that predicts the same.

``Forest.prune`` removes splits no input can flip (exact: the same prediction
for every input inside the bounds) and, given rows, splits that send all of
them one way (the same prediction on those rows); split text says how many
terms an oblique split has; ``plot_tree`` labels every split it draws.
"""

import pickle

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.tree import DecisionTreeClassifier

from keras_trees import Forest, topology
from keras_trees.interop import from_sklearn
from keras_trees.inspection import export_text


def wine_padded():
    """A depth-3 CART of wine padded to a perfect depth-8 tree of zero splits
    (the form a non-greedy tree trains)."""
    x, y = load_wine(return_X_y=True)
    cart = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)
    forest = from_sklearn(cart).pad_to_perfect(8)
    return x, y, cart, forest


def test_a_padded_tree_prunes_exactly_to_its_source_and_to_its_reach():
    x, y, cart, forest = wine_padded()
    assert len(export_text(forest).splitlines()) == 2 * 255 + 256  # every zero split printed
    exact = forest.prune()
    assert exact.num_leaves()[0] == cart.get_n_leaves() and exact.tree_depths()[0] == cart.get_depth()
    rng = np.random.default_rng(0)
    z = x[rng.integers(0, len(x), 3000)] + rng.normal(size=(3000, x.shape[1])) * x.std(0)
    np.testing.assert_array_equal(exact.predict(z), forest.predict(z))  # exact everywhere
    reach = forest.prune(x)
    assert len(export_text(reach).splitlines()) < 40
    np.testing.assert_array_equal(reach.predict(x), forest.predict(x))  # the same on the rows
    assert (reach.node_statistics(x)["samples"][0][reach.node_state[0] == topology.LEAF] > 0).all()
    # source_node maps the pruned leaves back to the source's nodes the rows reached (CART's node ids)
    np.testing.assert_array_equal(reach.source_node[0, reach.route(x)[:, 0]],
                                  forest.source_node[0, forest.route(x)[:, 0]])
    np.testing.assert_array_equal(reach.source_node[0, reach.route(x)[:, 0]], cart.apply(x))
    assert reach.extra["pruned"]["by_rows"] and exact.extra["pruned"]["constant"] > 0
    again = Forest.from_dict(pickle.loads(pickle.dumps(reach)).to_dict())
    np.testing.assert_array_equal(again.predict(x), reach.predict(x))


def one_split(weights, bias, input_dim, names=None, binary=None):
    leaves = np.array([[[0.0, 0.0], [0.9, 0.1], [0.2, 0.8]]])
    extra = {} if binary is None else {"feature_scale": [1.0] * input_dim, "binary_features": binary}
    return Forest(node_state=topology.stump(1, 1), split_kind="linear", weights=np.array([[weights]], float),
                  bias=np.array([[bias]], float), leaves=leaves, input_dim=input_dim, num_classes=2,
                  feature_names=names, extra=extra)


def test_a_threshold_no_zero_one_value_crosses_is_a_constant_branch():
    # 1.75*sex=male + 1.004 > 0 for sex=male in {0, 1}: every row goes right
    forest = one_split([1.75, 0.0], 1.004, 2, ["sex=male", "bill"], [["sex", "male"], None])
    pruned = forest.prune(bounds=([0.0, -np.inf], [1.0, np.inf]))
    assert pruned.num_splits()[0] == 0 and pruned.leaves[0, 0].tolist() == [0.2, 0.8]
    assert export_text(pruned).strip() == "|--- class: 1"
    # unbounded, the same split can go either way and stays
    assert forest.prune().num_splits()[0] == 1


def test_one_column_and_one_hot_splits_read_as_conditions_and_oblique_ones_count_their_terms():
    onehot = one_split([-2.0, 0.0], 1.0, 2, ["sex=male", "bill"], [["sex", "male"], None])
    assert export_text(onehot).splitlines()[0] == "|--- sex = male"
    numeric = one_split([0.0, 4.0], -7.0, 2, ["sex=male", "petal_width"], [["sex", "male"], None])
    assert export_text(numeric).splitlines()[0] == "|--- petal_width <= 1.750"
    oblique = one_split([0.5, -0.25, 1.0, 2.0], 0.0, 4)
    assert "+ ... (2 more of 4 terms)" in export_text(oblique, terms=2).splitlines()[0]


def test_plot_tree_labels_the_splits_of_a_deep_oblique_tree():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_trees.inspection import plot_tree

    rng = np.random.default_rng(0)
    state = topology.perfect(1, 5)
    forest = Forest(node_state=state, split_kind="linear", weights=rng.normal(size=(1, 31, 13)),
                    bias=rng.normal(size=(1, 31)), leaves=rng.dirichlet(np.ones(3), (1, 63)), input_dim=13,
                    num_classes=3, feature_names=[f"feature_{j}" for j in range(13)])
    ax = plot_tree(forest)
    texts = [t.get_text() for t in ax.texts]
    labelled = [t for t in texts if "feature_" in t]
    assert len(labelled) == 31, texts  # every split of the drawn tree says what it tests
    plt.close(ax.figure)


@pytest.mark.slow
def test_the_non_greedy_tree_of_wine_prints_as_a_small_tree():
    import pandas as pd

    from keras_trees.estimators import NonGreedyTreeClassifier

    X, y = load_wine(return_X_y=True, as_frame=True)
    est = NonGreedyTreeClassifier(random_state=0).fit(X, y)
    from keras_trees.estimators import _explain

    unpruned = _explain.design_forest(est)
    forest = est.forest_  # pruned exactly and by the training rows' reach
    text = export_text(est)
    assert len(text.splitlines()) < 40 and "0 <= -0.000" not in text, text
    assert forest.num_leaves()[0] < unpruned.num_leaves()[0]
    # Every row that reaches a leaf some training row reached (the training
    # rows, and most others) is predicted as by the unpruned tree.
    rows = est.forest_features(X)
    reached = est._node_samples[0][unpruned.apply(rows)[:, 0]] > 0
    assert reached.mean() >= 0.9
    np.testing.assert_array_equal(forest.predict(rows[reached]), unpruned.predict(rows[reached]))
    assert isinstance(X, pd.DataFrame)


def test_merging_by_class_keeps_the_predicted_class_and_weights_by_the_rows():
    x, y, cart, forest = wine_padded()
    by_class = forest.prune(x, merge="class")
    by_value = forest.prune(x)
    assert by_class.num_leaves()[0] <= by_value.num_leaves()[0]
    np.testing.assert_array_equal(by_class.predict(x).argmax(1), forest.predict(x).argmax(1))
    # two leaves of one class under a split become one, their values weighted by their rows
    state = topology.stump(1, 1)
    stump = Forest(node_state=state, split_kind="axis_aligned", feature=np.array([[0]]), threshold=np.array([[0.0]]),
                   leaves=np.array([[[0.0, 0.0], [0.9, 0.1], [0.6, 0.4]]]), input_dim=1, num_classes=2)
    rows = np.array([[-1.0], [-2.0], [-3.0], [1.0]])
    merged = stump.prune(rows, merge="class")
    assert merged.num_splits()[0] == 0
    np.testing.assert_allclose(merged.leaves[0, 0], [0.75 * 0.9 + 0.25 * 0.6, 0.75 * 0.1 + 0.25 * 0.4])
    assert stump.prune(rows).num_splits()[0] == 1
    with pytest.raises(ValueError, match="merge"):
        stump.prune(merge="leaf")
