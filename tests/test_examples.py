"""The examples and tutorials run as written, in their smoke mode.

``python <script> --smoke`` runs the whole script at its smallest settings (one
or two epochs, tiny data); each test runs one script that way in this process
(``tests/_scripts.py``) and checks what it prints and writes. The last tests
check that every script of benchmarks/, examples/ and tutorials/, and every
one the documentation quotes a command for, has such a smoke test.
"""

import glob
import os
import re

import pytest

from tests._scripts import REPO_ROOT, line_with, lines_matching, quoted_scripts, run_in_process


def run(script, tmp_path, capfd, *args):
    return run_in_process(script, ["--smoke", *args], tmp_path, capfd)


@pytest.mark.slow
def test_quickstart(tmp_path, capfd):
    out = run("examples/quickstart.py", tmp_path, capfd)
    assert "letter: 384 train, 96 validation, 120 test samples" in out
    lines_matching(out, r"^test accuracy [\d.]+ with 2 trees of depth 2 \([\d,]+ parameters\)")
    lines_matching(out, r"^mean reachable leaves per sample and tree: [\d.]+ of 4$")
    assert "identical predictions = True" in out


@pytest.mark.slow
def test_cnn_tel_digits(tmp_path, capfd):
    out = run("examples/cnn_tel_digits.py", tmp_path, capfd)
    line_with(out, "model", "test accuracy", "test loss", "# params")
    for name in ("cnn_dense", "cnn_tel"):
        lines_matching(out, rf"^\s*{name} \| [\d.]+ ± [\d.]+ \| [\d.]+ ± [\d.]+ \|\s+[\d,]+$")


@pytest.mark.slow
def test_interpret_breast_cancer(tmp_path, capfd):
    """Without --png the plot goes to a temporary folder, never into the working directory."""
    out = run("examples/interpret_breast_cancer.py", tmp_path, capfd)
    assert "|--- worst" in out or "|--- mean" in out  # rules with the DataFrame's feature names
    assert "gain importances equal scikit-learn's: True" in out
    assert "most sensitive features: [" in out and "largest permutation importances: [" in out
    assert "hard trees agree with the soft model on" in out
    (png,) = [line.split("plot: ", 1)[1] for line in out.splitlines() if line.startswith("plot: ")]
    try:
        assert os.path.getsize(png) > 10_000
        assert not png.startswith(REPO_ROOT) and os.listdir(tmp_path) == []
    finally:
        if os.path.isfile(png):
            os.remove(png)
            os.rmdir(os.path.dirname(png))


def _multi_worker_lines(out, workers=2, epochs=1):
    lines = [line for line in out.splitlines() if line.startswith("worker ")]
    assert lines, out
    for line in lines:
        assert f" of {workers}: {epochs} epochs," in line and "on 2048 rows (all workers)" in line, line
        assert line.endswith("same weights on all workers = True"), line
    return lines


@pytest.mark.slow
def test_multi_worker_tf_config(tmp_path):
    """In its own process, run (with the workers it starts) in a network
    namespace that holds only a loopback interface where available: the
    workers' gRPC servers listen on every interface (tests/distributed/loopback.py)."""
    import subprocess
    import sys

    from tests.distributed.loopback import PrivateLoopback

    with PrivateLoopback() as network:
        done = subprocess.run([*network.prefix, sys.executable, os.path.join(REPO_ROOT, "examples", "multi_worker.py"),
                               "--smoke", "--launch", "local"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    lines = _multi_worker_lines(out)
    assert [line.split(":")[0] for line in lines] == ["worker 0 of 2", "worker 1 of 2"]
    assert lines[0].split(":", 1)[1] == lines[1].split(":", 1)[1]  # the same loss and accuracy


def test_multi_worker_ray(tmp_path, capfd):
    pytest.importorskip("ray.train.tensorflow")
    out = run("examples/multi_worker.py", tmp_path, capfd, "--launch", "ray", "--epochs", "2")
    assert "Ray Train finished" in out
    assert [line.split(":")[0] for line in _multi_worker_lines(out, epochs=2)] == ["worker 0 of 2"]


@pytest.mark.slow
def test_tree_ensemble_layer_tutorial(tmp_path, capfd):
    out = run("tutorials/tree_ensemble_layer/tree_ensemble_layer.py", tmp_path, capfd, "--out", tmp_path / "out")
    lines_matching(out, r"^transition_width\s+1\.0: reachable leaves after epoch 1\s+[\d.]+, .* test AUC [\d.]+$")
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "reachable_leaves.png").exists()


@pytest.mark.slow
def test_hinge_forests_tutorial(tmp_path, capfd):
    out = run("tutorials/hinge_forests/hinge_forests.py", tmp_path, capfd, "--out", tmp_path / "out")
    line_with(out, "x", "leaf", "vertex v*", "margin r*", "output")
    lines_matching(out, r"hinge forest \(100 features, 100 trees of depth 2, mean\)\s+test RMSE [\d.]+")
    assert len(lines_matching(out, r"^   .* \+ (forest|ferns)\s+test accuracy [\d.]+")) == 3
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "hinge_tree_1d.png").exists()


