"""ConvexPolytopeTree.fit_greedy / refine on streams of batches: a tf.data.Dataset
and a list of batches give the same tree, the histogram threshold search agrees
with the exact one, streams reach the accuracy of arrays, and two simulated
workers take the decisions of one worker on all the data."""

import keras
import numpy as np
import pytest

from keras_trees import streaming, topology
from keras_trees.layers import _polytope_training as pt
from keras_trees.layers._level_growth import LevelGrowth
from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree
from tests._streams import lockstep_workers


def npy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


def disk_data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2)).astype("float32")
    y = (np.linalg.norm(x, axis=1) < 0.6).astype("int32")
    w = rng.uniform(0.5, 2.0, n)
    w[rng.random(n) < 0.05] = 0.0
    return x, y, w


def regression_data(n=500, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2)).astype("float32")
    y = np.where(x[:, 0] + x[:, 1] > 0.2, 3.0, -1.0) + 0.1 * rng.normal(size=n)
    return x, y.astype("float32"), rng.uniform(0.5, 2.0, n)


def batches(x, y, w, size=150):
    return [(x[i: i + size], y[i: i + size], w[i: i + size]) for i in range(0, len(x), size)]


def tf_dataset(x, y, w, size=150):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((x, y, w)).batch(size)


def new_tree(**kwargs):
    keras.utils.set_random_seed(0)
    tree = ConvexPolytopeTree(max_depth=3, num_experts=6, seed=0, **kwargs)
    model = keras.Sequential([keras.Input((2,)), tree])
    return tree, model


def state_of(tree, model, x):
    return {"node_state": npy(tree.node_state), "threshold": npy(tree.threshold),
            "leaf_values": npy(tree.leaf_values), "kernel": npy(tree.expert_kernel),
            "prediction": model.predict(x, verbose=0)}


def assert_same(a, b, atol=1e-5):
    np.testing.assert_array_equal(a["node_state"], b["node_state"])
    for key in ("threshold", "leaf_values", "kernel", "prediction"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=atol, err_msg=key)


FIT = dict(epochs=6, batch_size=100, learning_rate=0.05, min_gain=0.01, verbose=0)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_dataset_and_list_of_batches_grow_the_same_tree(task):
    x, y, w = disk_data() if task == "classification" else regression_data()
    kw = {"num_classes": 2} if task == "classification" else {"units": 1}
    results = []
    for source in (tf_dataset(x, y, w), batches(x, y, w)):
        tree, model = new_tree(**kw)
        history = tree.fit_greedy(source, **FIT)
        assert history["leaves"] >= 2
        results.append(state_of(tree, model, x))
    assert_same(*results)


@pytest.mark.slow
def test_streams_reach_the_accuracy_of_arrays_and_leaves_are_the_data_distribution():
    x, y, w = disk_data()
    accuracy = {}
    for source in ("arrays", "stream"):
        tree, model = new_tree(num_classes=2)
        if source == "arrays":
            tree.fit_greedy(x, y, sample_weight=w, epochs=20, batch_size=150, learning_rate=0.05, min_gain=0.01,
                            verbose=0)
        else:
            tree.fit_greedy(batches(x, y, w), epochs=20, batch_size=150, learning_rate=0.05, min_gain=0.01,
                            verbose=0)
        pred = model.predict(x, verbose=0)
        accuracy[source] = float(np.average(pred.argmax(1) == y, weights=w))
        # leaves: the weighted class distribution of the rows routed there
        node = npy(tree.route(x))[:, 0]
        values = npy(tree.leaf_values)[0]
        for leaf in topology.leaves(npy(tree.node_state), 0):
            at = (node == leaf) & (w > 0)
            if at.any():
                expected = np.bincount(y[at], w[at], minlength=2) / w[at].sum()
                np.testing.assert_allclose(values[leaf], expected, atol=1e-6)
    assert accuracy["arrays"] > 0.93 and accuracy["stream"] > 0.93, accuracy
    assert abs(accuracy["arrays"] - accuracy["stream"]) < 0.03, accuracy


