"""NonGreedyTree on every Keras backend: CART initialization, fit (Algorithm 1's
step, Stable SGD), predict, evaluate, .keras round trip, seeds, sample and class
weights, leaf refitting, nesting, mixed precision and two-device replicas."""

import functools

import keras
import numpy as np
import pytest

from keras_trees.callbacks.stable_sgd import StableSGD
from keras_trees.layers.non_greedy_tree import NonGreedyTree
from tests.backends.conftest import BACKEND, run_fresh, run_replicated

sklearn_tree = pytest.importorskip("sklearn.tree")
from keras_trees.interop.sklearn import from_sklearn  # noqa: E402


def problem(n=300, p=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p)).astype("float32")
    y = ((x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32") + (x[:, 2] - x[:, 3] > 0.5)).astype("int32")
    return x, y


def cart_tree(depth=3, nu=2.0, x=None, y=None, **kwargs):
    if x is None:
        x, y = problem()
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=depth, random_state=0).fit(x, y)
    model = NonGreedyTree(max_depth=depth, num_classes=3, nu=nu, **kwargs)
    model.initialize_from(from_sklearn(cart))
    return model, cart


def predictions(model, x):
    """``model(x)`` as float32 NumPy (eager: no per-model compilation on JAX)."""
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(model(x), "float32")))


def accuracy(model, x, y):
    return float((np.argmax(predictions(model, x), -1) == y).mean())


def weights(model):
    return [np.asarray(keras.ops.convert_to_numpy(v)) for v in model.weights]


@pytest.mark.slow
def test_cart_init_fit_with_stable_sgd_evaluate_and_keras_round_trip(tmp_path):
    x, y = problem()
    model, cart = cart_tree(depth=3, nu=2.0)
    np.testing.assert_array_equal(np.argmax(model.predict(x, verbose=0), 1), cart.predict(x))
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"])
    assert model.jit_compile == (BACKEND == "jax")  # XLA on JAX; the custom ops on TensorFlow
    before = model.evaluate(x, y, verbose=0, return_dict=True)
    cb = StableSGD(min_delta=1e-2, max_round_epochs=2)
    hist = model.fit(x, y, batch_size=50, epochs=6, verbose=0, callbacks=[cb]).history
    after = model.evaluate(x, y, verbose=0, return_dict=True)
    assert set(hist) == {"loss", "accuracy", "empirical_loss"}
    assert cb.rounds >= 3 and int(keras.ops.convert_to_numpy(model.stable)) == 0
    assert hist["loss"][-1] < hist["loss"][0] and after["loss"] < before["loss"]
    assert np.all(np.array(hist["loss"]) >= np.array(hist["empirical_loss"]) - 1e-4)
    assert after["loss"] >= after["empirical_loss"] - 1e-5
    assert np.all(model.row_norms() <= 2.0 * (1 + 1e-5))  # RowNorm projection after every step
    pred = model.predict(x, verbose=0)
    assert pred.shape == (300, 3) and keras.backend.standardize_dtype(pred.dtype) == "float32"
    assert after["accuracy"] > 0.8 and abs(after["accuracy"] - np.mean(pred.argmax(1) == y)) < 1e-6

    path = str(tmp_path / "ngt.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, NonGreedyTree) and loaded.nu == 2.0
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pred)
    for a, b in zip(loaded.optimizer.variables, model.optimizer.variables):  # momentum restored
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def reference_step(w0, t0, x, target, loss, fast, weight, lr, nu):
    """NumPy (float64) Algorithm 1 for a perfect depth-3 tree: loss-augmented
    inference by enumeration of the 8 leaves (Eq. 10, or Eq. 13 with ``fast``),
    the weighted mean bound and empirical loss, and one projected SGD step."""
    n = len(x)
    xa = np.concatenate([x, np.ones((n, 1))], 1).astype("float64")
    v = xa @ w0.T  # (n, 7) split values
    hcode = np.where(v > 0, 1.0, -1.0)
    codes = np.array(hcode[:, None, :].repeat(8, 1))  # (n, leaf, node): the path to the leaf, sgn(v) elsewhere
    for leaf in range(8):
        pos = leaf + 7
        while pos > 0:
            parent = (pos - 1) // 2
            codes[:, leaf, parent] = 1.0 if pos == 2 * parent + 2 else -1.0
            pos = parent
    margin = np.einsum("nlk,nk->nl", codes - hcode[:, None, :], v)  # g^T v - h^T v (Eq. 12)
    flips = (codes != hcode[:, None, :]).sum(2)
    if loss == "log":
        lse = np.log(np.exp(t0).sum(1))
        leaf_loss = lse[None, :] - t0[:, target].T
    else:
        leaf_loss = ((target[:, None, :] - t0[None]) ** 2).sum(2)
    score = margin + leaf_loss
    if fast:
        score = np.where(flips <= 1, score, -np.inf)
    h = flips.argmin(1)
    g = np.where(score[np.arange(n), h] >= score.max(1), h, score.argmax(1))
    bound = score[np.arange(n), g]
    gw = ((codes[np.arange(n), g] - hcode) * weight[:, None]).T @ xa
    theta = t0[g]
    if loss == "log":
        p = np.exp(theta - theta.max(1, keepdims=True))
        dtheta = p / p.sum(1, keepdims=True) - np.eye(t0.shape[1])[target]
    else:
        dtheta = 2.0 * (theta - target)
    gt = np.zeros_like(t0)
    np.add.at(gt, g, dtheta * weight[:, None])
    w1 = w0 - lr * gw / n
    w1 *= np.minimum(1.0, nu / np.linalg.norm(w1, axis=1, keepdims=True))  # RowNorm (line 8)
    empirical = (weight * leaf_loss[np.arange(n), h]).sum() / weight.sum()
    return w1, t0 - lr * gt / n, (weight * bound).sum() / n, empirical, np.mean(g != h)


