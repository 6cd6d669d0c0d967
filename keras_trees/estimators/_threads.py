"""``n_jobs``: the CPU threads an estimator's ``fit`` and prediction use.

What can be limited, per Keras backend (the library's compiled kernels run
their parallel loops, ``ParallelFor`` of ``custom_ops/core/common.h``, on the
framework's own intra-op thread pool, so they follow the framework):

* **torch**: ``torch.set_num_threads(n)`` for the duration of the call,
  restored afterwards: PyTorch's intra-op pool, which its operations and the
  keras-trees kernels (``TorchParallelFor``) use.
* **tensorflow**: TensorFlow's intra-op pool (its kernels, Eigen, and the
  keras-trees kernels' ``CpuParallelFor``) and inter-op pool are sized once,
  when its runtime starts, for the whole process. If the runtime has not
  started yet (no TensorFlow operation has run in this process), ``n_jobs``
  sets both to ``n`` **for the rest of the process**; once it has started they
  cannot change: an ``n_jobs`` different from the current size warns
  (``RuntimeWarning``) and has no effect on TensorFlow.
* **jax**: XLA's CPU thread pool (which serves the keras-trees XLA kernels)
  is fixed when JAX starts (``XLA_FLAGS``); ``n_jobs`` warns and has no effect
  on it.
* on every backend, the BLAS and OpenMP pools of NumPy, SciPy and
  scikit-learn (the preprocessing, the CART / CO2 initial trees, the NumPy
  routing behind ``feature_importances_``) are limited for the call with
  ``threadpoolctl``.

``n_jobs=None`` (the default) changes nothing: every pool keeps its size (all
cores unless configured otherwise). ``-1`` means all cores, ``-2`` all but
one, as in scikit-learn.
"""

import contextlib
import os
import warnings

import keras


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def resolve(n_jobs):
    """Threads for ``n_jobs`` (None: None, no limit)."""
    if n_jobs is None:
        return None
    n_jobs = int(n_jobs)
    return n_jobs if n_jobs > 0 else max(1, cpu_count() + 1 + n_jobs)


def _tensorflow(n, owner):
    import tensorflow as tf

    threading = tf.config.threading
    if threading.get_intra_op_parallelism_threads() == n and threading.get_inter_op_parallelism_threads() == n:
        return
    try:
        threading.set_intra_op_parallelism_threads(n)
        threading.set_inter_op_parallelism_threads(n)
    except RuntimeError:
        current = threading.get_intra_op_parallelism_threads()
        warnings.warn(
            f"{owner}: n_jobs={n} cannot limit TensorFlow's threads: its thread pools were sized when its "
            f"runtime started (intra-op threads: {current or 'all cores'}) and cannot change in this process. "
            "Set n_jobs on the first estimator fitted in the process, or call "
            "tf.config.threading.set_intra_op_parallelism_threads before TensorFlow runs anything. "
            "(NumPy/SciPy threads are still limited.)", RuntimeWarning, stacklevel=4)


@contextlib.contextmanager
def limit(n_jobs, owner):
    """Runs the body with the threads of ``n_jobs`` (see the module docstring)."""
    n = resolve(n_jobs)
    if n is None:
        yield
        return
    backend = keras.backend.backend()
    restore = None
    if backend == "tensorflow":
        _tensorflow(n, owner)
    elif backend == "torch":
        import torch

        restore = torch.get_num_threads()
        torch.set_num_threads(n)
    elif backend == "jax":
        warnings.warn(
            f"{owner}: n_jobs={n} cannot limit JAX's threads: XLA's CPU thread pool is fixed when JAX starts "
            "(set XLA_FLAGS before importing jax). (NumPy/SciPy threads are still limited.)",
            RuntimeWarning, stacklevel=3)
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=n):
            yield
    finally:
        if restore is not None:
            import torch

            torch.set_num_threads(restore)
