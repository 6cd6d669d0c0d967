"""Two JAX processes on CPU (``jax.distributed`` with a coordinator on
``localhost``, gloo collectives) against one process: ``streaming.workers``,
the per-process shares of a stream, ``streaming.all_reduce_sum`` and an
``EMLeafUpdate`` M-step (tests/distributed/jax_worker.py).

Every process gives ``EMLeafUpdate`` all the data, as ``fit`` would get it;
the callback reads the process's share (``streaming.stream``) and sums the
statistics over processes (``streaming.all_reduce_sum``), so the leaves equal
the single process's. (A callback that read all the data on every process
without summing would pass too: the shares and sums are checked above.)

Then a tree grown inside ``model.fit`` under ``keras.distribution.DataParallel``
over both processes' CPU devices: ``fit`` auto-shards the global ``tf.data``
pipeline (each process feeds half of every global batch of 64, the gradients
are summed over the mesh) and ``GreedyLevelGrowth``/``EMLeafUpdate`` read every
second batch and sum their statistics through ``streaming.all_reduce_sum``.
Both processes must end with the reference's topology (exactly), losses and
weights (to float32 rounding)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.distributed.test_multi_worker import free_ports

pytestmark = pytest.mark.distributed

TIMEOUT = 240


def start(out, *args):
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TF_CONFIG", None)
    return subprocess.Popen([sys.executable, "-m", "tests.distributed.jax_worker", "--out", out, *args],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    pytest.importorskip("jax")
    pytest.importorskip("tensorflow")  # the growth scenario feeds fit a tf.data pipeline
    root = tmp_path_factory.mktemp("jax_processes")
    out, ref = str(root / "processes"), str(root / "reference")
    os.makedirs(out)
    os.makedirs(ref)
    port = free_ports(1)[0]
    procs = [start(out, "--process", str(i), "--processes", "2", "--port", str(port)) for i in range(2)]
    procs.append(start(ref))
    try:
        logs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    except subprocess.TimeoutExpired:
        pytest.fail(f"the JAX processes did not finish within {TIMEOUT} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    return ([dict(np.load(os.path.join(out, f"jax_{i}.npz"))) for i in range(2)],
            dict(np.load(os.path.join(ref, "jax_0.npz"))))


@pytest.mark.slow
def test_shares_and_all_reduce_sum(results):
    processes, reference = results
    rows = np.arange(23)
    for index, r in enumerate(processes):
        assert r["workers"].tolist() == [2, index]
        # As fit under keras.distribution: a tf.data.Dataset is shared out by
        # process (every other batch of 4), arrays and lists are each process's own.
        share = ((rows // 4) % 2 == index).astype(float)
        np.testing.assert_array_equal(r["dataset_local"], share)
        np.testing.assert_array_equal(r["dataset_total"], np.ones(23))
        for kind in ("arrays", "list"):
            np.testing.assert_array_equal(r[f"{kind}_local"], np.ones(23))
            np.testing.assert_array_equal(r[f"{kind}_total"], 2 * np.ones(23))
        np.testing.assert_array_equal(r["sum_a"], 3 * np.arange(6.0).reshape(2, 3) + 0.5)
        assert r["sum_b"][0] == 2e12 + 1  # float32 alone would round it
        # process_allgather sends float32 hi/lo parts: ~48 bits per summand
        np.testing.assert_allclose(r["sum_b"][1], 1.0, rtol=1e-14)
    assert reference["workers"].tolist() == [1, 0]
    np.testing.assert_array_equal(reference["arrays_local"], np.ones(23))
    np.testing.assert_array_equal(reference["sum_a"], np.arange(6.0).reshape(2, 3) + 0.25)


def test_em_leaves_match_one_process(results):
    (p0, p1), reference = results
    np.testing.assert_array_equal(p0["leaves"], p1["leaves"])
    np.testing.assert_allclose(p0["leaves"], reference["leaves"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(p0["prediction"], reference["prediction"], rtol=0, atol=1e-6)


def test_greedy_growth_in_fit_under_data_parallel(results):
    (p0, p1), reference = results
    # fit fed each process half of the rows (DataParallel's auto-sharding).
    assert p0["fit_rows"] == p1["fit_rows"] == 256 and reference["fit_rows"] == 512
    growth_keys = sorted(k for k in reference if k.startswith("growth_"))
    assert "growth_w0" in growth_keys
    for key in growth_keys:  # the processes hold one replicated model
        np.testing.assert_array_equal(p0[key], p1[key], err_msg=key)
    # Best-first growth from the root stump: 5 leaves, chosen by summed gains.
    state = reference["growth_state"]
    assert (state == 1).sum() == 5 and (state == 2).sum() == 4
    np.testing.assert_array_equal(p0["growth_state"], state)
    # The mesh sums the gradient of two half batches (another float32
    # summation order than one device's): ~1 ulp per step over ~50 Adam steps
    # (observed <= 5e-7). Equal losses per epoch mean every step saw the whole
    # global batch although each process fed only half of it.
    np.testing.assert_allclose(p0["growth_loss"], reference["growth_loss"], rtol=1e-6)
    for key in growth_keys:
        if key.startswith("growth_w"):
            np.testing.assert_allclose(p0[key], reference[key], rtol=1e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(p0["growth_leaves"], reference["growth_leaves"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(p0["growth_prediction"], reference["growth_prediction"], rtol=0, atol=1e-6)


def test_polytope_fit_greedy_statistics_match_one_process(results):
    (p0, p1), reference = results
    for key in ("polytope_state", "polytope_leaves", "polytope_prediction"):
        np.testing.assert_array_equal(p0[key], p1[key], err_msg=key)
        # Statistics only: float64 sums of the same rows, so exact or nearly.
        np.testing.assert_allclose(p0[key], reference[key], rtol=0, atol=1e-6, err_msg=key)
