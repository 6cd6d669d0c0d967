"""The test runner (``python -m tests``): its tiers and its closing report."""

import pytest

from tests import __main__ as runner


def test_slowest_reads_every_run_and_sorts(tmp_path):
    for backend, cases in {"tensorflow": [("tests.ops.test_a", "test_x", 2.5), ("tests.test_b", "test_y[1]", 0.1)],
                           "jax": [("tests.backends.test_c", "test_z", 7.0)]}.items():
        body = "".join(f'<testcase classname="{c}" name="{n}" time="{t}"/>' for c, n, t in cases)
        (tmp_path / f"{backend}.xml").write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    reports = {b: str(tmp_path / f"{b}.xml") for b in ("tensorflow", "jax", "torch")}  # torch: no file
    assert runner.slowest(reports, count=2) == [(7.0, "jax", "tests/backends/test_c.py::test_z"),
                                               (2.5, "tensorflow", "tests/ops/test_a.py::test_x")]


def test_fast_tier_leaves_out_the_slow_and_distributed_markers(monkeypatch):
    commands = []

    class Done:
        returncode = 5  # pytest's "no tests ran"
        stdout = iter(["1 deselected\n"])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def popen(cmd, cwd, env, stdout, text):
        commands.append((cmd, env["KERAS_TREES_TEST_TIER"]))
        return Done()

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    monkeypatch.setenv("KERAS_TREES_TEST_BACKENDS", "torch")
    assert runner.main(["--fast", "-k", "hinge"]) == 1  # no test ran: a failure
    [(cmd, tier)] = commands
    assert tier == "fast" and cmd[cmd.index("-m", 3) + 1] == runner.FAST_MARKERS == "not slow and not distributed"
    assert "--fast" not in cmd and cmd[-2:] == ["-k", "hinge"] and "tests/backends" in cmd


@pytest.mark.parametrize("marker", ["slow", "distributed"])
def test_markers_are_registered(pytestconfig, marker):
    assert any(line.startswith(marker + ":") for line in pytestconfig.getini("markers"))


def test_cpu_costs_sum_each_run_and_sort_its_tests(tmp_path):
    logs = {b: str(tmp_path / b) for b in ("tensorflow", "jax", "torch")}  # torch: no log
    (tmp_path / "tensorflow.11.jsonl").write_text('["a.py::x", 1.5, 2.0]\n["a.py::y", 0.25, 0]\n')
    (tmp_path / "tensorflow.12.jsonl").write_text('["b.py::z", 4.0, 0.5]\n')
    (tmp_path / "jax.13.jsonl").write_text('["c.py::w", 0.5, 0.0]\n')
    totals, cases = runner.cpu_costs(logs)
    assert totals == {"tensorflow": 8.25, "jax": 0.5}
    assert cases == [(4.5, "tensorflow", "b.py::z"), (3.5, "tensorflow", "a.py::x"),
                     (0.5, "jax", "c.py::w"), (0.25, "tensorflow", "a.py::y")]


def test_each_test_logs_its_own_and_its_childrens_cpu(tmp_path, monkeypatch):
    import json
    import os
    import subprocess
    import sys

    from tests import conftest

    class Item:
        nodeid = "tests/x.py::test_y"

    monkeypatch.setenv("KERAS_TREES_TEST_CPU", str(tmp_path / "run"))
    hook = conftest.pytest_runtest_protocol(Item(), None)
    next(hook)
    sum(i * i for i in range(300_000))  # own CPU
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    with pytest.raises(StopIteration):
        next(hook)
    [line] = (tmp_path / f"run.{os.getpid()}.jsonl").read_text().splitlines()
    name, own, children = json.loads(line)
    assert name == Item.nodeid and own > 0 and children > 0.05
    monkeypatch.delenv("KERAS_TREES_TEST_CPU")
    hook = conftest.pytest_runtest_protocol(Item(), None)
    next(hook)
    with pytest.raises(StopIteration):
        next(hook)
    assert len((tmp_path / f"run.{os.getpid()}.jsonl").read_text().splitlines()) == 1  # unset: nothing logged
