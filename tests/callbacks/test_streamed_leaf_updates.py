"""EMLeafUpdate and PolytopeLeafUpdate from a stream of batches: the same
leaves as from arrays, and summed over (simulated) workers."""

import copy

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.callbacks import EMLeafUpdate
from keras_trees.callbacks.polytope_leaves import PolytopeLeafUpdate
from keras_trees.layers import ConvexPolytopeTree, EndToEndTree
from tests._streams import as_sources, two_workers


def problem(n=150, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3)).astype("int32")
    w = rng.uniform(0.2, 3.0, size=n)
    return x, y, w


# ------------------------------------------------------------------ EM
def em_model(inputs=True):
    keras.utils.set_random_seed(0)
    tree = EndToEndTree(max_depth=2, num_classes=3, seed=0, name="t")
    model = keras.Sequential(([keras.Input((3,))] if inputs else []) + [tree])
    return model, tree


def em_leaves(cb, model, tree):
    cb.set_model(model)
    cb.on_train_begin()
    cb.update()
    return tree.leaves_numpy().copy()


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["none", "sample_weight", "class_weight"])
def test_em_leaves_from_a_dataset_or_a_list_of_batches_equal_those_from_arrays(weights):
    x, y, w = problem()
    cw = {0: 2.0, 2: 0.25}
    kwargs = {"none": {}, "sample_weight": {"sample_weight": w}, "class_weight": {"class_weight": cw}}[weights]
    expected = em_leaves(EMLeafUpdate(x, y, batch_size=40, **kwargs), *em_model())
    assert not np.allclose(expected, expected[:, :1])  # the leaves differ: the test can fail
    for kind, data in as_sources(x, y, w if weights == "sample_weight" else None, batch=32).items():
        cb = EMLeafUpdate(data, class_weight=cw if weights == "class_weight" else None)
        np.testing.assert_allclose(em_leaves(cb, *em_model()), expected, rtol=1e-5, atol=1e-7, err_msg=kind)
    if weights != "none":  # the weights matter
        plain = em_leaves(EMLeafUpdate(x, y), *em_model())
        assert not np.allclose(plain, expected, atol=1e-4)


@pytest.mark.slow
def test_em_from_a_stream_builds_the_model_and_keeps_config_and_deep_copies():
    x, y, _ = problem()
    data = as_sources(x, y)["dataset"]
    model, tree = em_model(inputs=False)
    assert not tree.built
    cb = EMLeafUpdate(data, batch_size=64, class_weight={1: 2.0})
    leaves = em_leaves(cb, model, tree)
    assert tree.built
    expected = em_leaves(EMLeafUpdate(x, y, class_weight={1: 2.0}), *em_model())
    np.testing.assert_allclose(leaves, expected, rtol=1e-5, atol=1e-7)
    assert cb.get_config() == {"batch_size": 64, "layers": None, "class_weight": {"1": 2.0}}
    clone = copy.deepcopy(cb)
    assert clone.x is data and clone.y is None and clone.class_weight == {1: 2.0}
    np.testing.assert_allclose(em_leaves(clone, *em_model()), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_em_from_a_stream_in_model_fit():
    x, y, w = problem()
    ds = as_sources(x, y, w)["dataset"]
    results = []
    for cb in (EMLeafUpdate(x, y, sample_weight=w), EMLeafUpdate(ds)):
        model, tree = em_model()
        model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
        model.fit(ds, epochs=2, verbose=0, shuffle=False, callbacks=[cb])
        results.append(tree.leaves_numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-6)


def test_em_stream_errors_name_the_problem():
    x, y, w = problem()
    with pytest.raises(ValueError, match="EMLeafUpdate: x is an array, so y"):
        EMLeafUpdate(x)
    with pytest.raises(ValueError, match="EMLeafUpdate: with a dataset, give sample weights inside its batches"):
        EMLeafUpdate(as_sources(x, y)["list"], sample_weight=w)
    with pytest.raises(TypeError, match="EMLeafUpdate: x must be arrays"):
        EMLeafUpdate(3.0)
    cb = EMLeafUpdate(as_sources(x, y, w)["list"], class_weight={0: 2.0})
    with pytest.raises(ValueError, match="batches carry sample weights, so class_weight cannot be given"):
        em_leaves(cb, *em_model())
    cb = EMLeafUpdate([(x, y, -w)])
    with pytest.raises(ValueError, match="EMLeafUpdate: sample weights .* must be finite"):
        em_leaves(cb, *em_model())
    cb = EMLeafUpdate([(x, y + 5)])
    with pytest.raises(ValueError, match="EMLeafUpdate: labels must lie in"):
        em_leaves(cb, *em_model())
    with pytest.raises(ValueError, match="EMLeafUpdate reads the data at every epoch, but x is a one-shot"):
        EMLeafUpdate(iter(as_sources(x, y)["list"]))
    with pytest.raises(ValueError, match="EMLeafUpdate: the data holds no samples of positive weight"):
        em_leaves(EMLeafUpdate([(x, y, 0 * w)]), *em_model())


@pytest.mark.parametrize("source", ["arrays", "dataset"])
def test_em_counts_of_two_workers_sum_to_the_one_worker_counts(monkeypatch, source):
    x, y, w = problem()
    expected = em_leaves(EMLeafUpdate(x, y, sample_weight=w), *em_model())
    state = {}

    def reset():
        state["model"], state["tree"] = em_model()

    def run():
        cb = (EMLeafUpdate(x, y, batch_size=32, sample_weight=w) if source == "arrays"
              else EMLeafUpdate(as_sources(x, y, w)["dataset"]))
        return em_leaves(cb, state["model"], state["tree"])

    leaves, local, summed = two_workers(monkeypatch, run, reset)
    np.testing.assert_allclose(leaves, expected, rtol=1e-5, atol=1e-7)
    # Each worker counted part of the data; together all of it (weighted).
    theirs, total = local[0][0], summed[0][0]
    assert 0 < theirs.sum() < total.sum()
    np.testing.assert_allclose(total.sum(), w.sum(), rtol=1e-5)


# ------------------------------------------------------------------ polytope
def polytope_model(units=None):
    keras.utils.set_random_seed(0)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=None if units else 3, units=units,
                              seed=0, name="p")
    # A layer before the tree: the callback maps x through it batch by batch.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Rescaling(2.0, offset=0.1), tree])
    tree.node_state.assign(topology.perfect(1, 2))
    return model, tree


