"""ConvexPolytopeTree on every Keras backend: greedy growth, model.fit with the
polytope callbacks, refinement, saving, seeds, weights, nesting, mixed precision
and replicas.

One training recipe (``RECIPE``: ``fit_greedy`` with validation data and one
refinement epoch, then ``model.fit`` with ``PolytopeAnnealing`` and
``PolytopeLeafUpdate``, 200 samples, depth 2) runs here, in fresh processes
(seeds) and on two devices (replicas), so their results compare directly.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_trees import topology
from keras_trees.layers import ConvexPolytopeTree
from keras_trees.layers import _polytope_training
from keras_trees.layers._gradient_step import make_train_step
from tests.backends.conftest import BACKEND, run_fresh, run_replicated

RECIPE = """
import numpy as np, keras
from keras_trees.callbacks import PolytopeAnnealing, PolytopeLeafUpdate
from keras_trees.layers import ConvexPolytopeTree


def disk_data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2)).astype("float32")
    return x, (np.linalg.norm(x, axis=1) < 0.6).astype("int32")


def as_numpy(v):
    return np.asarray(keras.ops.convert_to_numpy(v))


def predict(model, x):
    return as_numpy(model.predict(x, batch_size=256, verbose=0))


def accuracy(model, x, y):
    return float((predict(model, x).argmax(1) == y).mean())


def fit_with_callbacks(model, x, y, epochs=2, **callback_kwargs):
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    model.fit(x, y, epochs=epochs, batch_size=100, verbose=0,
              callbacks=[PolytopeAnnealing(0.5), PolytopeLeafUpdate(x, y, **callback_kwargs)])


def train(seed=3, build_only=False, numpy_seed_only=False):
    # keras.utils.set_random_seed drives everything; the layer has seed=None.
    # (numpy_seed_only: the same trees, without importing TensorFlow to seed it.)
    if numpy_seed_only:
        np.random.seed(seed)
    else:
        keras.utils.set_random_seed(seed)
    x, y = disk_data()
    tree = ConvexPolytopeTree(max_depth=2, num_experts=4, num_classes=2)
    model = keras.Sequential([keras.Input((2,)), tree])
    out = {"x": x, "y": y, "tree": tree, "model": model, "initial": [as_numpy(v) for v in tree.weights]}
    if build_only:
        return out
    out["history"] = tree.fit_greedy(x, y, validation_data=(x[150:], y[150:]), epochs=4, batch_size=100,
                                     learning_rate=0.05, refine_epochs=1, verbose=0)
    out["grown"] = [as_numpy(v) for v in tree.weights]
    out["greedy_accuracy"] = accuracy(model, x, y)
    fit_with_callbacks(model, x, y)
    out["fitted"] = [as_numpy(v) for v in tree.weights]
    out["prediction"] = predict(model, x)
    out["fit_accuracy"] = accuracy(model, x, y)
    return out


def arrays(run):
    return run["initial"] + run["grown"] + run["fitted"] + [run["prediction"]]
