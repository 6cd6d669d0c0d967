"""Training data as a stream of batches, and sums of statistics across workers.

Every statistic the library computes over training data (EM leaves, leaf
refits, node counts and gains of greedy growth) is a sum over samples. It is
accumulated batch by batch from a [`Batches`][keras_trees.streaming.Batches] stream, so the data never
has to fit in memory, and summed over the workers of a distributed run with
[`all_reduce_sum`][keras_trees.streaming.all_reduce_sum] before anything changes, so every replica takes the
same decision.

Data sources ([`stream`][keras_trees.streaming.stream]):

* NumPy arrays (or tensors, or a dict/list of them for multi-input models)
  ``x`` with ``y`` and an optional ``sample_weight``: cut into batches of
  ``batch_size`` rows;
* a batched ``tf.data.Dataset`` yielding ``(x, y)`` or
  ``(x, y, sample_weight)``, as given to ``Model.fit``;
* a ``keras.utils.PyDataset`` (its batches in order);
* any re-iterable of such tuples (a list, an object whose ``__iter__`` starts
  over), or a function without arguments returning a fresh iterable. A
  one-shot iterator (a generator) can be read once only.

Distributed runs: give the statistics the data each worker gives ``fit``;
each worker reads the share of it that ``fit`` reads:

* under a multi-worker ``tf.distribute`` strategy ``fit`` shards every
  source: each worker reads every ``num_workers``-th batch of a
  ``tf.data.Dataset`` (unless its ``auto_shard_policy`` is ``OFF``: the
  worker's data is then its own shard), of arrays (blocks of
  ``batch_size`` rows) and of other sources;
* under JAX with several processes (``keras.distribution`` with
  ``jax.distributed``) a ``tf.data.Dataset`` is shared out by process the
  same way, while arrays and other sources are the process's own data (as
  ``fit`` takes them there);
* under ``torch.distributed`` every rank's data is its own.

[`all_reduce_sum`][keras_trees.streaming.all_reduce_sum] then adds the per-worker sums (the strategy's
all-reduce on TensorFlow, ``process_allgather`` on JAX, ``all_reduce`` when
``torch.distributed`` is initialized); on one worker it returns its input.
"""

import sys

import keras
import numpy as np

from keras_trees.api_export import keras_trees_export, public_api
from keras_trees._arrays import to_numpy


def _tf():
    return sys.modules.get("tensorflow")


def _is_dataset(data):
    tf = _tf()
    return tf is not None and isinstance(data, tf.data.Dataset)


# ------------------------------------------------------------------ workers
def _tf_strategy(model=None):
    tf = _tf()
    if tf is None or keras.backend.backend() != "tensorflow":
        return None
    strategy = getattr(model, "distribute_strategy", None) if model is not None else None
    if strategy is None:
        strategy = tf.distribute.get_strategy()
    return strategy


def _tf_workers(strategy):
    """``(num_workers, worker_index)`` of a tf.distribute strategy."""
    if strategy is None:
        return 1, 0
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1, 0
    spec = resolver.cluster_spec().as_dict()
    jobs = [job for job in ("chief", "worker") if job in spec]
    if not jobs:
        return 1, 0
    num = sum(len(spec[job]) for job in jobs)
    if num <= 1:
        return 1, 0
    task_type, task_id = resolver.task_type, int(resolver.task_id or 0)
    index = task_id + (len(spec.get("chief", [])) if task_type == "worker" else 0)
    return num, index


@keras_trees_export("keras_trees.streaming")
def workers(model=None):
    """``(num_workers, worker_index)`` of the current distributed run
    (``(1, 0)`` outside one). ``model``: the model being trained (its
    ``distribute_strategy`` on TensorFlow)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _tf_workers(_tf_strategy(model))
    if backend == "jax":
        import jax

        return int(jax.process_count()), int(jax.process_index())
    if backend == "torch":
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size()), int(dist.get_rank())
    return 1, 0


@keras_trees_export("keras_trees.streaming")
def all_reduce_sum(arrays, model=None):
    """The element-wise sums over all workers of ``arrays`` (a list of NumPy
    arrays, the same shapes on every worker), as float64 NumPy arrays.

    Every worker must call it at the same point with the same shapes (it is a
    collective). On one worker it returns the arrays unchanged.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    backend = keras.backend.backend()
    if backend == "tensorflow":
        strategy = _tf_strategy(model)
        if _tf_workers(strategy)[0] <= 1:
            return arrays
        return _tf_all_reduce(strategy, arrays)
    if backend == "jax":
        import jax

        if jax.process_count() <= 1:
            return arrays
        from jax.experimental import multihost_utils

        # float64 survives the gather only with x64; send float32 hi/lo parts
        # otherwise, which keeps ~48 bits of each per-worker sum.
        out = []
        for a in arrays:
            hi = a.astype(np.float32)
            lo = (a - hi.astype(np.float64)).astype(np.float32)
            gathered = multihost_utils.process_allgather(np.stack([hi, lo]))
            gathered = np.asarray(gathered, np.float64)
            out.append(gathered.sum(axis=(0, 1)))
        return out
    if backend == "torch":
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
            return arrays
        out = []
        for a in arrays:
            t = torch.as_tensor(a)
            dist.all_reduce(t)
            out.append(t.numpy())
        return out
    return arrays