def polytope_leaves(cb, model, tree):
    cb.set_model(model)
    cb.on_epoch_end(0)
    return np.asarray(tree.leaf_values).copy()


@pytest.mark.parametrize("weights", ["none", "sample_weight", "class_weight", "regression"])
def test_polytope_leaves_from_a_dataset_or_a_list_of_batches_equal_those_from_arrays(weights):
    x, y, w = problem()
    units = 2 if weights == "regression" else None
    if units:
        y = np.stack([x[:, 0] - x[:, 1], x[:, 2]], 1).astype("float32")
    cw = {0: 2.0, 2: 0.25} if weights == "class_weight" else None
    sw = w if weights in ("sample_weight", "regression") else None
    expected = polytope_leaves(PolytopeLeafUpdate(x, y, sample_weight=sw, class_weight=cw, batch_size=40),
                               *polytope_model(units))
    leaves = expected[0, 3:]
    assert not np.allclose(leaves, leaves[:1])  # samples reach different leaves: the test can fail
    for kind, data in as_sources(x, y, sw).items():
        got = polytope_leaves(PolytopeLeafUpdate(data, class_weight=cw), *polytope_model(units))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=kind)
    if weights != "none":
        plain = polytope_leaves(PolytopeLeafUpdate(x, y), *polytope_model(units))
        assert not np.allclose(plain, expected, atol=1e-4)


def test_polytope_leaf_update_config_and_deep_copy_of_a_stream():
    x, y, _ = problem()
    data = as_sources(x, y)["list"]
    cb = PolytopeLeafUpdate(data, every_epoch=False, batch_size=16)
    assert cb.get_config() == {"every_epoch": False, "layers": None, "batch_size": 16}
    clone = copy.deepcopy(cb)
    assert clone.x is data and clone.y is None
    with pytest.raises(ValueError, match="PolytopeLeafUpdate needs non-empty x and y"):
        PolytopeLeafUpdate(x)
    with pytest.raises(ValueError, match="PolytopeLeafUpdate: with a dataset, give sample weights inside"):
        PolytopeLeafUpdate(data, sample_weight=np.ones(len(x)))
    with pytest.raises(ValueError, match="PolytopeLeafUpdate reads the data at every epoch, but x is a one-shot"):
        PolytopeLeafUpdate(iter(data))
    assert PolytopeLeafUpdate(iter(data), every_epoch=False).every_epoch is False


@pytest.mark.parametrize("source", ["arrays", "list"])
def test_polytope_statistics_of_two_workers_sum_to_the_one_worker_statistics(monkeypatch, source):
    x, y, w = problem()
    expected = polytope_leaves(PolytopeLeafUpdate(x, y, sample_weight=w), *polytope_model())
    state = {}

    def reset():
        state["model"], state["tree"] = polytope_model()

    def run():
        cb = (PolytopeLeafUpdate(x, y, sample_weight=w, batch_size=32) if source == "arrays"
              else PolytopeLeafUpdate(as_sources(x, y, w)["list"]))
        return polytope_leaves(cb, state["model"], state["tree"])

    leaves, local, summed = two_workers(monkeypatch, run, reset)
    np.testing.assert_allclose(leaves, expected, rtol=1e-5, atol=1e-6)
    theirs, total = local[0][0], summed[0][0]
    assert 0 < theirs[0].sum() < total[0].sum()  # the root holds each worker's total weight
    np.testing.assert_allclose(total[0].sum(), w.sum(), rtol=1e-6)


