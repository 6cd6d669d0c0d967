"""co2_tree: the greedy oblique (CO2) initialization of non-greedy trees."""

import numpy as np
import pytest

sklearn_tree = pytest.importorskip("sklearn.tree")

from keras_trees import topology  # noqa: E402
from keras_trees.layers import NonGreedyTree, co2_tree  # noqa: E402
from keras_trees.layers._co2 import optimize_stumps  # noqa: E402


def oblique(n=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    return x, (x[:, 0] + x[:, 1] > 0).astype(int)


def reference_bound(x, y, weight, row, theta_left, theta_right):
    """The depth-1 bound of Eq. 7 per sample, written out, weighted mean."""
    total = 0.0
    for xi, yi, wi in zip(x, y, weight):
        s = float(np.dot(row[:-1], xi) + row[-1])
        loss = [-(t[yi] - np.log(np.exp(t).sum())) for t in (theta_left, theta_right)]
        total += wi * (max(-s + loss[0], s + loss[1]) - abs(s))
    return total / weight.sum()


def test_optimized_stump_bounds_never_exceed_the_cart_initialized_ones():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 4))
    y = (x[:, 0] - x[:, 2] > 0.3).astype(int) + (x[:, 1] > 0.5)
    weight = rng.uniform(0.5, 2.0, size=300)
    node = np.repeat(np.arange(3), 100)  # three nodes of one level, samples sorted by node
    rows, thetas = [], []
    for j in range(3):
        members = node == j
        cart = sklearn_tree.DecisionTreeClassifier(max_depth=1, criterion="entropy", random_state=0)
        tree = cart.fit(x[members], y[members]).tree_
        row = np.zeros(5)
        row[tree.feature[0]], row[4] = 1.0, -tree.threshold[0]
        rows.append(4.0 * row / np.linalg.norm(row))
        thetas.append(rng.normal(size=(2, 3)))
    rows, thetas = np.array(rows), np.array(thetas)
    xt = np.concatenate([x, np.ones((300, 1))], axis=1)
    out, tl, tr, before, after = optimize_stumps(xt, y, weight, np.array([0, 100, 200]), rows, thetas[:, 0],
                                                 thetas[:, 1], nu=4.0, steps=60, learning_rate=0.4)
    for j in range(3):
        members = node == j
        assert before[j] == pytest.approx(reference_bound(x[members], y[members], weight[members], rows[j],
                                                          *thetas[j]))
        assert after[j] == pytest.approx(reference_bound(x[members], y[members], weight[members], out[j],
                                                         tl[j], tr[j]))
    assert np.all(after <= before + 1e-12)
    assert np.any(after < before - 1e-3)  # the optimization moved something
    assert np.all(np.linalg.norm(out, axis=1) <= 4.0 * (1 + 1e-12))  # projected onto ||[w, b]|| <= nu


def test_co2_beats_cart_on_an_oblique_problem_and_nongreedy_tree_routes_as_the_forest():
    x, y = oblique()
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=2, criterion="entropy", random_state=0).fit(x, y)
    tree = co2_tree(x, y, max_depth=2, nu=4.0, steps=100, random_state=0)
    accuracy = (tree.predict(x).argmax(1) == y).mean()
    assert accuracy >= cart.score(x, y) + 0.05 and accuracy > 0.95, (accuracy, cart.score(x, y))
    assert tree.num_classes == 2 and tree.split_kind == "linear"
    model = NonGreedyTree(max_depth=3, num_classes=2, nu=4.0)  # deeper: padded
    model.initialize_from(tree)
    x32 = x.astype("float32")
    padded = tree.pad_to_perfect(3)
    np.testing.assert_array_equal(np.asarray(model.route(x32))[:, 0], padded.apply(x32)[:, 0])
    np.testing.assert_array_equal(model.predict(x32, verbose=0).argmax(1), tree.predict(x).argmax(1))


def test_without_steps_it_is_the_cart_tree_and_leaves_are_class_frequencies():
    x, y = oblique(300, seed=2)
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=3, criterion="entropy", random_state=0).fit(x, y)
    tree = co2_tree(x, y, max_depth=3, steps=0, random_state=0)
    np.testing.assert_array_equal(tree.predict(x).argmax(1), cart.predict(x))
    np.testing.assert_allclose(tree.predict(x), cart.predict_proba(x))
    assert tree.num_leaves()[0] == cart.get_n_leaves()


def test_deterministic_with_a_seed_and_weights_matter():
    x, y = oblique(200, seed=3)
    a = co2_tree(x, y, max_depth=3, nu=2.0, steps=30, random_state=5)
    b = co2_tree(x, y, max_depth=3, nu=2.0, steps=30, random_state=5)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.leaves, b.leaves)
    weight = np.where(y == 1, 5.0, 1.0)
    c = co2_tree(x, y, max_depth=3, nu=2.0, steps=30, random_state=5, sample_weight=weight)
    assert not np.array_equal(a.leaves, c.leaves)


def test_pure_and_small_nodes_stay_leaves():
    x, y = oblique(200, seed=4)
    assert co2_tree(x, np.zeros(200, int), max_depth=3).num_leaves()[0] == 1
    tree = co2_tree(x[:5], y[:5], max_depth=4, min_samples_split=6)
    assert tree.node_state[0, 0] == topology.LEAF
    tree = co2_tree(x, y, max_depth=2, num_classes=4)
    assert tree.output_dim == 4


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(max_depth=0), ValueError, "max_depth"),
    (dict(max_depth=2.5), TypeError, "max_depth"),
    (dict(max_depth=21), ValueError, "max_depth"),
    (dict(nu=0.0), ValueError, "nu"),
    (dict(nu="big"), TypeError, "nu"),
    (dict(steps=-1), ValueError, "steps"),
    (dict(learning_rate=-0.1), ValueError, "learning_rate"),
    (dict(momentum=1.0), ValueError, "momentum"),
    (dict(criterion="mse"), ValueError, "criterion"),
    (dict(min_samples_split=1), ValueError, "min_samples_split"),
    (dict(random_state=-1), ValueError, "random_state"),
    (dict(random_state=1.5), TypeError, "random_state"),
    (dict(sample_weight=np.ones(3)), ValueError, "sample_weight"),
    (dict(sample_weight=-np.ones(50)), ValueError, "sample_weight"),
    (dict(num_classes=1), ValueError, "y"),
    (dict(x=np.full((50, 2), np.nan)), ValueError, "x"),
    (dict(x=np.ones(50)), ValueError, "x"),
    (dict(x=np.array([["a"] * 2] * 50)), TypeError, "x"),
    (dict(y=np.zeros(49, int)), ValueError, "y"),
    (dict(y=np.full(50, 0.5)), ValueError, "y"),
])
def test_bad_arguments(kwargs, error, match):
    x, y = oblique(50, seed=5)
    arguments = dict(x=x[:, :2], y=y, max_depth=2)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        co2_tree(**arguments)
