"""Helpers of the streaming tests: the same data as every kind of source, and
a simulated two-worker run of a statistic pass."""

import keras
import numpy as np
import tensorflow as tf

from keras_trees import streaming


def as_sources(x, y, w=None, batch=32):
    """``{kind: data}``: the same samples (``x`` arrays or a dict of them) as a
    batched tf.data.Dataset and as a list of batches (with ``w`` as the batches' third element when given)."""
    cut = lambda i: keras.tree.map_structure(lambda a: a[i:i + batch], x)  # noqa: E731 (also a dict of inputs)
    parts = [(cut(i), y[i:i + batch]) + (() if w is None else (w[i:i + batch],))
             for i in range(0, len(y), batch)]
    ds = tf.data.Dataset.from_tensor_slices((x, y) if w is None else (x, y, w)).batch(batch)
    return {"dataset": ds, "list": parts}


def two_workers(monkeypatch, run, reset):
    """Runs ``run()`` as worker 1 of 2 (capturing what it all-reduces), then,
    after ``reset()``, as worker 0 with ``all_reduce_sum`` adding worker 1's
    sums: what a real two-worker all-reduce gives worker 0. Returns
    ``(worker 0's result, worker 1's local sums, the summed statistics)``."""
    local, summed = [], []

    def capture(arrays, model=None):
        arrays = [np.array(a, np.float64) for a in arrays]
        local.append(arrays)
        return arrays

    monkeypatch.setattr(streaming, "workers", lambda model=None: (2, 1))
    monkeypatch.setattr(streaming, "all_reduce_sum", capture)
    reset()
    run()
    other = iter(list(local))

    def add_other(arrays, model=None):
        theirs = next(other)
        assert [a.shape for a in theirs] == [np.shape(a) for a in arrays]  # a collective: same shapes
        out = [np.asarray(a, np.float64) + b for a, b in zip(arrays, theirs)]
        summed.append(out)
        return out

    monkeypatch.setattr(streaming, "workers", lambda model=None: (2, 0))
    monkeypatch.setattr(streaming, "all_reduce_sum", add_other)
    reset()
    result = run()
    assert len(summed) == len(local) > 0  # both workers made the same collective calls
    monkeypatch.undo()
    return result, local, summed


def lockstep_workers(monkeypatch, run, num_workers=2):
    """Runs ``run()`` as each of ``num_workers`` workers at once (one thread
    each), ``all_reduce_sum`` adding what they all pass at the same call (a
    barrier): a real all-reduce, where a later pass may depend on an earlier
    sum. Returns ``(results by worker, [per call: the workers' local sums])``."""
    import threading

    me = threading.local()
    barrier = threading.Barrier(num_workers, timeout=300)
    calls, lock = [], threading.Lock()

    def workers(model=None):
        return num_workers, me.index

    def all_reduce_sum(arrays, model=None):
        arrays = [np.array(a, np.float64) for a in arrays]
        call = me.calls
        me.calls += 1
        with lock:
            while len(calls) <= call:
                calls.append({})
            calls[call][me.index] = arrays
        barrier.wait()
        theirs = [calls[call][k] for k in range(num_workers)]
        shapes = [[a.shape for a in arrays] for arrays in theirs]
        assert all(s == shapes[0] for s in shapes), f"a collective with different shapes: {shapes}"
        return [np.sum(parts, axis=0) for parts in zip(*theirs)]

    results, errors = [None] * num_workers, []

    def worker(index):
        me.index, me.calls = index, 0
        try:
            results[index] = run()
        except BaseException as e:  # noqa: BLE001 (re-raised below)
            errors.append(e)
            barrier.abort()

    monkeypatch.setattr(streaming, "workers", workers)
    monkeypatch.setattr(streaming, "all_reduce_sum", all_reduce_sum)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(num_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    if errors:
        raise errors[0]
    assert len({len(c) for c in calls}) <= 1 and all(len(c) == num_workers for c in calls)
    return results, [[c[k] for k in range(num_workers)] for c in calls]