@pytest.mark.slow
def test_em_leaves_of_a_multi_input_model_from_a_dict_of_arrays_or_a_dataset_of_dicts():
    x, y, w = problem()
    inputs = {"a": x[:, :2], "b": x[:, 2:]}

    def dict_model():
        keras.utils.set_random_seed(0)
        a, b = keras.Input((2,), name="a"), keras.Input((1,), name="b")
        tree = EndToEndTree(max_depth=2, num_classes=3, seed=0, name="t")
        return keras.Model({"a": a, "b": b}, tree(keras.layers.Concatenate()([a, b]))), tree

    expected = em_leaves(EMLeafUpdate(inputs, y, sample_weight=w, batch_size=40), *dict_model())
    np.testing.assert_allclose(expected, em_leaves(EMLeafUpdate(x, y, sample_weight=w), *em_model()),
                               rtol=1e-5, atol=1e-7)
    ds = as_sources(inputs, y, w)["dataset"]
    np.testing.assert_allclose(em_leaves(EMLeafUpdate(ds), *dict_model()), expected, rtol=1e-5, atol=1e-7)


_WORKER = """
import json, os, sys
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": %(hosts)r},
                                      "task": {"type": "worker", "index": int(sys.argv[1])}})
import numpy as np, tensorflow as tf, keras
from keras_trees import streaming, topology
from keras_trees.callbacks import EMLeafUpdate
from keras_trees.layers import ConvexPolytopeTree, EndToEndTree
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(150, 3)).astype("float32")
y = ((x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3)).astype("int32")
w = rng.uniform(0.2, 3.0, size=150)
ds = tf.data.Dataset.from_tensor_slices((x, y, w)).batch(32)
out = {}
for name in ("arrays", "dataset"):
    with strategy.scope():
        keras.utils.set_random_seed(0)
        tree = EndToEndTree(max_depth=2, num_classes=3, seed=0)
        model = keras.Sequential([keras.Input((3,)), tree])
    cb = EMLeafUpdate(x, y, sample_weight=w, batch_size=32) if name == "arrays" else EMLeafUpdate(ds)
    cb.set_model(model)
    out["workers"] = streaming.workers(model)
    cb.on_train_begin()
    cb.update()
    out["em_" + name] = tree.leaves_numpy().tolist()
with strategy.scope():
    poly = ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=3, seed=0)
    poly.build((None, 3))
    poly.node_state.assign(topology.perfect(1, 2))
    out["counts"] = poly.set_leaves_from_data(ds).tolist()
    out["polytope"] = np.asarray(poly.leaf_values).tolist()
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow
def test_two_real_tensorflow_workers_set_the_one_worker_leaves(tmp_path):
    """Two processes of a MultiWorkerMirroredStrategy (CPU, localhost, in a
    network namespace that holds only a loopback interface where available,
    see `tests.distributed.loopback`): each reads half of the batches and the
    all-reduced statistics give every worker the leaves one process computes
    from all the data."""
    import json
    import os
    import socket
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT
    from tests.distributed.loopback import PrivateLoopback

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            ports.append(s.getsockname()[1])
    script = tmp_path / "worker.py"
    script.write_text(_WORKER % {"hosts": [f"localhost:{p}" for p in ports]})
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="")
    network = PrivateLoopback()
    procs = [subprocess.Popen([*network.prefix, sys.executable, str(script), str(i)], cwd=tmp_path, env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    results = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-3000:]
            results.append(json.loads(stdout.split("RESULT")[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        network.close()

    x, y, w = problem()
    expected_em = em_leaves(EMLeafUpdate(x, y, sample_weight=w), *em_model())
    tree = ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=3, seed=0)
    tree.build((None, 3))
    tree.node_state.assign(topology.perfect(1, 2))
    counts = tree.set_leaves_from_data(x, y, sample_weight=w)
    for index, result in enumerate(results):
        assert result["workers"] == [2, index]
        np.testing.assert_allclose(result["em_arrays"], expected_em, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(result["em_dataset"], expected_em, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(result["counts"], counts, rtol=1e-6)
        np.testing.assert_allclose(result["polytope"], np.asarray(tree.leaf_values), rtol=1e-5, atol=1e-6)
