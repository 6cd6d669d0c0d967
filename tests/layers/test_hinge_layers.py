"""HingeForest, HingeFern and HingeBatchNormalization: Keras integration,
initialization, serialization of the fixed feature indices, validation."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees.layers import HingeBatchNormalization, HingeFern, HingeForest
from keras_trees.layers.hinge_forest import random_feature_indices
from tests.conftest import run_python
from tests.ops.test_hinge_ops import brute_force_eq10

LAYERS = [HingeForest, HingeFern]


def built(cls, input_dim=6, **kwargs):
    args = dict(num_trees=4, max_depth=3, units=2, seed=0)
    args.update(kwargs)
    layer = cls(**args)
    layer.build((None, input_dim))
    return layer


@pytest.mark.parametrize("cls", LAYERS)
def test_weights_layout_and_algorithm_1_initialization(cls):
    layer = built(cls, input_dim=50, num_trees=200, max_depth=6, units=3)
    n = 6 if cls is HingeFern else 63
    assert layer.num_vertices == n and layer.num_leaves() == 64
    assert tuple(layer.feature_indices.shape) == (200, n)
    assert keras.backend.standardize_dtype(layer.feature_indices.dtype) == "int32"
    assert not layer.feature_indices.trainable
    assert [w.name for w in layer.trainable_weights] == ["thresholds", "leaf_weights"]
    assert tuple(layer.thresholds.shape) == (200, n)
    assert tuple(layer.leaf_weights.shape) == (200, 64, 3)
    f = layer.feature_indices.numpy()
    assert f.min() >= 0 and f.max() < 50 and len(np.unique(f)) > 40
    t = layer.thresholds.numpy()
    assert -3.0 <= t.min() < -2.5 and 2.5 < t.max() <= 3.0  # U(-3, 3)
    w = layer.leaf_weights.numpy()
    assert abs(w.mean()) < 1e-3 and 0.009 < w.std() < 0.011  # N(0, 0.01)


@pytest.mark.parametrize("cls", LAYERS)
def test_layer_matches_brute_force_eq10(rng, cls):
    layer = built(cls, input_dim=5, max_depth=4, units=3,
                  leaf_initializer=keras.initializers.RandomNormal(stddev=1.0, seed=1),
                  threshold_initializer=keras.initializers.RandomUniform(-1, 1, seed=2))
    x = rng.normal(size=(11, 5)).astype("float32")
    expected = brute_force_eq10(x.astype(float), layer.thresholds.numpy().astype(float),
                                layer.feature_indices.numpy(), layer.leaf_weights.numpy(),
                                cls is HingeFern)
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    with tree_ops.reference_only():
        np.testing.assert_allclose(np.asarray(layer(x)), expected, rtol=1e-5, atol=1e-6)
    trav = layer.traverse(x)
    assert set(trav) == {"leaf", "margin", "vertex"} and tuple(trav["leaf"].shape) == (11, 4)
    picked = layer.leaf_weights.numpy()[np.arange(4), np.asarray(trav["leaf"])]
    np.testing.assert_allclose(picked * np.abs(np.asarray(trav["margin"]))[..., None], expected,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", LAYERS)
def test_reductions_and_leading_dimensions(rng, cls):
    x = rng.normal(size=(3, 7, 6)).astype("float32")
    per_tree = built(cls)(x).numpy()
    assert per_tree.shape == (3, 7, 4, 2)
    summed = built(cls, reduction="sum")
    mean = built(cls, reduction="mean")
    np.testing.assert_allclose(summed(x).numpy(), per_tree.sum(-2), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(mean(x).numpy(), per_tree.mean(-2), rtol=1e-5, atol=1e-7)
    assert summed.compute_output_shape((None, 6)) == (None, 2)
    assert built(cls).compute_output_shape((None, 6)) == (None, 4, 2)


def test_features_per_tree():
    f = random_feature_indices(50, 10, 30, features_per_tree=10, seed=0)
    for row in f:  # a fern of depth 10 over 10 distinct inputs tests each exactly once
        assert len(set(row.tolist())) == 10
    f = random_feature_indices(20, 63, 100, features_per_tree=8, seed=1)
    assert all(len(set(row.tolist())) == 8 for row in f)
    assert len(np.unique(f)) > 50  # different trees draw different subsets
    layer = built(HingeFern, input_dim=12, max_depth=5, features_per_tree=5)
    assert all(len(set(r)) == 5 for r in layer.feature_indices.numpy().tolist())
    with pytest.raises(ValueError, match="features_per_tree=13 is more than the 12 input features"):
        built(HingeForest, input_dim=12, features_per_tree=13)


@pytest.mark.parametrize("cls", LAYERS)
def test_seed_makes_layers_reproducible(cls):
    a, b = built(cls, seed=7), built(cls, seed=7)
    for va, vb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
    c = built(cls, seed=8)
    assert not np.array_equal(a.feature_indices.numpy(), c.feature_indices.numpy())


@pytest.mark.parametrize("cls", LAYERS)
def test_end_to_end_gradients_reach_the_feature_layer(rng, cls):
    inputs = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, strides=2)(inputs)
    h = keras.layers.Flatten()(h)
    h = HingeBatchNormalization()(h)
    outputs = cls(num_trees=6, max_depth=4, units=3, reduction="sum", seed=0)(h)
    model = keras.Model(inputs, outputs)
    x = tf.constant(rng.normal(size=(16, 8, 8, 1)).astype("float32"))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x, training=True) ** 2)
    grads = tape.gradient(loss, model.trainable_weights)
    names = [w.path for w in model.trainable_weights]
    assert all(g is not None for g in grads), names
    for name, g in zip(names, grads):
        assert np.abs(tf.convert_to_tensor(g).numpy()).sum() > 0, f"no gradient reached {name}"


@pytest.mark.slow
@pytest.mark.parametrize("cls", LAYERS)
def test_classification_and_regression_fit(rng, cls):
    x = rng.normal(size=(400, 6)).astype("float32")
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0.3)).astype("int32")
    model = keras.Sequential([
        keras.Input((6,)),
        keras.layers.Dense(16, use_bias=False),
        HingeBatchNormalization(),
        cls(num_trees=20, max_depth=4, units=2, reduction="sum", seed=0),
    ])
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, epochs=15, batch_size=32, verbose=0)
    assert history.history["accuracy"][-1] > 0.9
    target = (np.abs(x[:, :1]) + x[:, 1:2]).astype("float32")
    reg = keras.Sequential([
        keras.Input((6,)),
        HingeBatchNormalization(),
        cls(num_trees=20, max_depth=3, units=1, reduction="mean", seed=0),
    ])
    reg.compile(keras.optimizers.Adam(0.02), "mse")
    history = reg.fit(x, target, epochs=15, batch_size=32, verbose=0)
    assert history.history["loss"][-1] < 0.25 * float(target.var())


SAVE = """
import numpy as np, keras
import keras_trees
from keras_trees.layers import HingeBatchNormalization, HingeFern, HingeForest