"""

_recipe = {}
exec(RECIPE, _recipe)
disk_data, as_numpy, predict, accuracy, fit_with_callbacks, train, arrays = (
    _recipe[name]
    for name in ("disk_data", "as_numpy", "predict", "accuracy", "fit_with_callbacks", "train", "arrays")
)


@pytest.fixture(scope="module")
def reference():
    return train()


def weighted_leaf_values(tree, x, y, w, num_classes=2):
    """Closed form: each reached leaf holds the w-weighted class frequencies of its samples."""
    node = tree._route_numpy(x)
    want = {}
    for leaf in np.unique(node):
        at = node == leaf
        counts = np.bincount(y[at], weights=w[at], minlength=num_classes)
        if counts.sum() > 0:
            want[int(leaf)] = counts / counts.sum()
    return want


def assert_leaves(tree, want):
    values = as_numpy(tree.leaf_values)[0]
    assert want
    for leaf, v in want.items():
        np.testing.assert_allclose(values[leaf], v, atol=1e-6)


def grow(x, y, tree=None, **kwargs):
    tree = tree or ConvexPolytopeTree(max_depth=2, num_experts=4, num_classes=2, seed=0)
    model = keras.Sequential([keras.Input((2,)), tree])
    kwargs = {"epochs": 3, "batch_size": 100, "learning_rate": 0.05, "verbose": 0, **kwargs}
    return tree, model, tree.fit_greedy(x, y, **kwargs)


# ------------------------------------------------------------------ gradient step
def test_train_step_reads_variables_at_call_time_and_keeps_state_updates():
    w = keras.Variable(np.zeros(3, "float32"), name="w")
    unused = keras.Variable(np.ones(2, "float32"), name="unused")
    target = keras.Variable(np.array([1.0, -2.0, 3.0], "float32"), trainable=False, name="target")
    calls = keras.Variable(0.0, trainable=False, name="calls")

    def loss_fn(scale):
        calls.assign(calls + 1.0)
        return ops.sum((w - scale * target) ** 2)

    # SGD(0.5) on (w - t)^2 lands on t in one step.
    step = make_train_step(loss_fn, [w, unused], keras.optimizers.SGD(0.5), state_variables=[target, calls])
    loss = step(np.float32(1.0))
    assert float(loss) == pytest.approx(14.0)
    np.testing.assert_allclose(as_numpy(w), [1.0, -2.0, 3.0], rtol=1e-6)
    target.assign(np.array([4.0, 5.0, 6.0], "float32"))  # seen by the compiled step, not frozen in
    step(np.float32(2.0))
    np.testing.assert_allclose(as_numpy(w), [8.0, 10.0, 12.0], rtol=1e-6)
    np.testing.assert_array_equal(as_numpy(unused), [1.0, 1.0])  # no gradient: zeros
    assert float(as_numpy(calls)) == 2.0


def test_train_step_many_makes_the_steps_of_as_many_calls():
    """step.many(stacked, shared, count): count Adam steps in one call, the
    same as count calls of step (rows past count ignored), state updates
    kept, the losses of the steps returned."""
    rng = np.random.default_rng(0)
    batches = rng.normal(size=(5, 8, 3)).astype("float32")
    weights = rng.uniform(size=(5, 8)).astype("float32")
    runs = []
    for use_many in (False, True):
        w = keras.Variable(np.zeros(3, "float32"), name="w")
        calls = keras.Variable(0.0, trainable=False, name="calls")

        def loss_fn(xb, wb, scale):
            calls.assign(calls + 1.0)
            return ops.sum(wb[:, None] * (xb - w) ** 2) * scale

        step = make_train_step(loss_fn, [w], keras.optimizers.Adam(0.1), state_variables=[calls])
        scale = np.float32(0.5)
        if use_many:
            losses = step.many([batches, weights], [scale], 4)  # the fifth batch: padding, never stepped on
        else:
            losses = [float(as_numpy(step(batches[i], weights[i], scale))) for i in range(4)]
        runs.append((np.asarray(losses, np.float64), as_numpy(w), float(as_numpy(calls))))
    (loop_losses, loop_w, loop_calls), (many_losses, many_w, many_calls) = runs
    assert many_losses.shape == (4,) and many_losses.dtype == np.float64
    np.testing.assert_allclose(many_losses, loop_losses, rtol=1e-5)
    np.testing.assert_allclose(many_w, loop_w, rtol=1e-5, atol=1e-6)
    assert loop_calls == many_calls == 4.0


# ------------------------------------------------------------------ training
@pytest.mark.slow
def test_fit_greedy_fit_with_callbacks_refine_and_keras_round_trip(reference, tmp_path):
    x, y, tree, model = reference["x"], reference["y"], reference["tree"], reference["model"]
    history = reference["history"]
    assert history["leaves"] == tree.num_leaves() >= 2 and "kept" in history["refine"]
    assert set(history["validation"]) >= {0, 1}
    topology.validate(as_numpy(tree.node_state), 2)
    assert reference["greedy_accuracy"] > 0.8 and reference["fit_accuracy"] > 0.8
    names = [v.name for v in tree.weights]
    grown, fitted = dict(zip(names, reference["grown"])), dict(zip(names, reference["fitted"]))
    splits = fitted["node_state"][0, : tree.num_internal] == topology.SPLIT
    np.testing.assert_allclose(fitted["steepness"][0][splits], tree.initial_steepness + 0.5)  # epoch 1
    assert not np.allclose(fitted["expert_kernel"], grown["expert_kernel"])  # model.fit trained the splits
    assert_leaves(tree, weighted_leaf_values(tree, x, y, np.ones(len(y))))
    np.testing.assert_allclose(as_numpy(tree(x, training=True)).sum(1), 1.0, rtol=1e-5)
    pred = predict(model, x)
    np.testing.assert_array_equal(pred, as_numpy(tree.leaf_values)[0][tree._route_numpy(x)])
    path = str(tmp_path / "cpt.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(predict(loaded, x), pred)
    np.testing.assert_array_equal(as_numpy(loaded.layers[-1].node_state), as_numpy(tree.node_state))


@pytest.mark.slow
def test_model_fit_trains_a_tree_that_has_not_split_yet():
    # The probabilistic output depends on the root's parameters even before the
    # first split, so every backend gets (zero) gradients instead of failing.
    x, y = disk_data(100)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=2, seed=0)
    model = keras.Sequential([keras.Input((2,)), tree])
    fit_with_callbacks(model, x, y, epochs=1)
    assert tree.num_leaves() == 1
    frequencies = np.bincount(y, minlength=2) / len(y)
    np.testing.assert_allclose(predict(model, x), np.tile(frequencies, (len(y), 1)), atol=1e-6)


# ------------------------------------------------------------------ seeds
@pytest.mark.slow
def test_set_random_seed_reproduces_construction_growth_and_fit(reference, tmp_path):
    # Twice in a fresh process, both bit-identical to this process's run. The
    # fresh process first shows that importing keras_trees and growing a tree
    # never import TensorFlow on JAX/torch (keras.utils.set_random_seed does).
    np.savez(tmp_path / "reference.npz", *arrays(reference))
    out = run_fresh(
        RECIPE
        + """