@pytest.mark.parametrize("task, weighting", [("log", "sample_weight"), ("log", "class_weight"),
                                             ("squared", "sample_weight")])
def test_one_step_is_algorithm_1_with_weights(task, weighting):
    """One full-batch SGD step: W - lr * sum_i w_i (g_i - h_i) [x_i, 1]^T / n projected
    on ||row|| <= nu, Theta - lr * sum_i w_i d loss(Theta[f(g_i)]) / n; the logged
    loss is the weighted bound, the logged empirical loss its weighted mean."""
    x, y = problem(n=64)
    rng = np.random.default_rng(0)
    if task == "log":
        model = NonGreedyTree(max_depth=3, num_classes=3, nu=1.0, inference="exact", seed=1)
        target = y
    else:
        model = NonGreedyTree(max_depth=3, units=2, nu=1.0, seed=1)
        target = np.stack([x[:, 0] + x[:, 1], x[:, 2]], 1).astype("float32")
    model.build((None, 4))
    model.leaf_values.assign(rng.normal(size=(8, model.output_dim)).astype("float32"))
    w0, t0 = (np.asarray(keras.ops.convert_to_numpy(v), "float64")
              for v in (model.split_weights, model.leaf_values))
    if weighting == "class_weight":
        fit_kwargs = {"class_weight": {0: 2.0, 2: 0.5}}  # class 1 weighs 1, as in Keras
        weight = np.array([2.0, 1.0, 0.5])[y]
    else:
        weight = rng.integers(0, 4, size=64).astype("float64")
        fit_kwargs = {"sample_weight": weight.astype("float32")}
    model.compile(keras.optimizers.SGD(0.1))
    hist = model.fit(x, target, batch_size=64, epochs=1, shuffle=False, verbose=0, **fit_kwargs).history
    w1, t1, bound, empirical, moved = reference_step(
        w0, t0, x.astype("float64"), target if task == "log" else target.astype("float64"), task,
        fast=task == "squared", weight=weight, lr=0.1, nu=1.0)
    assert moved > 0.1  # enough samples have g != h for the split gradient to matter
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.split_weights), w1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.leaf_values), t1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hist["loss"][0], bound, rtol=1e-5)
    np.testing.assert_allclose(hist["empirical_loss"][0], empirical, rtol=1e-5)


