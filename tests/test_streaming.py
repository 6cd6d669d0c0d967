"""keras_trees.streaming: every data source as batches, errors, worker shards, all-reduce."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_trees import streaming


def data(n=23, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = (np.arange(n) % 3).astype("int32")
    w = rng.uniform(0.5, 2.0, size=n)
    return x, y, w


def collect(batches):
    xs, ys, ws = [], [], []
    for xb, yb, wb in batches:
        xs.append(xb)
        ys.append(yb)
        ws.append(wb)
    return xs, ys, ws


def joined(parts):
    return np.concatenate(parts) if parts else np.zeros(0)


class Seq(keras.utils.PyDataset):
    def __init__(self, x, y, w=None, batch=5):
        super().__init__()
        self.x, self.y, self.w, self.batch = x, y, w, batch

    def __len__(self):
        return -(-len(self.x) // self.batch)

    def __getitem__(self, i):
        sl = slice(i * self.batch, (i + 1) * self.batch)
        return (self.x[sl], self.y[sl]) if self.w is None else (self.x[sl], self.y[sl], self.w[sl])


def sources(x, y, w=None, batch=5):
    """The same data as every kind of stream (name -> source)."""
    parts = [(x[i:i + batch], y[i:i + batch]) + (() if w is None else (w[i:i + batch],))
             for i in range(0, len(x), batch)]
    ds = tf.data.Dataset.from_tensor_slices((x, y) if w is None else (x, y, w)).batch(batch)
    return {
        "dataset": ds,
        "pydataset": Seq(x, y, w, batch),
        "list": parts,
        "tuple_of_batches": tuple(parts),
        "callable": lambda: iter(parts),
        "generator_function": lambda: (p for p in parts),
    }


@pytest.mark.parametrize("kind", ["dataset", "pydataset", "list", "tuple_of_batches", "callable",
                                  "generator_function"])
@pytest.mark.parametrize("weighted", [False, True])
def test_every_source_kind_yields_the_data_in_order_and_is_reiterable(kind, weighted):
    x, y, w = data()
    batches = streaming.stream(sources(x, y, w if weighted else None)[kind], name="reader")
    assert not batches.in_memory and batches.num_workers == 1 and batches.worker_index == 0
    for _ in range(2):  # read twice: the same batches
        xs, ys, ws = collect(batches)
        assert [len(b) for b in xs] == [5, 5, 5, 5, 3]
        np.testing.assert_array_equal(joined(xs), x)
        np.testing.assert_array_equal(joined(ys), y)
        if weighted:
            assert all(b.dtype == np.float64 for b in ws)
            np.testing.assert_allclose(joined(ws), w, rtol=1e-6)
        else:
            assert all(b is None for b in ws)
        assert all(isinstance(b, np.ndarray) for b in xs + ys)
    np.testing.assert_array_equal(batches.sample(), x[:5])


def test_arrays_are_cut_into_batches_with_their_weights():
    x, y, w = data()
    batches = streaming.stream(x, y, w, batch_size=10)
    assert batches.in_memory and batches.x is x and batches.y is y
    xs, ys, ws = collect(batches)
    assert [len(b) for b in xs] == [10, 10, 3]
    np.testing.assert_array_equal(joined(xs), x)
    np.testing.assert_array_equal(joined(ys), y)
    np.testing.assert_array_equal(joined(ws), w)
    # (n, 1) weights are taken as (n,); tensors are converted.
    batches = streaming.stream(tf.constant(x), tf.constant(y), w[:, None], batch_size=10)
    np.testing.assert_array_equal(joined(collect(batches)[2]), w)
    np.testing.assert_array_equal(joined(collect(batches)[0]), x)


def test_a_multi_input_dict_of_arrays_is_batched_per_key():
    x, y, _ = data()
    inputs = {"a": x, "b": x[:, :1] * 2}
    assert streaming.is_array_like(inputs) and streaming.is_array_like([x, x[:, :1]])
    batches = streaming.stream(inputs, y, batch_size=10)
    xs, ys, _ = collect(batches)
    assert all(set(b) == {"a", "b"} for b in xs)
    np.testing.assert_array_equal(np.concatenate([b["a"] for b in xs]), x)
    np.testing.assert_array_equal(np.concatenate([b["b"] for b in xs]), x[:, :1] * 2)
    np.testing.assert_array_equal(joined(ys), y)
    assert set(batches.sample()) == {"a", "b"}
    # A list of inputs works the same way.
    xs, _, _ = collect(streaming.stream([x, x[:, :1]], y, batch_size=10))
    np.testing.assert_array_equal(np.concatenate([b[1] for b in xs]), x[:, :1])
    # A dict-valued dataset (named inputs) streams too.
    ds = tf.data.Dataset.from_tensor_slices((inputs, y)).batch(10)
    xs, _, _ = collect(streaming.stream(ds))
    np.testing.assert_array_equal(np.concatenate([b["a"] for b in xs]), x)


def test_a_one_shot_iterator_is_read_once_then_refused():
    x, y, _ = data()
    parts = list(sources(x, y)["list"])
    batches = streaming.stream(iter(parts), name="EMLeafUpdate")
    np.testing.assert_array_equal(joined(collect(batches)[0]), x)
    with pytest.raises(ValueError, match="EMLeafUpdate: the data is a one-shot iterator and was read already"):
        collect(batches)
    generator = (p for p in parts)
    batches = streaming.stream(generator)
    collect(batches)
    with pytest.raises(ValueError, match="one-shot iterator"):
        collect(batches)


@pytest.mark.parametrize("batch, message", [
    (np.zeros((4, 3)), "every batch of the data must be a tuple \\(x, y\\) or \\(x, y, sample_weight\\), got ndarray"),
    ((np.zeros((4, 3)),), "got tuple of length 1"),
    ((np.zeros((4, 3)), np.zeros(4), np.ones(4), np.ones(4)), "got tuple of length 4"),
    ((np.zeros((4, 3)), None), "the data's batches hold no labels y"),
    ((np.zeros((4, 3)), np.zeros(3)), "a batch has 4 samples in x but 3 in y"),
    ((np.zeros((4, 3)), np.zeros(4), np.ones(3)), "a batch's sample_weight must have shape \\(4,\\), got \\(3,\\)"),
])
def test_malformed_batches_are_refused_naming_the_problem(batch, message):
    with pytest.raises(ValueError, match="reader: .*" + message):
        collect(streaming.stream(lambda: iter([batch]), name="reader"))


def test_bad_arguments_are_refused_naming_them():
    x, y, w = data()
    with pytest.raises(ValueError, match="reader needs the training data"):
        streaming.stream(None, name="reader")
    with pytest.raises(ValueError, match="reader: x is an array, so y \\(the labels\\) is needed"):
        streaming.stream(x, name="reader")
    with pytest.raises(ValueError, match="reader: x has 23 samples but y has 22"):
        streaming.stream(x, y[:-1], name="reader")
    with pytest.raises(ValueError, match="reader: sample_weight must have shape \\(23,\\)"):
        streaming.stream(x, y, w[:-1], name="reader")
    with pytest.raises(ValueError, match="reader: the training data is empty"):
        streaming.stream(x[:0], y[:0], name="reader")
    with pytest.raises(ValueError, match="reader: y must hold one entry per training sample"):
        streaming.stream(x, np.int32(3), name="reader")
    with pytest.raises(ValueError, match="reader: with a dataset, give sample weights inside its batches"):
        streaming.stream(sources(x, y)["list"], sample_weight=w, name="reader")
    with pytest.raises(TypeError, match="reader: x must be arrays \\(with y\\), a tf.data.Dataset"):
        streaming.stream(3.5, name="reader")
    with pytest.raises(ValueError, match="reader: the data is empty"):
        streaming.stream([], name="reader").sample()


@pytest.mark.parametrize("kind", ["arrays", "dataset", "pydataset", "list", "callable"])
def test_two_workers_get_shares_that_partition_the_data(monkeypatch, kind):
    x, y, w = data(n=37)
    seen = []
    for worker in range(2):
        monkeypatch.setattr(streaming, "workers", lambda model=None, worker=worker: (2, worker))
        if kind == "arrays":
            batches = streaming.stream(x, y, w, batch_size=5)
        else:
            batches = streaming.stream(sources(x, y, w)[kind])
        assert (batches.num_workers, batches.worker_index) == (2, worker)
        xs, ys, ws = collect(batches)
        # Every other batch of 5 rows: worker 0 has batches 0, 2, 4, 6; worker 1 has 1, 3, 5, 7.
        assert len(xs) == 4
        rows = np.concatenate([np.arange(i * 5, min(37, i * 5 + 5)) for i in range(worker, 8, 2)])
        np.testing.assert_array_equal(joined(xs), x[rows])
        np.testing.assert_array_equal(joined(ys), y[rows])
        np.testing.assert_allclose(joined(ws), w[rows], rtol=1e-6)
        seen.append(rows)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(37))


def test_a_dataset_with_sharding_off_is_the_workers_own_shard(monkeypatch):
    x, y, _ = data(n=20)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(5).with_options(options)
    monkeypatch.setattr(streaming, "workers", lambda model=None: (2, 1))
    np.testing.assert_array_equal(joined(collect(streaming.stream(ds))[0]), x)


def test_all_reduce_sum_on_one_worker_returns_float64_copies_of_its_input():
    a, b = np.arange(6, dtype="float32").reshape(2, 3), np.array([1.5])
    out = streaming.all_reduce_sum([a, b])
    assert [o.dtype for o in out] == [np.float64, np.float64]
    np.testing.assert_array_equal(out[0], a)
    np.testing.assert_array_equal(out[1], b)
    assert streaming.workers() == (1, 0)