def _tf_all_reduce(strategy, arrays):
    tf = _tf()
    local = max(1, len(strategy.extended.worker_devices))
    flat = np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0)

    def value(ctx):
        # Each worker contributes its sums once (on its first local replica).
        first = ctx.replica_id_in_sync_group % local == 0
        return tf.constant(flat if first else np.zeros_like(flat))

    per_replica = strategy.experimental_distribute_values_from_function(value)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    total = np.asarray(total.numpy(), np.float64)
    out, start = [], 0
    for a in arrays:
        out.append(total[start:start + a.size].reshape(a.shape))
        start += a.size
    return out


# ------------------------------------------------------------------ batches
def _num_rows(x):
    leaves = keras.tree.flatten(x)
    if not leaves:
        raise ValueError("x holds no arrays")
    return len(leaves[0])


def _numpy(value):
    if value is None:
        return None
    return keras.tree.map_structure(lambda a: np.asarray(to_numpy(a))
                                    if not isinstance(a, np.ndarray) else a, value)


@keras_trees_export("keras_trees.streaming")
class Batches:
    """A re-iterable stream of ``(x, y, sample_weight)`` NumPy batches
    (``sample_weight`` None when not given). Build it with [`stream`][keras_trees.streaming.stream].

    Attributes:
        in_memory: whether the data was given as arrays.
        x, y, sample_weight: the arrays (``in_memory`` only; the worker's part
            in a distributed run).
    """

    def __init__(self, source, name, batch_size, in_memory, x=None, y=None, sample_weight=None,
                 num_workers=1, worker_index=0, one_shot=False):
        self._source = source
        self.name = name
        self.batch_size = batch_size
        self.in_memory = in_memory
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.num_workers, self.worker_index = num_workers, worker_index
        self._one_shot = one_shot
        self._read = False

    @property
    def one_shot(self):
        """Whether the data is a one-shot iterator (it can be read once only)."""
        return self._one_shot

    def __iter__(self):
        if self._one_shot:
            if self._read:
                raise ValueError(
                    f"{self.name}: the data is a one-shot iterator and was read already; pass arrays, a "
                    "tf.data.Dataset, a keras.utils.PyDataset, a list of batches or a function returning a "
                    "fresh iterable of (x, y[, sample_weight]) batches"
                )
            self._read = True
        for element in self._source():
            yield self._unpack(element)

    def _unpack(self, element):
        if self.in_memory:
            return element
        if not isinstance(element, (tuple, list)) or len(element) not in (2, 3):
            raise ValueError(
                f"{self.name}: every batch of the data must be a tuple (x, y) or (x, y, sample_weight), "
                f"got {type(element).__name__}" + (f" of length {len(element)}" if isinstance(element, (tuple, list)) else "")
            )
        x, y = _numpy(element[0]), _numpy(element[1])
        w = _numpy(element[2]) if len(element) == 3 else None
        if y is None:
            raise ValueError(f"{self.name}: the data's batches hold no labels y")
        n = _num_rows(x)
        if len(y) != n:
            raise ValueError(f"{self.name}: a batch has {n} samples in x but {len(y)} in y")
        if w is not None:
            w = np.asarray(w, np.float64)
            if w.ndim == 2 and w.shape[1] == 1:
                w = w[:, 0]
            if w.shape != (n,):
                raise ValueError(f"{self.name}: a batch's sample_weight must have shape ({n},), got {w.shape}")
        return x, y, w

    def sample(self):
        """The x of the first batch (e.g. to build a model)."""
        for x, _, _ in self:
            return x
        raise ValueError(f"{self.name}: the data is empty")


def _array_batches(x, y, w, batch_size, num_workers, worker_index):
    n = _num_rows(x)

    def source():
        starts = range(0, n, batch_size)
        for i, start in enumerate(starts):
            if i % num_workers != worker_index:
                continue
            sl = slice(start, min(n, start + batch_size))
            yield (keras.tree.map_structure(lambda a: a[sl], x), y[sl], None if w is None else w[sl])

    return source


def _shard_off(dataset):
    tf = _tf()
    policy = dataset.options().experimental_distribute.auto_shard_policy
    return policy == tf.data.experimental.AutoShardPolicy.OFF