def seeded_run(seed):
    """Weights after construction, after CART initialization (+ predictions) and after fit (+ predictions)."""
    keras.utils.set_random_seed(seed)
    x, y = problem()
    model = NonGreedyTree(max_depth=3, num_classes=3, nu=2.0)  # seed=None: follows set_random_seed
    model.build((None, 4))
    stages = [weights(model)]
    # random_state=None and max_features: CART draws from NumPy's global state as well
    cart = sklearn_tree.DecisionTreeClassifier(max_depth=3, max_features=2).fit(x, y)
    model.initialize_from(from_sklearn(cart))
    stages.append(weights(model) + [predictions(model, x)])
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9))
    model.fit(x, y, batch_size=50, epochs=2, verbose=0, callbacks=[StableSGD(max_round_epochs=1)])
    stages.append(weights(model) + [predictions(model, x)])
    return stages


@pytest.mark.slow
def test_set_random_seed_makes_construction_initialization_and_fit_reproducible():
    first, second = seeded_run(5), seeded_run(5)
    for stage_a, stage_b in zip(first, second):
        assert len(stage_a) == len(stage_b)
        for a, b in zip(stage_a, stage_b):
            np.testing.assert_array_equal(a, b)
    keras.utils.set_random_seed(6)
    other = NonGreedyTree(max_depth=3, num_classes=3, nu=2.0)
    other.build((None, 4))
    assert not np.array_equal(weights(other)[0], first[0][0])


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_refit_leaves_with_weights_equals_repeated_rows(task):
    x, y = problem(n=200, seed=3)
    w = np.random.default_rng(4).integers(0, 3, size=200)
    w[:5] = 0
    if task == "regression":
        y = np.stack([x[:, 0] - x[:, 1], x[:, 2]], 1).astype("float32")
        make = lambda: NonGreedyTree(max_depth=3, units=2, nu=1.0, seed=0)  # noqa: E731
    else:
        make = lambda: NonGreedyTree(max_depth=3, num_classes=3, nu=1.0, seed=0)  # noqa: E731
    weighted, repeated = make(), make()
    for model in (weighted, repeated):
        model.build((None, 4))
        model.leaf_values.assign(np.full(model.leaf_values.shape, 0.5, "float32"))
    n_w = weighted.refit_leaves(x, y, sample_weight=w)
    n_r = repeated.refit_leaves(np.repeat(x, w, axis=0), np.repeat(y, w, axis=0))
    assert n_w == n_r >= 1
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weighted.leaf_values),
                               keras.ops.convert_to_numpy(repeated.leaf_values), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="sample_weight"):
        weighted.refit_leaves(x, y, sample_weight=-np.ones(200))
    if task == "classification":
        by_class = make()
        by_class.build((None, 4))
        by_class.refit_leaves(x, y, class_weight={0: 2.0, 2: 3.0})  # class 1 weighs 1, as in fit
        cw = np.array([2, 1, 3])[y]
        repeated = make()
        repeated.build((None, 4))
        repeated.refit_leaves(np.repeat(x, cw, axis=0), np.repeat(y, cw))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(by_class.leaf_values),
                                   keras.ops.convert_to_numpy(repeated.leaf_values), rtol=1e-6, atol=1e-6)
    else:
        with pytest.raises(ValueError, match="class_weight"):
            weighted.refit_leaves(x, y, class_weight={0: 1.0})


