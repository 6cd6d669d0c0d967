"""PyTorch's threads during the estimators' fit and prediction: one intra-op
thread by default (``_threads.TORCH_DEFAULT_THREADS``), restored afterwards;
``n_jobs`` and ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` override it; the
inter-op pool is left alone. Wall times are measured by
``benchmarks/fit_time.py --backend tensorflow torch`` (``benchmarks/NOTES.md``), not here."""

import sys
import types

import keras
import numpy as np
import pytest

from keras_trees import estimators as E
from keras_trees.estimators import _threads

from ._settings import tiny


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in for ``torch``'s thread functions (7 threads), on the torch backend."""
    state = types.SimpleNamespace(threads=7, calls=[])

    def set_num_threads(n):
        state.calls.append(n)
        state.threads = n

    fake = types.SimpleNamespace(get_num_threads=lambda: state.threads, set_num_threads=set_num_threads,
                                 set_num_interop_threads=lambda n: pytest.fail("inter-op threads set"))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    for name in _threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return state


def test_torch_gets_one_thread_by_default_and_it_is_restored(fake_torch):
    assert _threads.TORCH_DEFAULT_THREADS == 1
    with _threads.limit(None, "T"):
        assert fake_torch.threads == 1
    assert fake_torch.calls == [1, 7] and fake_torch.threads == 7


def test_torch_threads_restored_after_an_error(fake_torch):
    with pytest.raises(KeyError):
        with _threads.limit(None, "T"):
            raise KeyError("in fit")
    assert fake_torch.threads == 7


def test_n_jobs_chooses_torch_threads(fake_torch):
    with _threads.limit(2, "T"):
        assert fake_torch.threads == 2
    with _threads.limit(-1, "T"):
        assert fake_torch.threads == _threads.cpu_count()
    assert fake_torch.threads == 7


@pytest.mark.parametrize("variable", _threads.THREAD_VARIABLES)
def test_a_thread_variable_keeps_torch_s_own_choice(fake_torch, monkeypatch, variable):
    monkeypatch.setenv(variable, "4")
    with _threads.limit(None, "T"):
        assert fake_torch.threads == 7
    assert fake_torch.calls == []
    assert _threads.torch_threads(3) == 3  # n_jobs still counts


def test_other_backends_keep_their_threads_at_n_jobs_none(monkeypatch):
    from threadpoolctl import threadpool_info

    before = [pool["num_threads"] for pool in threadpool_info()]
    for backend in ("tensorflow", "jax"):
        monkeypatch.setattr(keras.backend, "backend", lambda backend=backend: backend)
        with _threads.limit(None, "T"):
            assert [pool["num_threads"] for pool in threadpool_info()] == before


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="PyTorch's real threads: the torch backend")
def test_fit_and_predict_run_on_one_torch_thread_and_restore_it(monkeypatch):
    import torch

    for name in _threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    seen = []
    estimator = tiny(E.TreeEnsembleClassifier, random_state=0)
    original = estimator._fit_candidates

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    estimator._fit_candidates = spy
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 3))
    estimator.fit(x, (x[:, 0] > 0).astype(int))
    assert seen == [1] and torch.get_num_threads() == before
    interop = torch.get_num_interop_threads()
    estimator.predict(x)
    assert torch.get_num_threads() == before and torch.get_num_interop_threads() == interop
    with _threads.limit(2, "T"):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
