"""TreeEnsembleLayer: Keras integration, configuration, validation."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees.layers import TreeEnsembleLayer


def toy_classification(rng, n=600, dim=10, classes=3):
    x = rng.normal(size=(n, dim)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5).astype("int32")
    return x, np.minimum(y, classes - 1)


@pytest.mark.slow
def test_sequential_fit_learns(rng):
    x, y = toy_classification(rng)
    model = keras.Sequential([
        keras.Input((10,)),
        keras.layers.BatchNormalization(),
        TreeEnsembleLayer(num_trees=10, max_depth=3, units=3, transition_width=1.0),
    ])
    model.compile(keras.optimizers.Adam(0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, epochs=8, batch_size=64, validation_split=0.2, verbose=0)
    assert history.history["accuracy"][-1] > 0.85
    assert model.predict(x[:7], verbose=0).shape == (7, 3)


@pytest.mark.slow
def test_hidden_layer_in_functional_cnn(rng):
    images = rng.normal(size=(32, 8, 8, 1)).astype("float32")
    labels = rng.integers(0, 4, size=32)
    inputs = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(12)(h)
    h = keras.layers.BatchNormalization()(h)
    h = TreeEnsembleLayer(num_trees=4, max_depth=3, units=6, name="tel")(h)
    outputs = keras.layers.Dense(4)(h)
    model = keras.Model(inputs, outputs)
    x = tf.constant(images)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
            labels, model(x, training=True)
        )
    grads = tape.gradient(loss, [x] + model.trainable_weights)
    assert all(g is not None for g in grads)
    assert np.abs(grads[0].numpy()).sum() > 0, "no gradient reached the inputs"
    conv_kernel_grad = grads[1].numpy()
    assert np.abs(conv_kernel_grad).sum() > 0, "no gradient reached the CNN below the trees"
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images, labels, epochs=1, verbose=0)


def test_weight_layout_is_documented_heap_order(rng):
    layer = TreeEnsembleLayer(num_trees=2, max_depth=3, units=5)
    layer.build((None, 4))
    assert tuple(layer.node_weights.shape) == (2, 7, 4)
    assert tuple(layer.node_bias.shape) == (2, 7)
    assert tuple(layer.leaf_weights.shape) == (2, 8, 5)
    # A negative split value goes left (a positive one right): push every
    # sample hard-left at every node, only leaf 0 of each tree counts.
    layer.node_weights.assign(np.zeros((2, 7, 4)))
    layer.node_bias.assign(np.full((2, 7), -10.0))
    leaves = rng.normal(size=(2, 8, 5)).astype("float32")
    layer.leaf_weights.assign(leaves)
    out = layer(rng.normal(size=(3, 4)).astype("float32")).numpy()
    np.testing.assert_allclose(out, np.broadcast_to(leaves[:, 0].sum(0), (3, 5)), rtol=1e-6)
    # Node 0 hard right, node 2 hard left: leaf 4 (path right, left, left).
    bias = np.full((2, 7), -10.0)
    bias[:, 0] = 10.0
    layer.node_bias.assign(bias)
    out = layer(rng.normal(size=(3, 4)).astype("float32")).numpy()
    np.testing.assert_allclose(out[0], leaves[:, 4].sum(0), rtol=1e-6)


def test_custom_op_and_reference_agree_in_layer(rng):
    layer = TreeEnsembleLayer(num_trees=5, max_depth=6, units=3, transition_width=0.8)
    x = rng.normal(size=(40, 9)).astype("float32")
    y_op = layer(x).numpy()
    with tree_ops.reference_only():
        y_ref = layer(x).numpy()
    np.testing.assert_allclose(y_op, y_ref, rtol=1e-4, atol=1e-5)


def test_logistic_activation_and_no_bias(rng):
    layer = TreeEnsembleLayer(num_trees=3, max_depth=4, units=2, activation="logistic", use_bias=False)
    x = rng.normal(size=(5, 6)).astype("float32")
    out = layer(x).numpy()
    # The ops follow the paper (split value = P(left)): the layer negates its splits.
    ref = tree_ops.soft_tree_ensemble_reference(
        x, -np.asarray(layer.node_weights), None, layer.leaf_weights, 1.0, activation="logistic"
    )
    np.testing.assert_allclose(out, np.asarray(ref), rtol=1e-5)
    assert layer.node_bias is None
    # The logistic never routes hard: (nearly) every leaf is reached (float32 may underflow a few).
    assert layer.mean_reachable_leaves(x) > 14.0  # of 16


def test_extra_leading_dimensions(rng):
    layer = TreeEnsembleLayer(num_trees=2, max_depth=2, units=3)
    x = rng.normal(size=(4, 7, 5)).astype("float32")
    out = layer(x).numpy()
    assert out.shape == (4, 7, 3)
    np.testing.assert_allclose(out[1], layer(x[1]).numpy(), rtol=1e-6)


def test_reachable_leaves_shrink_with_gamma(rng):
    x = rng.normal(size=(200, 8)).astype("float32")
    counts = []
    for gamma in (0.01, 1.0, 100.0):
        layer = TreeEnsembleLayer(num_trees=3, max_depth=6, units=1, transition_width=gamma,
                                  node_initializer=keras.initializers.RandomNormal(seed=1))
        layer.build((None, 8))
        counts.append(layer.mean_reachable_leaves(x))
    assert counts[0] < counts[1] < counts[2] <= 64
    assert counts[0] < 1.5


def test_gamma_is_a_variable_that_callbacks_can_assign(rng):
    layer = TreeEnsembleLayer(num_trees=2, max_depth=5, units=1, transition_width=0.01)
    x = rng.normal(size=(64, 4)).astype("float32")
    layer.build((None, 4))
    before = layer.mean_reachable_leaves(x)
    layer.gamma.assign(50.0)
    assert layer.mean_reachable_leaves(x) > before
    assert not layer.gamma.trainable


def test_regularizer_adds_loss(rng):
    layer = TreeEnsembleLayer(num_trees=2, max_depth=2, units=1,
                              node_regularizer=keras.regularizers.L2(0.1))
    layer(rng.normal(size=(2, 3)).astype("float32"))
    assert len(layer.losses) == 1 and float(layer.losses[0]) > 0


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(num_trees=0), ValueError, "num_trees"),
        (dict(max_depth=0), ValueError, "depth"),
        (dict(max_depth=-2), ValueError, "depth"),
        (dict(max_depth=2.5), TypeError, "depth"),
        (dict(max_depth=40), ValueError, "depth"),
        (dict(units=0), ValueError, "units"),
        (dict(transition_width=0.0), ValueError, "transition_width"),
        (dict(transition_width=-1.0), ValueError, "transition_width"),
        (dict(transition_width=float("inf")), ValueError, "transition_width"),
        (dict(activation="relu"), ValueError, "activation"),
    ],
)
def test_bad_hyperparameters(kwargs, error, message):
    args = dict(num_trees=2, max_depth=3, units=2)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        TreeEnsembleLayer(**args)


def test_depth_that_cannot_fit_in_memory():
    layer = TreeEnsembleLayer(num_trees=100, max_depth=22, units=10)
    with pytest.raises(ValueError, match="smaller max_depth"):
        layer.build((None, 512))


def test_wrong_input_dimension_and_rank(rng):
    layer = TreeEnsembleLayer(num_trees=2, max_depth=3, units=2)
    layer(rng.normal(size=(4, 5)).astype("float32"))
    with pytest.raises(ValueError, match="axis -1|input_dim|expected"):
        layer(rng.normal(size=(4, 6)).astype("float32"))
    with pytest.raises(ValueError, match="ndim|rank"):
        layer(rng.normal(size=(4,)).astype("float32"))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_raise(bad):
    layer = TreeEnsembleLayer(num_trees=2, max_depth=3, units=2)
    x = np.ones((4, 5), dtype="float32")
    x[2, 1] = bad
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="NaN or Inf"):
        layer(x)
    with tree_ops.reference_only():
        with pytest.raises(ValueError, match="NaN or Inf"):
            layer(x)


@pytest.mark.slow
def test_non_finite_inputs_raise_inside_fit():
    model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(num_trees=2, max_depth=2, units=1)])
    model.compile("adam", "mse")
    x = np.ones((8, 3), dtype="float32")
    x[5, 0] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or Inf"):
        model.fit(x, np.zeros((8, 1)), verbose=0)


def test_assigned_non_positive_gamma_raises(rng):
    layer = TreeEnsembleLayer(num_trees=2, max_depth=3, units=2)
    x = rng.normal(size=(4, 5)).astype("float32")
    layer(x)
    layer.gamma.assign(-0.5)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="gamma"):
        layer(x)
