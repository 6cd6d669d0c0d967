"""Two workers on loopback under ``MultiWorkerMirroredStrategy``, one of them
killed and both restarted, against a single-process run on all the data.

The workers are ``python -m tests.distributed.worker`` processes (see that
module) with ``TF_CONFIG`` naming two free ``localhost`` ports, one CPU thread
each. The cluster runs once per module:

1. both workers start; the streaming checks run, then the Tree Ensemble Layer
   trains with ``BackupAndRestore``; the second worker exits when epoch 3
   begins, and the first then fails on its own (its collectives are aborted
   once the coordination service misses the dead worker's heartbeats) or is
   killed after a grace period;
2. both workers restart (``MultiWorkerMirroredStrategy`` needs every worker
   back after a failure) on fresh ports, resume from the backup, grow an
   end-to-end tree from the same sharded dataset (``GreedyLevelGrowth`` with
   ``EMLeafUpdate``), then grow a convex polytope tree by ``fit_greedy`` and
   refit a non-greedy tree's leaves on it;
3. the reference: the same script without ``TF_CONFIG`` (one process, all the
   data, the same global batch), run alongside step 1.

Addresses: ``TF_CONFIG`` names only ``localhost`` ports and the workers connect
only there, but TensorFlow's gRPC server listens on all interfaces (it binds
``0.0.0.0:<port>``; ``TF_CONFIG`` has no bind address): so every process of
the cluster runs in a network namespace that holds only a loopback interface
(`tests.distributed.loopback`), where no other machine reaches its ports.

Tolerance: the workers hold identical weights (mirrored variables), so their
results must be bit-identical. Against the single process they differ only by
the float32 summation order of the gradients (two half-batch gradients summed
by the all-reduce instead of one full batch), carried through 96 Adam steps:
measured 7e-6 on predictions of magnitude 3.5; the check allows 1e-4.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.distributed.loopback import PrivateLoopback, listening_interfaces
from tests.distributed.worker import DIED, TEL_EPOCHS

pytestmark = pytest.mark.distributed

DIE_AT_EPOCH = 3
RUN_TIMEOUT = 240  # seconds per phase; a hung cluster is killed and the test fails
GRACE = 60  # seconds the surviving worker gets to fail after its peer died
ATOL = 1e-4


def free_ports(count):
    """``count`` distinct free TCP ports on the loopback interface."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Run:
    """A worker process writing its output to a log file."""

    def __init__(self, name, out, args, tf_config=None, prefix=()):
        env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
        env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("TF_CONFIG", None)
        if tf_config is not None:
            env["TF_CONFIG"] = json.dumps(tf_config)
        self.name = name
        self.log_path = os.path.join(out, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "tests.distributed.worker", "--out", out, *args],
            cwd=REPO_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.log.close()

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()


def cluster(name, out, args, ports, prefix):
    hosts = [f"localhost:{p}" for p in ports]
    return [Run(f"{name}{i}", out, args, {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}},
                prefix) for i in range(len(ports))]