import sys, keras_trees
if keras.backend.backend() != "tensorflow":
    x, y = disk_data(100)
    ConvexPolytopeTree(max_depth=1, num_experts=2, num_classes=2, seed=0).fit_greedy(x, y, epochs=1, verbose=0)
    print("tensorflow imported:", "tensorflow" in sys.modules)
want = np.load("reference.npz")
first, second = train(), train()
for run in (first, second):
    for i, a in enumerate(arrays(run)):
        np.testing.assert_array_equal(a, want[f"arr_{i}"])
assert not np.array_equal(train(seed=4, build_only=True)["initial"][0], first["initial"][0])  # the seed matters
""",
        tmp_path,
    )
    if BACKEND != "tensorflow":
        assert "tensorflow imported: False" in out


# ------------------------------------------------------------------ weights
@pytest.mark.slow_on("jax")
def test_weighted_objective_thresholds_and_leaves_equal_repeated_rows():
    x, y = disk_data(120)
    counts = np.random.default_rng(1).integers(1, 4, size=len(y))
    xr, yr = np.repeat(x, counts, axis=0), np.repeat(y, counts)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=3, num_classes=2, seed=0)
    keras.Sequential([keras.Input((2,)), tree])
    tree.trained_splits.assign(np.ones((1, tree.num_internal), "float32"))
    # the information objective (Eq. 13 + prior) of the root stump
    objective = _polytope_training._stump_objective
    weighted = objective(tree, x, y.astype("float32"), counts.astype("float32"), np.zeros(len(y), "int32"),
                         np.float32(1.0 / counts.sum()))
    repeated = objective(tree, xr, yr.astype("float32"), np.ones(len(yr), "float32"), np.zeros(len(yr), "int32"),
                         np.float32(1.0 / len(yr)))
    assert float(as_numpy(weighted)) == pytest.approx(float(as_numpy(repeated)), rel=1e-5)
    # the threshold search (information gain)
    rate = x[:, 0] + 0.1 * x[:, 1]
    t_w, gain_w, _ = _polytope_training.best_threshold(rate, y, 2, sample_weight=counts)
    t_r, gain_r, _ = _polytope_training.best_threshold(np.repeat(rate, counts), yr, 2)
    assert t_w == t_r and gain_w == pytest.approx(gain_r, rel=1e-12)
    # the leaves
    tree.set_leaves_from_data(x, y, sample_weight=counts)
    by_weight = as_numpy(tree.leaf_values).copy()
    tree.set_leaves_from_data(xr, yr)
    np.testing.assert_allclose(by_weight, as_numpy(tree.leaf_values), atol=1e-7)


@pytest.mark.slow
def test_fit_greedy_and_leaf_callback_use_sample_and_class_weights():
    x, y = disk_data()
    sw = np.random.default_rng(2).uniform(0.2, 3.0, size=len(y))
    class_weight = {0: 1.0, 1: 4.0}
    w = sw * np.where(y == 1, 4.0, 1.0)
    tree, model, _ = grow(x, y, sample_weight=sw, class_weight=class_weight)
    assert_leaves(tree, weighted_leaf_values(tree, x, y, w))
    unweighted = weighted_leaf_values(tree, x, y, np.ones(len(y)))
    values = as_numpy(tree.leaf_values)[0]
    assert any(not np.allclose(values[leaf], v, atol=1e-3) for leaf, v in unweighted.items())
    fit_with_callbacks(model, x, y, epochs=1, sample_weight=sw, class_weight=class_weight)
    assert_leaves(tree, weighted_leaf_values(tree, x, y, w))
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        tree.fit_greedy(x, y, sample_weight=np.ones(3), verbose=0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.fit_greedy(x, y, sample_weight=-np.ones(len(y)), verbose=0)
    with pytest.raises(ValueError, match=r"class_weight has class ids \[5\]"):
        tree.fit_greedy(x, y, class_weight={5: 1.0}, verbose=0)


# ------------------------------------------------------------------ progress
@pytest.mark.slow
def test_fit_greedy_reports_one_line_per_level(capsys):
    x, y = disk_data()
    tree, _, history = grow(x, y, epochs=2, verbose=2, validation_data=(x[150:], y[150:]))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == len(history["levels"]) == 2, lines
    for level, line in enumerate(lines):
        assert line.startswith(f"Level {level + 1}/2")
        for key in ("depth:", "leaves:", "objective:", "val_accuracy:"):
            assert key in line, line
    assert f"leaves: {history['levels'][-1]['leaves']}" in lines[-1]
    grow(x, y, tree=tree, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""
    grow(x, y, tree=tree, epochs=1, verbose="auto", max_depth=1)
    assert capsys.readouterr().out.count("Level 1/1") == 1
    tree.refine(x, y, validation_data=(x[150:], y[150:]), epochs=2, verbose=2)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" - ")[0] for line in lines[:2]] == ["Refine epoch 1/2", "Refine epoch 2/2"], lines
    assert len(lines) == 3 and "val_accuracy:" in lines[2], lines
    with pytest.raises(ValueError, match="verbose"):
        grow(x, y, tree=tree, verbose=3)


# ------------------------------------------------------------------ nesting
def nested_model(kind, tree):
    """The tree behind x -> -x inside a sub-model. The disk is symmetric, so a
    tree grown on x also fits -x, but samples reach other leaves."""
    pre = keras.layers.Rescaling(-1.0)
    if kind == "sequential":
        return keras.Sequential([keras.Input((2,)), keras.Sequential([pre, tree])])
    if kind == "functional":
        inner_in = keras.Input((2,))
        inner = keras.Model(inner_in, tree(pre(inner_in)))
        outer_in = keras.Input((2,))
        return keras.Model(outer_in, inner(outer_in))

    class Wrapper(keras.Model):
        def __init__(self):
            super().__init__()
            self.pre, self.tree = pre, tree

        def call(self, inputs, training=None):
            return self.tree(self.pre(inputs), training=training)

    model = Wrapper()
    model(np.zeros((1, 2), "float32"))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sequential", "functional", "subclassed"])
def test_callbacks_find_a_nested_tree_and_map_model_inputs(kind, reference):
    x, y = disk_data()
    tree = ConvexPolytopeTree(max_depth=2, num_experts=4, num_classes=2, seed=0)
    model = nested_model(kind, tree)
    tree.set_weights(reference["tree"].get_weights())  # a grown tree
    fit_with_callbacks(model, x, y, epochs=2)
    splits = as_numpy(tree.node_state)[0, : tree.num_internal] == topology.SPLIT
    assert splits.any()
    np.testing.assert_allclose(as_numpy(tree.steepness)[0][splits], tree.initial_steepness + 0.5)
    assert_leaves(tree, weighted_leaf_values(tree, -x, y, np.ones(len(y))))
    assert accuracy(model, x, y) > 0.8


# ------------------------------------------------------------------ mixed precision
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_like_float32(policy, reference):
    try:
        keras.mixed_precision.set_dtype_policy(policy)
        run = train()
        tree, model, pred = run["tree"], run["model"], run["prediction"]
        assert tree.compute_dtype == keras.backend.standardize_dtype(pred.dtype) == policy.split("_")[1]
        assert tree.expert_kernel.dtype == "float32"
        # The model routes in float32: points closest to the root's threshold
        # reach the leaves that float32 routing gives them.
        points = np.random.default_rng(5).uniform(-1, 1, size=(20000, 2)).astype("float32")
        rate = as_numpy(tree.split_values(points))[:, 0]
        near = points[np.argsort(np.abs(rate - as_numpy(tree.threshold)[0, 0]))[:256]]
        want = as_numpy(tree.leaf_values)[0][as_numpy(tree.route(near))[:, 0]].astype(tree.compute_dtype)
        np.testing.assert_array_equal(predict(model, near), want)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    # Growth routes and trains in float32: the same tree; model.fit within noise.
    assert run["greedy_accuracy"] == reference["greedy_accuracy"]
    assert abs(run["fit_accuracy"] - reference["fit_accuracy"]) <= 0.03, (run["fit_accuracy"], reference["fit_accuracy"])


# ------------------------------------------------------------------ replicas
@pytest.mark.slow
def test_two_replicas_train_like_one_device(reference, tmp_path):
    out = run_replicated(
        RECIPE
        + """
