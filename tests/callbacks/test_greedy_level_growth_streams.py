"""GreedyLevelGrowth on streams: arrays, a tf.data.Dataset and a list of batches
grow the same trees; two simulated workers take the decisions of one worker
on all the data."""

import keras
import numpy as np
import pytest

from keras_trees.callbacks import GreedyLevelGrowth
from keras_trees.layers import EndToEndForest, EndToEndTree
from keras_trees.layers._level_growth import LevelGrowth
from tests._streams import lockstep_workers


def npy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


def classification_data(rng, n=320):
    x = rng.normal(size=(n, 2)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0.3)).astype("int32")
    w = rng.uniform(0.2, 2.0, n)
    w[rng.random(n) < 0.1] = 0.0  # some samples ignored
    return x, y, w


def regression_data(rng, n=320):
    x = rng.normal(size=(n, 3)).astype("float32")
    y = (np.where(x[:, 1] > 0, 2.0, -1.0) + 0.5 * x[:, 0]).astype("float32")[:, None]
    w = rng.uniform(0.2, 2.0, n)
    return x, y, w


def list_of_batches(x, y, w, size=64):
    return [(x[i: i + size], y[i: i + size], w[i: i + size]) for i in range(0, len(x), size)]


def dataset(x, y, w, size=64):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x, y, w)).batch(size)


def grown(make_layer, loss, x, y, w, source, **kwargs):
    """The layer after fit with GreedyLevelGrowth reading ``source``."""
    keras.utils.set_random_seed(7)
    layer = make_layer()
    model = keras.Sequential([keras.Input((x.shape[1],)), layer])
    model.compile(keras.optimizers.Adam(0.05), loss)
    if source == "arrays":
        g = GreedyLevelGrowth(x, y, sample_weight=w, **kwargs)
    elif source == "dataset":
        g = GreedyLevelGrowth(dataset(x, y, w), **kwargs)
    else:
        g = GreedyLevelGrowth(list_of_batches(x, y, w), **kwargs)
    model.fit(x, y, sample_weight=w, batch_size=80, shuffle=False, epochs=g.max_epochs(layer.max_depth),
              verbose=0, callbacks=[g])
    return layer, model


def same_trees(a, b, x):
    (la, ma), (lb, mb) = a, b
    np.testing.assert_array_equal(npy(la.node_state), npy(lb.node_state))
    np.testing.assert_array_equal(npy(la.attempts), npy(lb.attempts))
    np.testing.assert_allclose(npy(la.leaf_values), npy(lb.leaf_values), atol=1e-5)
    np.testing.assert_allclose(npy(la.split_bias), npy(lb.split_bias), atol=1e-5)
    np.testing.assert_allclose(ma.predict(x, verbose=0), mb.predict(x, verbose=0), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("best_first", [False, True])
def test_classification_grows_the_same_tree_from_arrays_dataset_and_batches(rng, best_first):
    x, y, w = classification_data(rng)
    kwargs = dict(epochs_per_level=2, finetune_epochs=1, max_attempts=2, min_samples_split=20,
                  best_first=best_first, max_leaves=4 if best_first else None)
    make = lambda: EndToEndTree(max_depth=3, num_classes=4, seed=3)  # noqa: E731
    loss = keras.losses.SparseCategoricalCrossentropy()
    ref = grown(make, loss, x, y, w, "arrays", **kwargs)
    assert ref[0].num_leaves() > 2  # it grew
    for source in ("dataset", "batches"):
        same_trees(ref, grown(make, loss, x, y, w, source, **kwargs), x)


@pytest.mark.slow
@pytest.mark.parametrize("best_first", [False, True])
def test_regression_forest_grows_the_same_trees_from_arrays_dataset_and_batches(rng, best_first):
    x, y, w = regression_data(rng)
    kwargs = dict(epochs_per_level=2, finetune_epochs=1, min_samples_split=30,
                  best_first=best_first, max_leaves=3 if best_first else None)
    make = lambda: EndToEndForest(num_trees=2, max_depth=2, units=1, seed=5)  # noqa: E731
    ref = grown(make, "mse", x, y, w, "arrays", **kwargs)
    assert ref[0].num_leaves().min() > 1
    for source in ("dataset", "batches"):
        same_trees(ref, grown(make, "mse", x, y, w, source, **kwargs), x)


def test_streamed_node_statistics_equal_the_arrays(rng):
    x, y, w = regression_data(rng, 200)
    forest = EndToEndForest(num_trees=3, max_depth=3, units=1, seed=0)
    keras.Sequential([keras.Input((3,)), forest])
    mask = np.zeros((3, forest.num_internal), bool)
    mask[:, :3] = True  # root and its children act as splits
    arrays = LevelGrowth(forest, x.astype(np.float64), y.astype(np.float64), w, feature_moments=2)
    streamed = LevelGrowth.streamed(forest, [(b[0].astype(np.float64), b[1].astype(np.float64), b[2])
                                             for b in list_of_batches(x, y, w, 30)], feature_moments=2)
    for g in (arrays, streamed):
        g.route(mask)
    for key in ("counts", "samples"):
        np.testing.assert_allclose(streamed.stats[key], arrays.stats[key], rtol=1e-12)
    for a, b in zip(streamed.stats["reg"], arrays.stats["reg"]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    for t, nodes in ((0, [3]), (1, [3, 4]), (2, [0])):
        np.testing.assert_allclose(streamed.center(t, nodes), arrays.center(t, nodes), rtol=1e-10)
        np.testing.assert_allclose(streamed.feature_std(t, nodes), arrays.feature_std(t, nodes), rtol=1e-8)
    with pytest.raises(RuntimeError, match="stream"):
        streamed.rows(0, [3])
    np.testing.assert_array_equal(arrays.rows(0, [3, 4, 5, 6]), np.flatnonzero(w > 0))


def test_stream_errors_name_the_argument(rng):
    x, y, w = classification_data(rng, 64)
    with pytest.raises(ValueError, match="inside its batches"):
        GreedyLevelGrowth(dataset(x, y, w), sample_weight=w)
    with pytest.raises(TypeError, match="x must be arrays"):
        GreedyLevelGrowth(42)
    tree = EndToEndTree(max_depth=2, num_classes=4, seed=0)
    model = keras.Sequential([keras.Input((2,)), tree])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy())
    zero = GreedyLevelGrowth(list_of_batches(x, y, 0 * w), epochs_per_level=1)
    with pytest.raises(ValueError, match="zero for every sample"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[zero])
    negative = GreedyLevelGrowth(list_of_batches(x, y, -w), epochs_per_level=1)
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[negative])