def wait(runs, timeout, until=None):
    """Waits until every run exited (or ``until(runs)`` holds); kills all on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(r.proc.poll() is not None for r in runs) or (until is not None and until(runs)):
            return
        time.sleep(0.5)
    for r in runs:
        r.kill()
    logs = "\n".join(f"--- {r.name}\n{r.output()[-3000:]}" for r in runs)
    pytest.fail(f"the workers did not finish within {timeout} s:\n{logs}")


def failure(runs, message):
    logs = "\n".join(f"--- {r.name} (exit {r.proc.returncode})\n{r.output()[-4000:]}" for r in runs)
    return f"{message}\n{logs}"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    growth = True
    root = tmp_path_factory.mktemp("multi_worker")
    out, ref_out = str(root / "workers"), str(root / "reference")
    os.makedirs(out)
    os.makedirs(ref_out)
    backup = str(root / "backup")
    extra = ["--growth"] if growth else []
    runs = []
    network = PrivateLoopback()
    try:
        # 1. Two workers, the second dies when epoch 3 begins; the reference alongside.
        first = cluster("first", out, ["--backup", backup, "--die-at-epoch", str(DIE_AT_EPOCH)], free_ports(2),
                        network.prefix)
        reference = Run("reference", ref_out, ["--backup", str(root / "reference_backup"), *extra])
        runs = [*first, reference]
        wait(first, RUN_TIMEOUT, until=lambda rs: rs[1].proc.poll() is not None)
        assert first[1].proc.returncode == DIED, failure(first, "the second worker did not exit on purpose")
        survivor_failed = True
        try:
            first[0].proc.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:  # a cluster manager would stop it: so do we
            survivor_failed = False
        for r in first:
            r.kill()
        assert first[0].proc.returncode != 0, failure(first, "the surviving worker finished training alone")
        epochs_backed_up = []
        for i in range(2):
            with open(os.path.join(backup, f"worker{i}", "training_metadata.json")) as f:
                epochs_backed_up.append(json.load(f)["epoch"])
        # 2. Both workers restart and resume from the backup.
        second = cluster("second", out, ["--backup", backup, *extra], free_ports(2), network.prefix)
        runs += second
        wait(second, RUN_TIMEOUT)
        for r in second:
            assert r.proc.returncode == 0, failure(second, "a restarted worker failed")
        wait([reference], RUN_TIMEOUT)
        assert reference.proc.returncode == 0, failure([reference], "the single-process run failed")
        loaded = {"growth": growth, "epochs_backed_up": epochs_backed_up, "survivor_failed": survivor_failed,
                  "survivor_log": first[0].output(), "network": network.reason,
                  "interfaces": listening_interfaces(network.prefix)}
        for key, directory, count in (("workers", out, 2), ("reference", ref_out, 1)):
            loaded[key] = []
            for i in range(count):
                item = {}
                with open(os.path.join(directory, f"streaming_{i}.json")) as f:
                    item["streaming"] = json.load(f)
                item["tel"] = dict(np.load(os.path.join(directory, f"tel_{i}.npz")))
                if growth:
                    item["growth"] = dict(np.load(os.path.join(directory, f"growth_{i}.npz")))
                    item["statistics"] = dict(np.load(os.path.join(directory, f"statistics_{i}.npz")))
                loaded[key].append(item)
        return loaded
    finally:
        for r in runs:
            r.kill()
        network.close()


def test_the_workers_network_is_loopback_only(results):
    """The cluster's processes saw one network interface, the loopback: the
    ports their gRPC servers open on every interface are unreachable from
    outside."""
    if results["network"]:
        pytest.skip(f"no private network namespace here: {results['network']}")
    assert results["interfaces"] == ["lo"]


def expected_share(name, worker, num_workers=2, n=23):
    rows = np.arange(n)
    block = {"arrays": 4, "dataset": 4, "list": 4, "callable": 5, "dataset_shard_off": 1}[name]
    return ((rows // block) % num_workers == worker).astype(float)


SOURCES = ["arrays", "callable", "dataset", "dataset_shard_off", "list"]


@pytest.mark.slow
def test_workers_and_shards(results):
    for index, worker in enumerate(results["workers"]):
        s = worker["streaming"]
        assert s["workers_model"] == [2, index] and s["workers_scope"] == [2, index]
        for name in SOURCES:
            assert s[f"{name}_batches"] == [2, index], name
            # This worker's share, and every row read by exactly one worker.
            np.testing.assert_array_equal(s[f"{name}_local"], expected_share(name, index), err_msg=name)
            np.testing.assert_array_equal(s[f"{name}_total"], np.ones(23), err_msg=name)
    s = results["reference"][0]["streaming"]
    assert s["workers_model"] == [1, 0] and s["workers_scope"] == [1, 0]
    for name in SOURCES:
        np.testing.assert_array_equal(s[f"{name}_local"], np.ones(23), err_msg=name)


def test_all_reduce_sum(results):
    for worker in results["workers"]:
        a, b, c = worker["streaming"]["all_reduce"]
        # worker w sent (w + 1) * arange + 0.25, [1e12 + w, (w + 1) / 3], 7 (w + 1)
        np.testing.assert_array_equal(a, 3 * np.arange(6.0).reshape(2, 3) + 0.5)
        assert b[0] == 2e12 + 1  # float64 all the way (float32 would round it)
        np.testing.assert_allclose(b[1], 1.0, rtol=1e-15)
        assert c == 21.0
        assert worker["streaming"]["all_reduce_shapes"] == [[2, 3], [2], []]
        assert worker["streaming"]["all_reduce_dtypes"] == ["float64"] * 3
    a, b, c = results["reference"][0]["streaming"]["all_reduce"]  # one worker: unchanged
    np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3) + 0.25)
    assert b == [1e12, 1 / 3] and c == 7.0


def test_tree_ensemble_resumes_and_matches_one_process(results):
    assert results["epochs_backed_up"] == [DIE_AT_EPOCH, DIE_AT_EPOCH]
    if results["survivor_failed"]:
        assert "UnavailableError" in results["survivor_log"] or "unhealthy" in results["survivor_log"]
    w0, w1 = (w["tel"] for w in results["workers"])
    ref = results["reference"][0]["tel"]
    assert int(ref["epochs_run"]) == TEL_EPOCHS
    # The restarted workers ran only the epochs after the backup.
    assert int(w0["epochs_run"]) == int(w1["epochs_run"]) == TEL_EPOCHS - DIE_AT_EPOCH
    weights = sorted(k for k in ref if k.startswith("w"))
    assert weights
    for key in ["prediction", *weights]:
        np.testing.assert_array_equal(w0[key], w1[key], err_msg=key)
        np.testing.assert_allclose(w0[key], ref[key], rtol=0, atol=ATOL, err_msg=key)
    # The resumed epochs' losses continue the single-process run's.
    np.testing.assert_allclose(w0["loss"], ref["loss"][DIE_AT_EPOCH:], rtol=1e-5)


def test_greedy_growth_with_em_leaves_matches_one_process(results):
    w0, w1 = (w["growth"] for w in results["workers"])
    ref = results["reference"][0]["growth"]
    np.testing.assert_array_equal(w0["node_state"], w1["node_state"])
    np.testing.assert_array_equal(w0["leaves"], w1["leaves"])
    np.testing.assert_array_equal(w0["prediction"], w1["prediction"])
    np.testing.assert_array_equal(w0["node_state"], ref["node_state"])
    assert int(np.sum(w0["num_leaves"])) == int(np.sum(ref["num_leaves"])) > 2  # the tree grew
    np.testing.assert_allclose(w0["leaves"], ref["leaves"], rtol=0, atol=ATOL)
    np.testing.assert_allclose(w0["prediction"], ref["prediction"], rtol=0, atol=ATOL)


def test_polytope_and_non_greedy_statistics_match_one_process(results):
    w0, w1 = (w["statistics"] for w in results["workers"])
    ref = results["reference"][0]["statistics"]
    for key in w0:  # the workers agree exactly, also after training stumps together
        np.testing.assert_array_equal(w0[key], w1[key], err_msg=key)
    # Statistics only (no stump training): the same tree as one process on all the data.
    np.testing.assert_array_equal(w0["polytope0_state"], ref["polytope0_state"])
    assert (w0["polytope0_state"] == 2).sum() >= 1  # it split (topology.SPLIT)
    np.testing.assert_allclose(w0["polytope0_leaves"], ref["polytope0_leaves"], rtol=0, atol=ATOL)
    np.testing.assert_allclose(w0["polytope0_prediction"], ref["polytope0_prediction"], rtol=0, atol=ATOL)
    np.testing.assert_array_equal(w0["refitted"], ref["refitted"])
    np.testing.assert_allclose(w0["nongreedy_leaves"], ref["nongreedy_leaves"], rtol=0, atol=ATOL)
