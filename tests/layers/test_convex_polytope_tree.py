"""ConvexPolytopeTree: greedy growth, leaves, interpretation, callbacks, serialization, errors."""

import numpy as np
import keras
import pytest

from keras_trees import topology
from keras_trees.callbacks.polytope_annealing import PolytopeAnnealing
from keras_trees.callbacks.polytope_leaves import PolytopeLeafUpdate
from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree
from tests.conftest import run_python


def disk_data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2)).astype("float32")
    return x, (np.linalg.norm(x, axis=1) < 0.6).astype("int32")


@pytest.mark.slow
def test_greedy_growth_learns_a_polytope_and_sets_empirical_leaves():
    x, y = disk_data()
    tree = ConvexPolytopeTree(max_depth=3, num_experts=8, num_classes=2, seed=0)
    model = keras.Sequential([keras.Input((2,)), tree])
    history = tree.fit_greedy(x, y, epochs=25, batch_size=200, learning_rate=0.05, min_gain=0.01)
    pred = model.predict(x, verbose=0)
    assert (pred.argmax(1) == y).mean() > 0.93
    state = np.asarray(tree.node_state)
    topology.validate(state, 3)
    assert history["leaves"] == tree.num_leaves() == int(topology.num_leaves(state)[0])
    # leaves hold the empirical class distribution of the training data routed there
    node = np.asarray(tree.route(x))[:, 0]
    values = np.asarray(tree.leaf_values)[0]
    for leaf in topology.leaves(state, 0):
        at = node == leaf
        if at.any():
            np.testing.assert_allclose(values[leaf], np.bincount(y[at], minlength=2) / at.sum(), atol=1e-6)
    # prediction = leaf value of the deterministic route
    np.testing.assert_allclose(pred, values[node], atol=0)
    # interpretation: Theorem 1 polytope of each split contains its left region
    reports = tree.polytopes()
    assert reports and all(1 <= len(p["active"]) <= 8 for p in reports)
    rates = np.asarray(tree.split_values(x))
    for p in reports:
        left = x[rates[:, p["node"]] <= p["threshold"]]
        assert (left @ p["weights"].T + p["bias"] <= p["offsets"] + 1e-4).all()
    assert "split" in tree.describe() and "leaf" in tree.describe()


@pytest.mark.slow
def test_validation_depth_selection_and_refinement_regression():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 3)).astype("float32")
    y = (np.where(x[:, 0] > 0, 2.0, -1.0) + 0.1 * rng.normal(size=500)).astype("float32")
    tree = ConvexPolytopeTree(max_depth=4, num_experts=3, units=1, seed=0)
    keras.Sequential([keras.Input((3,)), tree])
    history = tree.fit_greedy(x[:400], y[:400], validation_data=(x[400:], y[400:]), epochs=10,
                              batch_size=200, learning_rate=0.05, refine_epochs=2)
    assert set(history["validation"]) >= {0, 1}
    assert history["validation"][1][0] < history["validation"][0][0] - 1.0  # one split explains the step (MSE)
    assert tree.depth() == history["depth"] <= 4
    mse = float(((np.asarray(tree(x[400:]))[:, 0] - y[400:]) ** 2).mean())
    assert mse < 0.2
    assert "kept" in history["refine"]


@pytest.mark.slow
def test_soft_training_in_model_fit_with_callbacks():
    x, y = disk_data(300)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=4, num_classes=2, seed=0)
    model = keras.Sequential([keras.Input((2,)), tree])
    tree.fit_greedy(x, y, epochs=3, batch_size=150)
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    before = np.asarray(tree.expert_kernel).copy()
    model.fit(x, y, epochs=2, batch_size=100, verbose=0,
              callbacks=[PolytopeAnnealing(0.5), PolytopeLeafUpdate(x, y)])
    state = np.asarray(tree.node_state)[0, : tree.num_internal] == topology.SPLIT
    lam = np.asarray(tree.steepness)[0]
    assert np.allclose(lam[state], tree.initial_steepness + 0.5)  # epoch index 1
    assert not np.allclose(np.asarray(tree.expert_kernel), before)
    soft = np.asarray(tree(x, training=True))
    # Pruned routing loses less than prune_threshold per dropped subtree (at
    # most one per visited split); prune_threshold=0 is the exact tree.
    lost = 1.0 - soft.sum(1)
    assert (lost > -1e-6).all() and (lost < tree.prune_threshold * tree.num_internal).all(), lost.max()
    tree.prune_threshold = 0.0
    np.testing.assert_allclose(np.asarray(tree(x, training=True)).sum(1), 1.0, rtol=1e-5)