@pytest.mark.slow
def test_regression_stream_with_validation_and_refinement():
    x, y, w = regression_data()
    tree, model = new_tree(units=1)
    history = tree.fit_greedy(batches(x[:400], y[:400], w[:400]), validation_data=(x[400:], y[400:]),
                              refine_epochs=2, **FIT)
    assert set(history["validation"]) and "kept" in history["refine"]
    mse = float(np.mean((model.predict(x, verbose=0)[:, 0] - y) ** 2))
    assert mse < 0.25 * np.var(y), mse
    # refine alone on a dataset equals refine on the same batches as a list
    results = []
    for source in (tf_dataset(x, y, w), batches(x, y, w)):
        tree, model = new_tree(units=1)
        tree.fit_greedy(batches(x, y, w), **FIT)
        result = tree.refine(source, epochs=2, batch_size=100, learning_rate=0.01)
        assert result["kept"] and len(result["losses"]) == 2
        results.append(state_of(tree, model, x))
    assert_same(*results)


@pytest.mark.parametrize("classifier", [True, False])
def test_bin_search_equals_the_exact_search_with_one_bin_per_value(classifier):
    rng = np.random.default_rng(3)
    n = 80
    rate = np.round(rng.uniform(0, 5, n), 1)  # ties
    w = rng.uniform(0.1, 2.0, n)
    y = rng.integers(0, 3, n) if classifier else rng.normal(size=(n, 2))
    values = np.unique(rate)
    b = np.searchsorted(values, rate)
    samples = np.bincount(b, minlength=len(values)).astype(float)
    if classifier:
        stats = np.zeros((len(values), 3))
        np.add.at(stats, (b, y), w)
    else:
        v = np.concatenate([w[:, None], w[:, None] * y, w[:, None] * y * y], 1)
        stats = np.zeros((len(values), 5))
        np.add.at(stats, b, v)
    for msl in (1, 5):
        threshold, gain, n_left = pt.best_threshold(rate, y, 3 if classifier else None, msl, sample_weight=w)
        cut, bin_gain = pt._best_bin_cut(samples, stats, classifier, msl)
        np.testing.assert_allclose(bin_gain, gain, rtol=1e-9, atol=1e-12)
        assert values[cut] < threshold < values[cut + 1]


def test_histogram_thresholds_are_close_to_the_exact_ones():
    x, y, w = disk_data(400)
    tree, _ = new_tree(num_classes=2)
    opts = {"min_samples_leaf": 1, "min_gain": 0.0}
    exact = LevelGrowth(tree, x, y, w, count_samples=True, options=opts)
    exact.start()
    stream = LevelGrowth.streamed(tree, batches(x, y, w, 64), count_samples=True, options=opts)
    mask = topology.is_split_mask(npy(tree.node_state)) | (npy(tree.trained_splits) > 0)
    exact.route(mask)
    stream.route(mask)
    rate = npy(tree.split_values(x))[:, 0]
    threshold, gain, _ = pt.best_threshold(rate[w > 0], y[w > 0], 2, 1, sample_weight=w[w > 0])
    (hist_threshold, hist_gain), = pt.stream_thresholds(tree, stream, [(0, 0)]).values()
    assert hist_gain <= gain + 1e-9 and hist_gain > 0.97 * gain
    left, hist_left = w[rate <= threshold].sum(), w[rate <= hist_threshold].sum()
    assert abs(left - hist_left) <= 0.03 * w.sum()


def test_stream_errors_name_the_argument():
    x, y, w = disk_data(100)
    tree, _ = new_tree(num_classes=2)
    with pytest.raises(ValueError, match="inside its batches"):
        tree.fit_greedy(batches(x, y, w), sample_weight=w)
    with pytest.raises(ValueError, match="y \\(the labels\\) is needed"):
        tree.fit_greedy(x)
    with pytest.raises(ValueError, match="are 0"):
        tree.fit_greedy(batches(x, y, 0 * w), epochs=1)
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.fit_greedy(batches(x, y, -w), epochs=1)
    with pytest.raises(ValueError, match="labels must lie"):
        tree.fit_greedy(batches(x, y + 3, w), epochs=1)