class Pipeline(keras.Model):
    """Preprocessing, then a NonGreedyTree trained on its own bound."""

    def __init__(self, tree, mean, variance, **kwargs):
        super().__init__(**kwargs)
        self.norm = keras.layers.Normalization(mean=mean, variance=variance)
        self.norm.build((None, len(mean)))
        self.tree = tree

    def call(self, x):
        return self.tree(self.norm(x))

    def compute_loss(self, x, y, y_pred, sample_weight, training=True):
        return self.tree.compute_loss(self.norm(x), y, y_pred, sample_weight, training=training)


@pytest.mark.slow
def test_stable_sgd_finds_a_tree_nested_in_another_model():
    x, y = problem()
    mean, var = x.mean(0), x.var(0)
    xs = (x - mean) / np.sqrt(var)
    tree, _ = cart_tree(depth=3, nu=2.0, x=xs, y=y)
    model = Pipeline(tree, mean, var)
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"])
    stable = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: stable.append(int(keras.ops.convert_to_numpy(tree.stable))))
    cb = StableSGD(min_delta=1e-2, max_round_epochs=2)
    hist = model.fit(x, y, batch_size=50, epochs=4, verbose=0, callbacks=[cb, record]).history
    assert stable == [1, 1, 1, 1] and cb.rounds >= 2  # Eq. 14 on during training
    assert int(keras.ops.convert_to_numpy(tree.stable)) == 0  # plain SGD after
    assert hist["loss"][-1] < hist["loss"][0] and accuracy(model, x, y) > 0.8
    assert np.all(tree.row_norms() <= 2.0 * (1 + 1e-5))
    with pytest.raises(TypeError, match="NonGreedyTree"):
        other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        other.compile("sgd", "mse")
        other.fit(x, np.zeros((300, 3)), epochs=1, verbose=0, callbacks=[StableSGD()])


@functools.lru_cache(maxsize=None)
def train_for_precision(policy):
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(3)
        x, y = problem()
        model, _ = cart_tree(depth=3, nu=2.0, seed=0)
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"])
        hist = model.fit(x, y, batch_size=50, epochs=4, shuffle=False, verbose=0).history
        out = keras.ops.convert_to_numpy(model(x))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    return model, hist, out, x, y


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_like_float32(policy):
    _, ref_hist, ref_out, x, y = train_for_precision("float32")
    model, hist, out, _, _ = train_for_precision(policy)
    assert keras.mixed_precision.dtype_policy().name == "float32"  # reset
    assert model.compute_dtype == policy.split("_")[1]
    assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in model.trainable_weights)
    assert keras.backend.standardize_dtype(out.dtype) == model.compute_dtype
    assert np.all(np.isfinite(np.asarray(out, "float32")))
    assert np.all(np.isfinite(hist["loss"])) and hist["loss"][-1] < hist["loss"][0]
    acc = float((np.argmax(np.asarray(out, "float32"), 1) == y).mean())
    assert abs(acc - float((np.argmax(np.asarray(ref_out, "float32"), 1) == y).mean())) <= 0.02
    np.testing.assert_allclose(hist["loss"], ref_hist["loss"], rtol=1e-3)  # the bound is float32


REPLICATED = """
import numpy as np
from sklearn.tree import DecisionTreeClassifier
from keras_trees.callbacks.stable_sgd import StableSGD
from keras_trees.interop.sklearn import from_sklearn
from keras_trees.layers.non_greedy_tree import NonGreedyTree
from tests.backends.test_non_greedy_backends import problem

x, y = problem()
cart = from_sklearn(DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y))
results = {}
for name, context in (("single", contextlib.nullcontext), ("replicated", replicated)):
    with context():
        model = NonGreedyTree(max_depth=3, num_classes=3, nu=2.0, seed=0)
        model.initialize_from(cart)
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"])
        fit = dict(batch_size=100, shuffle=False, verbose=0, callbacks=[StableSGD(max_round_epochs=2)])
        hist = model.fit(x, y, epochs=1, **fit).history
        first_epoch = model.get_weights()
        later = model.fit(x, y, epochs=3, **fit).history
    results[name] = (first_epoch, hist["loss"] + later["loss"], later["accuracy"][-1])
(w1, l1, a1), (w2, l2, a2) = results["single"], results["replicated"]
# each synchronous step over two replicas is the step on the whole batch
for p, q in zip(w1, w2):
    np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(l1, l2, rtol=1e-3)
print("ACC", a1, a2)
import sys
print("tensorflow loaded:", "tensorflow" in sys.modules)
"""


