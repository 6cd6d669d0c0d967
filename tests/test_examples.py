"""The examples run as written (at a reduced size)."""

import os

import pytest

from tests.conftest import REPO_ROOT, run_python


def run_script(path, *args, tmp_path):
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{path!r}, *{list(args)!r}]\n"
        f"runpy.run_path({os.path.join(REPO_ROOT, path)!r}, run_name='__main__')\n"
    )
    return run_python(code, cwd=tmp_path)


def test_quickstart(tmp_path):
    out = run_script("examples/quickstart.py", "--epochs", "2", "--trees", "4", "--depth", "3",
                     tmp_path=tmp_path)
    assert "test accuracy" in out
    assert "identical predictions = True" in out


def test_cnn_tel_digits(tmp_path):
    out = run_script("examples/cnn_tel_digits.py", "--seeds", "1", "--epochs", "2", tmp_path=tmp_path)
    assert "cnn_tel" in out and "cnn_dense" in out


def test_tree_ensemble_layer_tutorial(tmp_path):
    out = run_script("tutorials/tree_ensemble_layer/tree_ensemble_layer.py", "--quick",
                     "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "reachable_leaves.png").exists()


def test_hinge_forests_tutorial(tmp_path):
    out = run_script("tutorials/hinge_forests/hinge_forests.py", "--quick", "--out",
                     str(tmp_path / "out"), tmp_path=tmp_path)
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "hinge_tree_1d.png").exists()


def test_end_to_end_trees_tutorial(tmp_path):
    out = run_script("tutorials/end_to_end_trees/end_to_end_trees.py", "--quick", "--out",
                     str(tmp_path / "out"), tmp_path=tmp_path)
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "posterior_convergence.png").exists()
    assert (tmp_path / "out" / "split_weights.png").exists()


def test_deployment_tutorial(tmp_path):
    out = run_script("tutorials/deployment/deployment.py", "--quick", "--out", str(tmp_path / "out"),
                     tmp_path=tmp_path)
    assert "1. .keras file, reloaded in a fresh process: identical predictions = True" in out
    assert "2. SavedModel (custom ops), fresh process: max |difference| = 0.0" in out
    assert "without keras_trees: max |difference|" in out
    assert "4. tree.json" in out and out.rstrip().endswith("identical predictions = True")


def test_tuning_tutorial(tmp_path):
    out = run_script("tutorials/tuning/tuning.py", "--quick", "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    assert "fresh process: identical predictions = True" in out
    assert (tmp_path / "out" / "best_tree.png").exists() and (tmp_path / "out" / "trials.png").exists()


def test_convex_polytope_trees_tutorial(tmp_path):
    out = run_script("tutorials/convex_polytope_trees/convex_polytope_trees.py", "--quick", "--out",
                     str(tmp_path / "out"), tmp_path=tmp_path)
    assert "reloaded predictions identical: True" in out
    assert (tmp_path / "out" / "polytopes.png").exists()


def test_non_greedy_trees_tutorial(tmp_path):
    out = run_script("tutorials/non_greedy_trees/non_greedy_trees.py", "--quick", "--out",
                     str(tmp_path / "out"), tmp_path=tmp_path)
    assert "identical predictions = True" in out
    assert (tmp_path / "out" / "nu_active_leaves.png").exists()


def test_interpret_breast_cancer(tmp_path):
    out = run_script("examples/interpret_breast_cancer.py", "--epochs", "3", "--png", str(tmp_path / "cart.png"),
                     tmp_path=tmp_path)
    assert "|--- worst" in out or "|--- mean" in out  # rules with the DataFrame's feature names
    assert "gain importances equal scikit-learn's: True" in out
    assert (tmp_path / "cart.png").stat().st_size > 10_000
    assert "hard trees agree with the soft model on" in out


def _multi_worker_lines(out, workers=2):
    lines = [line for line in out.splitlines() if line.startswith("worker ")]
    assert lines, out
    for line in lines:
        assert f" of {workers}: 2 epochs," in line and "on 2048 rows (all workers)" in line, line
        assert line.endswith("same weights on all workers = True"), line
    return lines


def test_multi_worker_tf_config(tmp_path):
    out = run_script("examples/multi_worker.py", "--launch", "local", "--epochs", "2", "--rows", "2048",
                     tmp_path=tmp_path)
    lines = _multi_worker_lines(out)
    assert [line.split(":")[0] for line in lines] == ["worker 0 of 2", "worker 1 of 2"]
    assert lines[0].split(":", 1)[1] == lines[1].split(":", 1)[1]  # the same loss and accuracy


def test_multi_worker_ray(tmp_path):
    pytest.importorskip("ray.train.tensorflow")
    out = run_script("examples/multi_worker.py", "--launch", "ray", "--epochs", "2", "--rows", "2048",
                     tmp_path=tmp_path)
    assert "Ray Train finished" in out
    assert [line.split(":")[0] for line in _multi_worker_lines(out)] == ["worker 0 of 2"]