def test_bad_input_gives_clear_errors():
    with pytest.raises(ValueError, match="exactly one of num_classes"):
        ConvexPolytopeTree(max_depth=2, num_experts=2)
    with pytest.raises(ValueError, match="num_experts"):
        ConvexPolytopeTree(max_depth=2, num_experts=0, num_classes=2)
    with pytest.raises(ValueError, match="max_depth"):
        ConvexPolytopeTree(max_depth=40, num_classes=2)
    with pytest.raises(TypeError, match="prior"):
        ConvexPolytopeTree(max_depth=2, num_classes=2, prior="strong")
    with pytest.raises(ValueError, match="steepness"):
        ConvexPolytopeTree(max_depth=2, num_classes=2, steepness=-1)
    x, y = disk_data(50)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=2)
    with pytest.raises(ValueError, match="labels must lie in"):
        tree.fit_greedy(x, y + 5)
    with pytest.raises(ValueError, match="NaN or Inf"):
        tree.fit_greedy(np.full_like(x, np.nan), y)
    with pytest.raises(ValueError, match="empty"):
        tree.fit_greedy(x[:0], y[:0])
    with pytest.raises(ValueError, match="3 features"):
        tree.fit_greedy(np.zeros((50, 3), "float32"), y)
    with pytest.raises(ValueError, match="max_depth must be in"):
        tree.fit_greedy(x, y, max_depth=5)
    with pytest.raises(ValueError, match="batch_size"):
        tree.fit_greedy(x, y, batch_size=0)
    with pytest.raises(ValueError, match="learning_rate"):
        tree.fit_greedy(x, y, learning_rate=float("nan"))
    with pytest.raises(ValueError, match="x has 50 samples but y has 10"):
        tree.set_leaves_from_data(x, y[:10])
    with pytest.raises(ValueError, match="increment"):
        PolytopeAnnealing(-1.0)


def test_config_without_prior():  # the round trip itself: tests/test_layer_contract.py
    assert ConvexPolytopeTree.from_config(
        ConvexPolytopeTree(max_depth=2, units=1, prior=None).get_config()).prior is None


GROW_AND_SAVE = """
import numpy as np, keras
from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, size=(400, 2)).astype("float32")
r = np.linalg.norm(x, axis=1)
y = ((r > 0.3) & (r < 0.7)).astype("int32")
inputs = keras.Input((2,))
tree = ConvexPolytopeTree(max_depth=3, num_experts=6, num_classes=2, seed=0, name="cpt")
model = keras.Model(inputs, tree(inputs))
tree.fit_greedy(x, y, epochs=8, batch_size=200, learning_rate=0.05)
assert tree.num_leaves() >= 3
np.save("x.npy", x)
np.save("state.npy", np.asarray(tree.node_state))
np.save("pred.npy", model.predict(x, verbose=0))
model.save("model.keras")
model.save_weights("w.weights.h5")
model.export("savedmodel", verbose=False)
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cpt_saved")
    run_python(GROW_AND_SAVE, cwd=workdir)
    return workdir


@pytest.mark.slow
def test_grown_tree_round_trips_keras_file_weights_and_savedmodel(saved):
    run_python(
        """
        import numpy as np, keras, tensorflow as tf
        from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree
        x, want = np.load("x.npy"), np.load("pred.npy")
        model = keras.saving.load_model("model.keras")
        np.testing.assert_array_equal(np.asarray(model.get_layer("cpt").node_state), np.load("state.npy"))
        np.testing.assert_array_equal(model.predict(x, verbose=0), want)
        fresh = keras.models.clone_model(model)  # freshly built, ungrown
        assert not np.array_equal(np.asarray(fresh.get_layer("cpt").node_state), np.load("state.npy"))
        fresh.load_weights("w.weights.h5")
        np.testing.assert_array_equal(fresh.predict(x, verbose=0), want)
        import keras_trees  # loads the op library for the SavedModel
        loaded = tf.saved_model.load("savedmodel")
        graph = loaded.serve.get_concrete_function(tf.TensorSpec([None, 2], tf.float32)).graph.as_graph_def()
        ops_used = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
        assert "KerasTrees>HardRoutingExperts" in ops_used, ops_used
        np.testing.assert_array_equal(loaded.serve(tf.constant(x)).numpy(), want)
        """,
        cwd=saved,
    )