rng = np.random.default_rng(0)
x = rng.normal(size=(200, 10)).astype("float32")
y = (x[:, 0] * x[:, 1] > 0).astype("int32")
inputs = keras.Input((10,))
h = keras.layers.Dense(12, use_bias=False)(inputs)
h = HingeBatchNormalization(name="hbn")(h)
a = HingeForest(num_trees=5, max_depth=4, units=2, reduction="sum", name="forest")(h)
b = HingeFern(num_trees=5, max_depth=4, units=2, reduction="mean", name="ferns")(h)
model = keras.Model(inputs, keras.layers.Add()([a, b]))
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, epochs=2, verbose=0)
np.save("x.npy", x)
np.save("pred.npy", model.predict(x, verbose=0))
for name in ("forest", "ferns"):
    np.save(name + "_f.npy", model.get_layer(name).feature_indices.numpy())
np.save("hbn_mean.npy", model.get_layer("hbn").moving_mean.numpy())
model.save("model.keras")
keras_trees.export_portable(model, "portable", verbose=False)
"""


@pytest.mark.slow
def test_keras_file_round_trip_in_a_fresh_process(tmp_path):
    run_python(SAVE, cwd=tmp_path)
    out = run_python(
        """
        import sys, numpy as np, tensorflow as tf
        # The portable SavedModel (stock TensorFlow ops, keras.ops reference path) loads
        # and predicts the same without keras_trees.
        loaded = tf.saved_model.load("portable")
        pred = loaded.serve(tf.constant(np.load("x.npy"))).numpy()
        assert "keras_trees" not in sys.modules
        np.testing.assert_allclose(pred, np.load("pred.npy"), rtol=1e-5, atol=1e-5)
        ops = {op.type for f in loaded.serve.concrete_functions for op in f.graph.get_operations()}
        assert not any(t.startswith("KerasTrees") for t in ops), ops

        import keras
        import keras_trees  # registers the serializable classes
        model = keras.saving.load_model("model.keras")
        for name in ("forest", "ferns"):
            f = model.get_layer(name).feature_indices
            assert not f.trainable and keras.backend.standardize_dtype(f.dtype) == "int32"
            np.testing.assert_array_equal(f.numpy(), np.load(name + "_f.npy"))
        hbn = model.get_layer("hbn")
        np.testing.assert_array_equal(hbn.moving_mean.numpy(), np.load("hbn_mean.npy"))
        assert int(hbn.num_updates.numpy()) == 14  # 2 epochs x 7 batches
        pred = model.predict(np.load("x.npy"), verbose=0)
        np.testing.assert_array_equal(pred, np.load("pred.npy"))
        # Keeps training; the indices stay fixed.
        model.fit(np.load("x.npy"), np.zeros(200, dtype="int32"), epochs=1, verbose=0)
        np.testing.assert_array_equal(model.get_layer("forest").feature_indices.numpy(),
                                      np.load("forest_f.npy"))
        print("ok")
        """,
        cwd=tmp_path,
    )
    assert out.strip().endswith("ok")


def test_weights_file_restores_feature_indices(rng, tmp_path):
    model = keras.Sequential([keras.Input((6,)), HingeForest(3, 3, 2, reduction="sum")])
    model.save_weights(tmp_path / "w.weights.h5")
    fresh = keras.Sequential([keras.Input((6,)), HingeForest(3, 3, 2, reduction="sum")])
    assert not np.array_equal(fresh.layers[0].feature_indices.numpy(),
                              model.layers[0].feature_indices.numpy())
    fresh.load_weights(tmp_path / "w.weights.h5")
    x = rng.normal(size=(9, 6)).astype("float32")
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(num_trees=0), ValueError, "num_trees"),
        (dict(max_depth=0), ValueError, "depth"),
        (dict(max_depth=25), ValueError, "depth must be <= 24"),
        (dict(max_depth=2.5), TypeError, "depth"),
        (dict(units=0), ValueError, "units"),
        (dict(reduction="max"), ValueError, "reduction"),
        (dict(features_per_tree=0), ValueError, "features_per_tree"),
        (dict(seed="a"), TypeError, "seed"),
    ],
)
def test_bad_hyperparameters(cls, kwargs, error, message):
    args = dict(num_trees=2, max_depth=3, units=2)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        cls(**args)


def test_depth_that_cannot_fit_in_memory():
    with pytest.raises(ValueError, match="smaller max_depth"):
        HingeForest(num_trees=1000, max_depth=24, units=10).build((None, 10))


@pytest.mark.parametrize("cls", LAYERS)
def test_bad_inputs(cls):
    layer = built(cls, input_dim=5)
    with pytest.raises(ValueError, match="axis -1|expected"):
        layer(np.ones((4, 6), "float32"))
    with pytest.raises(ValueError, match="ndim"):
        layer(np.ones((4,), "float32"))
    x = np.ones((4, 5), "float32")
    x[1, 2] = np.nan
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="NaN or Inf"):
        layer(x)
    with tree_ops.reference_only():
        with pytest.raises(ValueError, match="NaN or Inf"):
            layer(x)
    layer.feature_indices.assign(np.full(layer.feature_indices.shape, 7, np.int32))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="out of range"):
        layer(np.ones((4, 5), "float32"))


def test_nan_inside_fit_raises():
    model = keras.Sequential([keras.Input((3,)), HingeForest(2, 2, 1, reduction="sum")])
    model.compile("adam", "mse")
    x = np.ones((8, 3), dtype="float32")
    x[5, 0] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or Inf"):
        model.fit(x, np.zeros((8, 1)), verbose=0)


# --- HingeBatchNormalization -------------------------------------------------


def test_batch_norm_uses_running_statistics_in_training_too(rng):
    bn = HingeBatchNormalization(epsilon=1e-5)
    x1 = rng.normal(4.0, 3.0, size=(64, 3)).astype("float32")
    x2 = rng.normal(-1.0, 0.5, size=(32, 3)).astype("float32")
    # First training call: normalizes with the initial mean 0 / variance 1 ...
    y = bn(x1, training=True).numpy()
    np.testing.assert_allclose(y, x1 / np.sqrt(1 + 1e-5), rtol=1e-5)
    # ... then the statistics are exactly the batch's (alpha = 0 / 1 = 0).
    np.testing.assert_allclose(bn.moving_mean.numpy(), x1.mean(0), rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), x1.var(0, ddof=1), rtol=1e-4)
    # Training and inference compute the same function of the current statistics.
    expected = (x2 - x1.mean(0)) / np.sqrt(x1.var(0, ddof=1) + 1e-5)
    np.testing.assert_allclose(bn(x2, training=False).numpy(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn(x2, training=True).numpy(), expected, rtol=1e-4, atol=1e-5)
    # Second update: a running average with alpha = 1/2.
    np.testing.assert_allclose(bn.moving_mean.numpy(), (x1.mean(0) + x2.mean(0)) / 2, rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(),
                               (x1.var(0, ddof=1) + x2.var(0, ddof=1)) / 2, rtol=1e-4)
    assert int(bn.num_updates.numpy()) == 2


def test_batch_norm_momentum_caps_the_running_average(rng):
    bn = HingeBatchNormalization(momentum=0.5)
    for _ in range(5):
        bn(rng.normal(size=(16, 2)).astype("float32"), training=True)
    before = bn.moving_mean.numpy()
    x = rng.normal(size=(16, 2)).astype("float32")
    bn(x, training=True)  # alpha = min(5/6, 0.5) = 0.5
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.5 * before + 0.5 * x.mean(0), rtol=1e-5)


def test_batch_norm_gradient_treats_statistics_as_constants(rng):
    bn = HingeBatchNormalization()
    bn(rng.normal(2.0, 3.0, size=(100, 4)).astype("float32"), training=True)
    x = tf.constant(rng.normal(size=(10, 4)).astype("float32"))
    probe = rng.normal(size=(10, 4)).astype("float32")
    std = np.sqrt(bn.moving_variance.numpy() + bn.epsilon)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(bn(x, training=True) * probe)
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), probe / std, rtol=1e-5)
    # A sample's output does not depend on the rest of its batch.
    bn2 = HingeBatchNormalization()
    bn2.build((None, 4))
    bn2.set_weights(bn.get_weights())
    alone = bn2(x[:1], training=False).numpy()
    np.testing.assert_allclose(bn2(x, training=False).numpy()[:1], alone, rtol=1e-6)


def test_batch_norm_axis_and_degenerate_batches(rng):
    images = rng.normal(1.0, 2.0, size=(8, 5, 5, 3)).astype("float32")
    bn = HingeBatchNormalization(axis=-1)
    bn(images, training=True)
    np.testing.assert_allclose(bn.moving_mean.numpy(), images.mean((0, 1, 2)), rtol=1e-5)
    channels_first = HingeBatchNormalization(axis=1)
    channels_first(np.moveaxis(images, -1, 1), training=True)
    np.testing.assert_allclose(channels_first.moving_mean.numpy(), images.mean((0, 1, 2)), rtol=1e-5)
    frozen = HingeBatchNormalization()
    frozen.trainable = False
    frozen(images, training=True)
    np.testing.assert_array_equal(frozen.moving_mean.numpy(), [0.0, 0.0, 0.0])
    single = HingeBatchNormalization()
    single(np.ones((1, 2), "float32"), training=True)
    single(np.ones((0, 2), "float32"), training=True)
    np.testing.assert_array_equal(single.moving_mean.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(single.moving_variance.numpy(), [1.0, 1.0])
    assert int(single.num_updates.numpy()) == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("compiled", [False, True])
def test_batch_norm_statistics_survive_a_non_finite_batch(rng, bad, compiled):
    x = rng.normal(1.0, 2.0, size=(64, 3)).astype("float32")
    bn = HingeBatchNormalization()
    call = tf.function(lambda v: bn(v, training=True)) if compiled else (lambda v: bn(v, training=True))
    call(x)
    mean, var = bn.moving_mean.numpy().copy(), bn.moving_variance.numpy().copy()
    poisoned = x.copy()
    poisoned[5, 1] = bad
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="x contains NaN or Inf"):
        call(poisoned)  # rejected, and the statistics stay as they were
    np.testing.assert_array_equal(bn.moving_mean.numpy(), mean)
    np.testing.assert_array_equal(bn.moving_variance.numpy(), var)
    assert int(bn.num_updates.numpy()) == 1
    call(x)  # later batches update as before
    assert int(bn.num_updates.numpy()) == 2 and np.all(np.isfinite(bn.moving_mean.numpy()))
    assert np.all(np.isfinite(bn(x, training=False).numpy()))


def test_batch_norm_statistics_guard_holds_where_the_check_is_dropped(rng):
    """Under XLA (``jit_compile=True``) TensorFlow drops runtime assertions: a
    non-finite training batch then passes through, but still leaves the running
    statistics unchanged."""
    x = rng.normal(1.0, 2.0, size=(64, 3)).astype("float32")
    bn = HingeBatchNormalization()
    call = tf.function(lambda v: bn(v, training=True), jit_compile=True)
    call(x)
    mean = bn.moving_mean.numpy().copy()
    poisoned = x.copy()
    poisoned[5, 1] = np.nan
    call(poisoned)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), mean)
    assert int(bn.num_updates.numpy()) == 1


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(momentum=1.0), ValueError, "momentum"),
        (dict(momentum=-0.1), ValueError, "momentum"),
        (dict(epsilon=0.0), ValueError, "epsilon"),
        (dict(axis=1.5), TypeError, "axis"),
    ],
)
def test_batch_norm_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        HingeBatchNormalization(**kwargs)


def test_batch_norm_bad_axis():
    with pytest.raises(ValueError, match="out of range"):
        HingeBatchNormalization(axis=3).build((None, 4))
    with pytest.raises(ValueError, match="batch axis"):
        HingeBatchNormalization(axis=0).build((None, 4))