@pytest.mark.slow
def test_end_to_end_trees_tutorial(tmp_path, capfd):
    out = run("tutorials/end_to_end_trees/end_to_end_trees.py", tmp_path, capfd, "--out", tmp_path / "out")
    assert len(lines_matching(out, r"^epoch\s+\d+: steepness [\d.]+, mean \|soft - hard\| posterior gap")) == 2
    assert len(lines_matching(out, r"^digits, lambda=[\d.]+: test accuracy [\d.]+")) == 2
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "posterior_convergence.png").exists()
    assert (tmp_path / "out" / "split_weights.png").exists()


@pytest.mark.slow
def test_deployment_tutorial(tmp_path, capfd):
    out = run("tutorials/deployment/deployment.py", tmp_path, capfd, "--out", tmp_path / "out")
    lines_matching(out, r"^test accuracy: TEL [\d.]+, tree [\d.]+ \(\d+ leaves\), both [\d.]+$")
    assert "1. .keras file, reloaded in a fresh process: identical predictions = True" in out
    assert "2. SavedModel (custom ops), fresh process: max |difference| = 0.0" in out
    assert "without keras_trees: max |difference|" in out
    assert "4. tree.json" in out and out.rstrip().endswith("identical predictions = True")


@pytest.mark.slow
def test_tuning_tutorial(tmp_path, capfd):
    out = run("tutorials/tuning/tuning.py", tmp_path, capfd, "--out", tmp_path / "out")
    lines_matching(out, r"^TEL test accuracy [\d.]+$")
    lines_matching(out, r"^best tree: depth \d+, \d+ leaves")
    assert "fresh process: identical predictions = True" in out
    assert (tmp_path / "out" / "best_tree.png").exists() and (tmp_path / "out" / "trials.png").exists()


@pytest.mark.slow
def test_convex_polytope_trees_tutorial(tmp_path, capfd):
    out = run("tutorials/convex_polytope_trees/convex_polytope_trees.py", tmp_path, capfd, "--out",
              tmp_path / "out")
    lines_matching(out, r"^convex polytope tree: depth \d, \d leaves, test AUC [\d.]+$")
    assert "reloaded predictions identical: True" in out
    assert (tmp_path / "out" / "polytopes.png").exists()


@pytest.mark.slow
def test_non_greedy_trees_tutorial(tmp_path, capfd):
    out = run("tutorials/non_greedy_trees/non_greedy_trees.py", tmp_path, capfd, "--out", tmp_path / "out")
    lines_matching(out, r"^\[1\] CART depth 4 -> NonGreedyTree: same predictions = True")
    lines_matching(out, r"^    nu=4: bound [\d.]+ -> [\d.]+, test accuracy [\d.]+")
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "nu_active_leaves.png").exists()


# ---------------------------------------------------------------- coverage
# benchmarks/gpu_speed.py needs a GPU: tests/gpu/run_check.sh runs its --smoke.
OWN_SMOKE_RUNS = {"benchmarks/gpu_speed.py": "tests/gpu/run_check.sh"}
SMOKE_TEST_FILES = ("tests/test_benchmarks.py", "tests/test_examples.py")


def _scripts():
    """Every script of benchmarks/ (not the _helpers), examples/ and tutorials/."""
    paths = glob.glob(os.path.join(REPO_ROOT, "benchmarks", "[!_]*.py"))
    paths += glob.glob(os.path.join(REPO_ROOT, "examples", "*.py"))
    paths += glob.glob(os.path.join(REPO_ROOT, "tutorials", "*", "*.py"))
    return sorted(os.path.relpath(p, REPO_ROOT).replace(os.sep, "/") for p in paths)


def _smoke_tested():
    """The scripts a test of SMOKE_TEST_FILES runs (a quoted path run with --smoke)."""
    tested = set()
    for name in SMOKE_TEST_FILES:
        with open(os.path.join(REPO_ROOT, name)) as handle:
            text = handle.read()
        calls = re.findall(r'(?:smoke|run)\("((?:benchmarks|examples|tutorials)/[\w/]+\.py)"', text)
        tested.update(calls)
    return tested


def test_every_script_has_a_smoke_mode_and_a_smoke_test():
    tested = _smoke_tested()
    for script in _scripts():
        with open(os.path.join(REPO_ROOT, script)) as handle:
            source = handle.read()
        assert '"--smoke"' in source or "_data.arg_parser(" in source or "arg_parser(__doc__" in source, (
            f"{script} has no --smoke option")
        assert script in tested or script in OWN_SMOKE_RUNS, f"{script} has no smoke test in {SMOKE_TEST_FILES}"


def test_every_script_the_docs_quote_runs_in_ci():
    docs = ["README.md", *sorted(os.path.relpath(p, REPO_ROOT) for p in
                                 glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"), recursive=True)
                                 + glob.glob(os.path.join(REPO_ROOT, "tutorials", "*", "README.md")))]
    quoted = quoted_scripts(*docs)
    assert {"benchmarks/end_to_end_finetune_speed.py", "examples/quickstart.py", "benchmarks/peers.py"} <= quoted
    missing = sorted(quoted - _smoke_tested() - set(OWN_SMOKE_RUNS))
    assert not missing, f"quoted in the docs without a smoke test: {missing}"
