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
