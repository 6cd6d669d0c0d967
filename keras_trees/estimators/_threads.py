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

``n_jobs=None`` (the default) changes nothing but PyTorch's intra-op threads:
every other pool keeps its size (all cores unless configured otherwise).
``-1`` means all cores, ``-2`` all but one, as in scikit-learn.

**PyTorch with ``n_jobs=None``**: one intra-op thread
(``TORCH_DEFAULT_THREADS``) for the call, restored afterwards, unless
``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set (then PyTorch's own choice
stands). PyTorch runs the estimators' training eagerly, thousands of small
operations per epoch (mini-batches of 32-256 rows), and its OpenMP threads
meet at a barrier at the end of every parallel operation: when another
process keeps the cores busy, each barrier waits for a thread the system has
descheduled, and a fit on two threads ran 10x (hinge forest) to 2x (Tree
Ensemble) slower than on one. TensorFlow's thread pool has no such barrier
(the calling thread does the work another cannot take), so it did not slow
down. On one thread such operations lose little even on a quiet machine.
``n_jobs`` (e.g. ``-1``) gives PyTorch more threads, for large batches.
PyTorch's inter-op threads are left as they are: Keras runs PyTorch's
operations one after another on the calling thread, so that pool (which
serves ``torch.jit.fork``) stays idle, and its size can be set only once per
process, before any parallel work.
"""

import contextlib
import os
import warnings

import keras


#: PyTorch's intra-op threads during a call with ``n_jobs=None`` (see the module docstring).
TORCH_DEFAULT_THREADS = 1
#: Environment variables whose setting keeps PyTorch's own thread count at ``n_jobs=None``.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def torch_threads(n):
    """PyTorch's intra-op threads for a call with ``resolve(n_jobs) == n``
    (None: leave them as they are)."""
    if n is not None:
        return n
    if any(os.environ.get(name) for name in THREAD_VARIABLES):
        return None
    return TORCH_DEFAULT_THREADS


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
    backend = keras.backend.backend()
    restore = None
    if backend == "torch":
        import torch

        threads = torch_threads(n)
        if threads is not None and threads != torch.get_num_threads():
            restore = torch.get_num_threads()
            torch.set_num_threads(threads)
    elif n is not None and backend == "tensorflow":
        _tensorflow(n, owner)
    elif n is not None and backend == "jax":
        warnings.warn(
            f"{owner}: n_jobs={n} cannot limit JAX's threads: XLA's CPU thread pool is fixed when JAX starts "
            "(set XLA_FLAGS before importing jax). (NumPy/SciPy threads are still limited.)",
            RuntimeWarning, stacklevel=3)
    try:
        if n is None:
            yield
        else:
            from threadpoolctl import threadpool_limits

            with threadpool_limits(limits=n):
                yield
    finally:
        if restore is not None:
            import torch

            torch.set_num_threads(restore)
