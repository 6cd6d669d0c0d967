"""Callback mechanics: per-split annealing, state in variables, optimizer reset, deep copies."""

import copy

import keras
import numpy as np
import pytest

from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.callbacks._common import reset_optimizer
from keras_trees.layers import EndToEndTree


@pytest.mark.slow
def test_each_new_stump_anneals_on_its_own(rng):
    x = rng.normal(size=(200, 2)).astype("float32")
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype("int32")
    tree = EndToEndTree(max_depth=2, num_classes=2, seed=0, name="t")
    model = keras.Sequential([keras.Input((2,)), tree])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
    g = GreedyLevelGrowth(x, y, epochs_per_level=3, finetune_epochs=2)
    model.fit(x, y, batch_size=50, epochs=20, verbose=0,
              callbacks=[SteepnessAnnealing(0.5, layers="t"), g, EMLeafUpdate(x, y)])
    gamma, epochs = np.asarray(tree.gamma)[0], np.asarray(tree.node_epochs)[0]
    # root: 3 growth epochs + 2 finetune; children: 3 + 2; steepness = 1 + 0.5 * (epochs - 1)
    assert epochs.tolist() == [5, 5, 5]
    np.testing.assert_allclose(gamma, 1.0 + 0.5 * 4)


@pytest.mark.slow
def test_steepness_schedules_of_table_1(rng):
    x = rng.normal(size=(64, 2)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    for increment in (0.0, 0.01, 0.1):
        tree = EndToEndTree(max_depth=1, num_classes=2)
        model = keras.Sequential([keras.Input((2,)), tree])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy())
        model.fit(x, y, epochs=4, verbose=0, callbacks=[SteepnessAnnealing(increment)])
        np.testing.assert_allclose(np.asarray(tree.gamma), 1.0 + 3 * increment, rtol=1e-6)


@pytest.mark.slow
def test_steepness_starts_at_the_layer_argument_and_stops_at_max_steepness(rng):
    x = rng.normal(size=(64, 2)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    tree = EndToEndTree(max_depth=1, num_classes=2, steepness=2.0)
    model = keras.Sequential([keras.Input((2,)), tree])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy())
    model.fit(x, y, epochs=2, verbose=0, callbacks=[SteepnessAnnealing(0.5, max_steepness=10.0)])
    np.testing.assert_allclose(np.asarray(tree.gamma), 2.5, rtol=1e-6)  # 2.0 + 0.5 * 1
    model.fit(x, y, epochs=3, verbose=0, callbacks=[SteepnessAnnealing(5.0, max_steepness=10.0)])
    np.testing.assert_allclose(np.asarray(tree.gamma), 10.0, rtol=1e-6)  # capped


@pytest.mark.slow
def test_deep_copied_callbacks_find_layers_through_model(rng):
    x = rng.normal(size=(64, 2)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    callbacks = [copy.deepcopy(c) for c in (EMLeafUpdate(x, y), SteepnessAnnealing(0.1))]
    tree = EndToEndTree(max_depth=1, num_classes=2)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2), tree])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy())
    model.fit(x, y, epochs=2, verbose=0, callbacks=callbacks)
    assert not np.allclose(np.asarray(tree.leaf_values)[0, 1:3], 0.5)


def test_reset_optimizer_keeps_learning_rate(rng):
    v = keras.Variable(np.ones(3, "float32"))
    opt = keras.optimizers.Adam(0.123)
    opt.apply_gradients([(np.ones(3, "float32"), v)])
    reset_optimizer(opt)
    assert int(opt.iterations.numpy()) == 0
    assert float(opt.learning_rate.numpy()) == np.float32(0.123)
    assert all(np.all(np.asarray(m) == 0) for m in opt._momentums + opt._velocities)


def test_reset_optimizer_keeps_the_loss_scale_of_mixed_float16():
    # Growth resets the optimizer at every level; zeroing a LossScaleOptimizer's
    # dynamic scale made mixed_float16 training NaN.
    v = keras.Variable(np.ones(3, "float32"))
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.1))
    opt.apply_gradients([(np.ones(3, "float32"), v)])
    scale = float(opt.dynamic_scale.numpy())
    assert int(opt.iterations.numpy()) == 1 and scale > 0
    reset_optimizer(opt)
    assert float(opt.dynamic_scale.numpy()) == scale
    assert int(opt.iterations.numpy()) == 0
    inner = opt.inner_optimizer
    assert all(np.all(np.asarray(m) == 0) for m in inner._momentums + inner._velocities)


def test_callback_configs_and_deep_copies_keep_weights(rng):
    x = rng.normal(size=(10, 2)).astype("float32")
    y = np.arange(10) % 2
    w = np.arange(10, dtype="float32")
    g = GreedyLevelGrowth(x, y, epochs_per_level=2, sample_weight=w, verbose=1, class_weight=None)
    config = g.get_config()
    assert config["verbose"] == 1 and config["class_weight"] is None
    clone = copy.deepcopy(g)
    np.testing.assert_array_equal(clone.sample_weight, w)
    em = EMLeafUpdate(x, y, class_weight={0: 2.0, 1: 0.5})
    assert em.get_config()["class_weight"] == {"0": 2.0, "1": 0.5}
    assert copy.deepcopy(em).class_weight == {0: 2.0, 1: 0.5}
    clone = GreedyLevelGrowth(x, y, **(GreedyLevelGrowth(x, y, class_weight={1: 3.0}).get_config()))
    assert clone.class_weight == {1: 3.0}  # JSON string keys are read back
    with pytest.raises(ValueError, match="finite and >= 0"):
        EMLeafUpdate(x, y, sample_weight=-w)
    with pytest.raises(ValueError, match="integer class ids"):
        EMLeafUpdate(x, y, class_weight={"a": 1.0})
