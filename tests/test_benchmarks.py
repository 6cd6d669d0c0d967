"""benchmarks/scale.py: its on-disk cache and a tiny run of the script (no time is asserted)."""

import json
import os
import sys

import numpy as np

from tests.conftest import REPO_ROOT, run_python

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

import scale  # noqa: E402


def test_scale_cache_streams_the_generated_rows_and_completes_a_half_written_cache(tmp_path):
    data_dir = str(tmp_path / "data")
    manifest, _ = scale.ensure_data(data_dir, 3000, verbose=False)
    assert manifest["rows"] == 3072  # whole blocks of 1024 rows
    assert scale.read_manifest(data_dir) == manifest
    shard = os.path.join(data_dir, "train-00000.tfrecord")
    with open(shard, "rb") as handle:
        original = handle.read()

    # A batch size that does not divide the block, and N that is not a whole block.
    batches = [(np.asarray(x), np.asarray(y)) for x, y in scale.dataset(data_dir, 2500, 700)]
    assert [len(x) for x, _ in batches] == [700, 700, 700, 400]
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    expected = scale._rows(0, 0, 2500, scale._teacher())
    np.testing.assert_array_equal(x, expected[:, : scale.FEATURES])
    np.testing.assert_array_equal(y, expected[:, scale.FEATURES].astype(np.int32))
    assert x.dtype == np.float32 and y.dtype == np.int32 and set(np.unique(y)) <= set(range(scale.CLASSES))
    test_rows = sum(len(x) for x, _ in scale.dataset(data_dir, 0, 4096, test=True))
    assert test_rows == scale.TEST_ROWS

    # A shard cut short (a crash while writing) makes the cache incomplete; it is regenerated identically.
    with open(shard, "r+b") as handle:
        handle.truncate(1000)
    assert scale.read_manifest(data_dir) is None
    scale.ensure_data(data_dir, 3000, verbose=False)
    with open(shard, "rb") as handle:
        assert handle.read() == original
    # A larger set extends the smaller one: its first rows are the same.
    scale.ensure_data(data_dir, 5000, verbose=False)
    x_large = np.concatenate([np.asarray(x) for x, _ in scale.dataset(data_dir, 2500, 700)])
    np.testing.assert_array_equal(x_large, x)


def run_script(script, args, tmp_path):
    """The output of ``python benchmarks/<script> <args>``, run in a fresh process."""
    benchmarks = os.path.join(REPO_ROOT, "benchmarks")
    code = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {benchmarks!r})\n"
        f"sys.argv = {[script, *args]!r}\n"
        f"runpy.run_path({os.path.join(benchmarks, script)!r}, run_name='__main__')\n"
    )
    return run_python(code, cwd=tmp_path)


def test_scale_script_prints_its_table(tmp_path):
    out_json = tmp_path / "scale.json"
    out = run_script("scale.py", ["--sizes", "2000", "--families", "TreeEnsembleLayer", "--threads", "1",
                                  "--data-dir", str(tmp_path / "data"), "--json", str(out_json)], tmp_path)
    assert "family" in out and "rows/s" in out and "peak RSS MB" in out
    rows = [line for line in out.splitlines() if line.startswith("TreeEnsembleLayer ") and "2,000" in line]
    assert rows and "FAILED" not in rows[-1] and "skipped" not in rows[-1], out
    assert "TreeEnsembleLayer depth 8 at N=2,000" in out
    (result,) = json.loads(out_json.read_text())["results"]
    assert result["family"] == "TreeEnsembleLayer" and result["n"] == 2000 and result["epochs"] == 1
    assert result["rows_per_s"] > 0 and result["rows_per_cpu_s"] > 0 and result["peak_rss_mb"] > 100  # TensorFlow alone takes more
    assert 0.0 <= result["accuracy"] <= 1.0
    assert (tmp_path / "data" / "manifest.json").exists()


def test_polytope_letter_search_chooses_on_validation_and_refits_the_choice(tmp_path, rng):
    import _data
    import polytope_letter

    x = rng.normal(size=(300, 3)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32") + 2 * (x[:, 2] > 0.5).astype("int32")
    split = _data.Split(x[:180], y[:180], x[180:240], y[180:240], x[240:], y[240:], 4)
    best = polytope_letter.search(split, depth=2, experts=1, trials=2, directory=str(tmp_path))
    assert best["max_depth"] == 2 and {"num_experts", "prior_gamma0", "prior_a_beta", "learning_rate"} <= set(best)
    result = polytope_letter.run_cpt_hp(split, best, seed=0)
    assert result["hyperparameters"] == best and 1 < result["leaves"] <= 4 and result["accuracy"] > 0.5


def test_regressors_script_prints_r2_of_every_model_and_writes_json(tmp_path, monkeypatch, capsys):
    import regressors

    out_json = tmp_path / "regressors.json"
    monkeypatch.setattr(sys, "argv", ["regressors.py", "--quick", "--datasets", "diabetes", "--models", "cart-d8",
                                      "NonGreedyTreeRegressor", "--json", str(out_json)])
    regressors.main()
    out = capsys.readouterr().out
    assert "test R^2" in out and "NonGreedyTreeRegressor" in out, out
    summary = json.loads(out_json.read_text())["summary"]
    assert set(summary) == {"cart-d8", "NonGreedyTreeRegressor"}
    assert all(np.isfinite(s["average"]) and s["average"] <= 1.0 for s in summary.values())