from keras_trees.layers._gradient_step import make_train_step
with replicated():
    # SGD(0.25) on (w - t)^2 from 0 gives w = t / 2 on one device: the
    # replicas' summed gradients must not count the batch twice.
    w = keras.Variable(np.zeros(3, "float32"))
    step = make_train_step(lambda t: keras.ops.sum((w - t) ** 2), [w], keras.optimizers.SGD(0.25))
    loss = step(np.array([1.0, -2.0, 3.0], "float32"))
    print("STEP", float(loss), *as_numpy(w))
    run = train(numpy_seed_only=True)  # the reference's trees (NumPy draws) without seeding TensorFlow
np.savez("grown.npz", *run["grown"])
print("RESULT", run["greedy_accuracy"], run["fit_accuracy"])
# growing again after leaving the scope (TensorFlow: the variables' strategy is re-entered)
history = run["tree"].fit_greedy(run["x"], run["y"], epochs=1, batch_size=100, learning_rate=0.05, verbose=0)
print("OUTSIDE", history["leaves"])
""",
        tmp_path,
    )
    step = [float(v) for v in out.split("STEP")[1].split()[:4]]
    np.testing.assert_allclose(step, [14.0, 0.5, -1.0, 1.5], rtol=1e-6)
    # fit_greedy on two replicas grows the single-device tree
    grown = np.load(tmp_path / "grown.npz")
    for i, want in enumerate(reference["grown"]):
        np.testing.assert_allclose(grown[f"arr_{i}"], want, rtol=1e-4, atol=1e-5)
    greedy, fit = map(float, out.split("RESULT")[1].split()[:2])
    assert int(out.split("OUTSIDE")[1].split()[0]) >= 2
    assert greedy == reference["greedy_accuracy"]
    assert abs(fit - reference["fit_accuracy"]) <= 0.03


@pytest.mark.slow_on("jax")
def test_pruned_probabilistic_tree_matches_the_numpy_oracle():
    from tests.ops.pruned_oracle import pruned_outputs
    from tests.test_topology import random_tree

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(50, 2)).astype("float32")
    tree = ConvexPolytopeTree(max_depth=3, num_experts=3, num_classes=2, prune_threshold=0.05, seed=0)
    tree.build((None, 2))
    tree.node_state.assign(random_tree(rng, 3))
    tree.steepness.assign(rng.uniform(1, 4, size=(1, 7)).astype("float32"))
    tree.leaf_values.assign(rng.dirichlet(np.ones(2), size=(1, 15)).astype("float32"))
    as_np = lambda v: np.asarray(ops.convert_to_numpy(v))  # noqa: E731
    expected, _, _, _ = pruned_outputs(
        x, as_np(tree.expert_kernel), as_np(tree.expert_bias), as_np(tree.steepness),
        as_np(tree.node_state)[:, :7] == topology.SPLIT, as_np(tree.leaf_values), tree.prune_threshold,
        expert_weights=as_np(tree.expert_weights()), rate0=as_np(tree.rate0()))
    np.testing.assert_allclose(as_np(tree(x, training=True)), expected[:, 0], rtol=2e-5, atol=2e-6)


def test_host_mapping_uses_one_batch_shape_and_returns_every_row_once():
    """``_map_rows`` (routing and split values on the host during growth):
    on JAX every batch is padded to ``batch_size`` rows, so each level's
    different number of rows compiles nothing new; the results are the
    unpadded rows' in order on every backend."""
    layer = ConvexPolytopeTree(max_depth=2, num_classes=2, num_experts=2, seed=0)
    x = np.random.default_rng(0).normal(size=(300, 3)).astype("float32")
    layer(x[:2])
    shapes = []

    def fn(rows):
        shapes.append(rows.shape)
        return rows.sum(axis=1)

    for n in (1, 70, 300):
        out = np.concatenate(layer._map_rows(fn, x[:n], 128))
        np.testing.assert_array_equal(out, x[:n].sum(axis=1))
    if BACKEND == "jax":
        assert set(shapes) == {(128, 3)}
    else:
        assert shapes == [(1, 3), (70, 3), (128, 3), (128, 3), (44, 3)]
    # The layer's split values through the mapping: the same in small (padded on JAX) and whole batches.
    values = layer._split_values_numpy(x[:70], batch_size=128)
    np.testing.assert_allclose(values, layer._split_values_numpy(x[:70], batch_size=4096), rtol=1e-6, atol=1e-6)