@pytest.mark.slow
def test_trains_on_two_replicas_like_on_one(tmp_path):
    out = run_replicated(REPLICATED, tmp_path)
    single, replicated = (float(v) for v in out.split("ACC")[-1].split()[:2])
    assert single > 0.8 and abs(single - replicated) <= 0.02, (single, replicated)
    assert f"tensorflow loaded: {BACKEND == 'tensorflow'}" in out  # nothing in training imports it on JAX


def test_training_does_not_load_tensorflow_on_torch(tmp_path):
    if BACKEND != "torch":
        pytest.skip("TensorFlow is the backend, or JAX (checked by the replicated run)")
    out = run_fresh(
        """
        import sys
        import numpy as np, keras
        from keras_trees.callbacks.stable_sgd import StableSGD
        from keras_trees.layers.non_greedy_tree import NonGreedyTree
        x = np.random.default_rng(0).normal(size=(100, 3)).astype("float32")
        y = (x[:, 0] > 0).astype("int32")
        model = NonGreedyTree(max_depth=2, num_classes=2, nu=1.0, seed=0)
        model.compile(keras.optimizers.SGD(0.1), metrics=["accuracy"])
        model.fit(x, y, batch_size=50, epochs=2, verbose=0, callbacks=[StableSGD()])
        model.evaluate(x, y, verbose=0); model.predict(x, verbose=0)
        print("tensorflow loaded:", "tensorflow" in sys.modules)
        """,
        tmp_path,
    )
    assert "tensorflow loaded: False" in out


@pytest.mark.slow
@pytest.mark.parametrize("label", [1.5, 2**32 + 1, -1])
def test_labels_are_checked_before_the_cast(label):
    """Fractional float labels are refused (not truncated), int64
    labels beyond int32 are refused (not wrapped, also where the backend keeps
    int32 only); whole-number floats are class ids."""
    x, y = problem(n=60)
    model = NonGreedyTree(max_depth=2, num_classes=3, seed=0)
    model.compile(keras.optimizers.SGD(0.1))
    model.fit(x, y.astype("float32"), epochs=1, verbose=0)
    bad = y.astype("float64" if isinstance(label, float) else "int64")
    bad[7] = label
    with pytest.raises(ValueError, match=r"y \(class labels\)"):
        model.fit(x, bad, epochs=1, verbose=0)
    with pytest.raises(TypeError, match="y"):
        model.fit(x, np.array(["a", "b", "c"] * 20), epochs=1, verbose=0)


def test_non_finite_splits_and_rank_three_inputs_are_rejected():
    """A NaN split is an error naming the variable (the
    compiled routing sent it one way); rank-3 inputs are not flattened into
    samples."""
    x, y = problem(n=60)
    model = NonGreedyTree(max_depth=2, num_classes=3, seed=0)
    model(x)
    with pytest.raises(ValueError, match="x must have rank 2"):
        model(x.reshape(6, 10, 4))
    value = np.array(keras.ops.convert_to_numpy(model.split_weights))
    value[1, 2] = np.nan
    model.split_weights.assign(value)
    with pytest.raises(ValueError, match="split_weights contains NaN or Inf"):
        model(x)
    with pytest.raises(Exception, match="split_weights contains NaN or Inf"):
        model.predict(x, verbose=0)
