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


def _commands(monkeypatch, argv):
    """(pytest command, tier) of each run ``runner.main(argv)`` starts, and its
    exit status, with every run reporting "no tests ran"."""
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
    return commands, runner.main(argv)


def test_fast_tier_leaves_out_the_slow_and_distributed_markers(monkeypatch):
    monkeypatch.setenv("KERAS_TREES_TEST_BACKENDS", "torch")
    commands, status = _commands(monkeypatch, ["--fast", "-k", "hinge"])
    assert status == 1  # no test ran: a failure
    [(cmd, tier)] = commands
    assert tier == "fast" and cmd[cmd.index("-m", 3) + 1] == runner.FAST_MARKERS == "not slow and not distributed"
    assert "--fast" not in cmd and cmd[-2:] == ["-k", "hinge"] and "tests/backends" in cmd


def test_workers_get_the_files_in_collection_order(monkeypatch):
    """xdist's default order (files with the most tests first) is turned off:
    the collection order is the cost order of tests/_costs.py."""
    monkeypatch.setenv("KERAS_TREES_TEST_BACKENDS", "jax")
    monkeypatch.setenv("KERAS_TREES_TEST_WORKERS", "2")
    [(cmd, tier)], _ = _commands(monkeypatch, [])
    assert tier == "full" and cmd[cmd.index("--dist") + 1] == "loadfile" and "--no-loadscope-reorder" in cmd


@pytest.mark.parametrize("marker", ["slow", "distributed"])
def test_markers_are_registered(pytestconfig, marker):
    assert any(line.startswith(marker + ":") for line in pytestconfig.getini("markers"))


def test_the_cost_table_names_existing_files():
    import os

    from tests import _costs
    from tests.conftest import REPO_ROOT

    for backend, table in _costs.COSTS.items():
        missing = [path for path in table if not os.path.exists(os.path.join(REPO_ROOT, path))]
        assert not missing, f"{backend}: stale entries in tests/_costs.py: {missing}"
    assert _costs.cost("tests/test_cuda_build.py", "tensorflow") > _costs.cost("tests/test_runner.py", "tensorflow") == 0


def test_collection_is_ordered_by_cost_keeping_each_file_together(request):
    import os

    from tests._costs import cost

    order = [item.nodeid.split("::")[0] for item in request.session.items]
    files = list(dict.fromkeys(order))
    runs = [f for i, f in enumerate(order) if i == 0 or order[i - 1] != f]
    assert runs == files, "the tests of a file are not together"
    costs = [cost(f, os.environ.get("KERAS_BACKEND", "tensorflow")) for f in files]
    assert costs == sorted(costs, reverse=True)