@pytest.mark.slow
def test_two_workers_take_the_decisions_of_one_worker_on_all_the_data(monkeypatch):
    # Without stump training (epochs=0) every decision comes from statistics:
    # the stumps' polytopes around the node data, S0, the thresholds, the
    # splits and the leaves.
    x, y, w = disk_data(480)
    fit = dict(epochs=0, min_gain=0.0, min_samples_split=20, verbose=0)
    tree, model = new_tree(num_classes=2)
    tree.fit_greedy(batches(x, y, w, 60), **fit)
    one = state_of(tree, model, x)
    assert (one["node_state"] == topology.SPLIT).sum() >= 3

    trees = [new_tree(num_classes=2) for _ in range(2)]  # built before the threads

    def run():
        tree, model = trees[streaming.workers()[1]]
        tree.fit_greedy(batches(x, y, w, 60), **fit)  # every other batch

    _, calls = lockstep_workers(monkeypatch, run)
    assert len(calls) > 3
    for tree, model in trees:
        assert_same(state_of(tree, model, x), one)


def test_new_stumps_on_a_stream_start_as_on_arrays():
    # The stump's polytope comes from the node's mean and deviation (sums),
    # its expert weights from the rate's deviation (moments): as on arrays;
    # S0 sits at a histogram median of the rate, within a bin of the exact one.
    x, y, w = disk_data(300)
    started = []
    for streamed in (False, True):
        tree, _ = new_tree(num_classes=2)
        if streamed:
            growth = LevelGrowth.streamed(tree, batches(x, y, w, 70), count_samples=True, feature_moments=2)
        else:
            growth = LevelGrowth(tree, x, y, w, count_samples=True)
        growth.start()
        started.append((npy(tree.expert_kernel)[0, 0], npy(tree.expert_bias)[0, 0],
                        npy(tree.log_expert_weight)[0, 0], npy(tree.rate0())[0, 0]))
    (k0, b0, r0, s0), (k1, b1, r1, s1) = started
    np.testing.assert_allclose(k1, k0, rtol=1e-5)
    np.testing.assert_allclose(b1, b0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r1, r0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s1, s0, rtol=0.03)


@pytest.mark.slow
def test_workers_with_fewer_batches_take_part_in_every_step(monkeypatch):
    # Synchronized (tf.distribute) steps are collectives: a worker whose shard
    # holds fewer mini-batches makes steps on rows of weight 0.
    x, y, w = disk_data(500)
    train_step = pt._train_step
    steps = {0: [], 1: []}  # per worker: (kind, total weight of the rows) of every step

    def counting(layer, kind, learning_rate):
        optimizer, step = train_step(layer, kind, learning_rate)

        def counted(x, y, w, *rest):
            steps[streaming.workers()[1]].append((kind, float(np.sum(w))))
            return step(x, y, w, *rest)

        return optimizer, counted

    monkeypatch.setattr(pt, "_train_step", counting)
    trees = [new_tree(num_classes=2) for _ in range(2)]

    def run():  # 5 batches: worker 0 holds 3, worker 1 holds 2
        import tensorflow as tf

        index = streaming.workers()[1]
        own = [b for i, b in enumerate(batches(x, y, w, 100)) if i % 2 == index]
        # Each worker's own shard on every backend (auto-sharding OFF).
        shard = tf.data.Dataset.from_tensor_slices(tuple(np.concatenate(parts) for parts in zip(*own))).batch(100)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        trees[index][0].fit_greedy(shard.with_options(options), epochs=2, batch_size=50, learning_rate=0.05,
                                   min_gain=0.01, refine_epochs=1, verbose=0)

    lockstep_workers(monkeypatch, run)
    assert [k for k, _ in steps[0]] == [k for k, _ in steps[1]]  # the same steps, in the same order
    assert {k for k, _ in steps[0]} == {"stump", "tree"}
    idle = [s for s in steps[1] if s[1] == 0.0]
    assert idle and not [s for s in steps[0] if s[1] == 0.0]  # only the smaller shard idles