@keras_trees_export("keras_trees.streaming")
def stream(x, y=None, sample_weight=None, batch_size=4096, name="the data", model=None):
    """The [`Batches`][keras_trees.streaming.Batches] of training data given as arrays or as a stream.

    Args:
        x: arrays (with ``y``), or a data source yielding ``(x, y)`` or
            ``(x, y, sample_weight)`` batches (see the module documentation).
        y: the labels/targets when ``x`` are arrays (None for a data source).
        sample_weight: optional ``(n,)`` weights when ``x`` are arrays.
        batch_size: rows per batch of arrays (a data source keeps its own).
        name: who reads the data (for error messages).
        model: the model being trained (selects the worker's shard under its
            distribution strategy).
    """
    num_workers, index = workers(model)
    if x is None:
        raise ValueError(f"{name} needs the training data: pass x and y, or a dataset of (x, y) batches")
    if y is not None or _is_array_like(x):
        if y is None:
            raise ValueError(f"{name}: x is an array, so y (the labels) is needed as well")
        x = _numpy(x)
        y = np.asarray(to_numpy(y)) if not isinstance(y, np.ndarray) else y
        if np.ndim(y) == 0:
            raise ValueError(f"{name}: y must hold one entry per training sample, got a scalar")
        n = _num_rows(x)
        if len(y) != n:
            raise ValueError(f"{name}: x has {n} samples but y has {len(y)}")
        if n == 0:
            raise ValueError(f"{name}: the training data is empty")
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, np.float64)
            if sample_weight.ndim == 2 and sample_weight.shape[1] == 1:
                sample_weight = sample_weight[:, 0]
            if sample_weight.shape != (n,):
                raise ValueError(f"{name}: sample_weight must have shape ({n},), got {sample_weight.shape}")
        k, i = _share("arrays", num_workers, index)
        return Batches(_array_batches(x, y, sample_weight, batch_size, k, i), name, batch_size,
                       True, x, y, sample_weight, num_workers, index)
    if sample_weight is not None:
        raise ValueError(f"{name}: with a dataset, give sample weights inside its batches (x, y, sample_weight)")
    if _is_dataset(x):
        dataset = x
        k, i = _share("dataset", num_workers, index)
        if k > 1 and not _shard_off(dataset):
            dataset = dataset.shard(k, i)
        return Batches(dataset.as_numpy_iterator, name, batch_size, False, num_workers=num_workers,
                       worker_index=index)
    k, i = _share("source", num_workers, index)
    if isinstance(x, keras.utils.PyDataset):
        def source():
            for j in range(len(x)):
                if j % k == i:
                    yield x[j]
        return Batches(source, name, batch_size, False, num_workers=num_workers, worker_index=index)
    if callable(x):
        def source():
            for j, element in enumerate(x()):
                if j % k == i:
                    yield element
        return Batches(source, name, batch_size, False, num_workers=num_workers, worker_index=index)
    if hasattr(x, "__iter__"):
        one_shot = iter(x) is x

        def source():
            for j, element in enumerate(x):
                if j % k == i:
                    yield element
        return Batches(source, name, batch_size, False, num_workers=num_workers, worker_index=index,
                       one_shot=one_shot)
    raise TypeError(
        f"{name}: x must be arrays (with y), a tf.data.Dataset, a keras.utils.PyDataset or an iterable of "
        f"(x, y[, sample_weight]) batches, got {type(x).__name__}"
    )


def _share(kind, num_workers, index):
    """``(parts, part)``: this worker reads every ``parts``-th batch (from
    ``part``) of a source of ``kind`` ("arrays", "dataset" or "source"), as
    ``fit`` splits that source on the backend: under a multi-worker
    ``tf.distribute`` strategy ``fit`` shards every source; JAX's
    ``keras.distribution`` shards a ``tf.data.Dataset`` by process and takes
    arrays and other sources as the process's own data; PyTorch's ``fit``
    shards nothing (each rank's data is its own, e.g. from a
    ``DistributedSampler``). The sums over workers are right either way."""
    backend = keras.backend.backend()
    if num_workers > 1 and (backend == "tensorflow" or (backend == "jax" and kind == "dataset")):
        return num_workers, index
    return 1, 0


def _is_array_like(x):
    if isinstance(x, np.ndarray) or keras.ops.is_tensor(x):
        return True
    if isinstance(x, dict):
        return bool(x) and all(_is_array_like(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        # A list of arrays (multi-input) is data; a list of (x, y) tuples is a stream.
        return bool(x) and all(isinstance(v, np.ndarray) or keras.ops.is_tensor(v) for v in x) and \
            len({len(v) for v in x}) == 1 and not all(isinstance(v, (tuple, list)) for v in x)
    return False


@keras_trees_export("keras_trees.streaming")
def is_array_like(x):
    """Whether ``x`` is training arrays (an array or tensor, or a non-empty
    dict/list of them: a multi-input model's inputs) rather than a data
    source of batches."""
    return _is_array_like(x)


__all__ = public_api(__name__)