# ------------------------------------------------------------ two workers
def _grow_without_training(make_layer, callback, rounds):
    """The callback's growth rounds (no gradient steps in between: the stumps
    keep their initial splits through the data centers)."""
    keras.utils.set_random_seed(11)
    layer = make_layer()
    model = keras.Sequential([keras.Input((2,)), layer])
    callback.set_model(model)
    callback.on_train_begin()
    for _ in range(rounds):
        if int(npy(layer.growth_phase)) != 1:
            break
        callback._end_level(layer)
    return {name: npy(getattr(layer, name)) for name in
            ("node_state", "attempts", "split_kernel", "split_bias", "leaf_values", "candidate_gain")}


@pytest.mark.slow
@pytest.mark.parametrize("classifier", [True, False])
def test_two_workers_take_the_decisions_of_one_worker_on_all_the_data(rng, monkeypatch, classifier):
    if classifier:
        x, y, w = classification_data(rng, 300)
        make = lambda: EndToEndForest(num_trees=2, max_depth=3, num_classes=4, seed=2)  # noqa: E731
    else:
        x, y, w = regression_data(rng, 300)
        x = x[:, :2]
        make = lambda: EndToEndForest(num_trees=2, max_depth=3, units=1, seed=2)  # noqa: E731
    kwargs = dict(epochs_per_level=1, min_samples_split=25, max_attempts=2, batch_size=32)
    one = _grow_without_training(make, GreedyLevelGrowth(x, y, sample_weight=w, **kwargs), 4)
    assert (one["node_state"] == 1).sum() > 2  # several splits committed

    for source in ("arrays", "batches"):
        def run():
            if source == "arrays":
                g = GreedyLevelGrowth(x, y, sample_weight=w, **kwargs)
            else:  # each worker reads every other batch of the list
                g = GreedyLevelGrowth(list_of_batches(x, y, w, 32), **kwargs)
            return _grow_without_training(make, g, 4)

        results, calls = lockstep_workers(monkeypatch, run)
        assert calls, "the statistics were not summed across the workers"
        for result in results:
            for key in one:
                np.testing.assert_allclose(result[key], one[key], rtol=1e-5, atol=1e-6, err_msg=f"{source}: {key}")
