"""The benchmark scripts: every one's smoke run, and the pieces they share.

``python benchmarks/<script> --smoke`` (tiny shapes, one or two steps, one
seed, no peer environments) runs the code path of the full benchmark in
seconds; each test here runs one script that way *in this process* (the
TensorFlow import and the compiled kernels are shared) and checks what it
prints (its table header and a row) and the JSON it writes. No figure is
asserted. Also: benchmarks/scale.py's on-disk cache and a run of its real
child process, and the polytope search of polytope_letter.py.
"""

import json
import os
import re
import sys

import numpy as np
import pytest

from keras_trees import _build
from tests._scripts import line_with, lines_matching, run_in_process
from tests.conftest import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

import check_cost  # noqa: E402
import scale  # noqa: E402


@pytest.mark.slow
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


@pytest.mark.slow
def test_scale_script_prints_its_table(tmp_path, capfd):
    """Without --smoke: one (family, N) in its own child process, as the full run does (the
    script itself runs in this process; its child is a fresh one, whose peak RSS it reports)."""
    out_json = tmp_path / "scale.json"
    out = run_in_process("benchmarks/scale.py", ["--sizes", "2000", "--families", "TreeEnsembleLayer", "--threads",
                                                 "1", "--data-dir", tmp_path / "data", "--json", out_json],
                         tmp_path, capfd)
    assert "family" in out and "rows/s" in out and "peak RSS MB" in out
    rows = [line for line in out.splitlines() if line.startswith("TreeEnsembleLayer ") and "2,000" in line]
    assert rows and "FAILED" not in rows[-1] and "skipped" not in rows[-1], out
    assert "TreeEnsembleLayer depth 8 at N=2,000" in out
    (result,) = json.loads(out_json.read_text())["results"]
    assert result["family"] == "TreeEnsembleLayer" and result["n"] == 2000 and result["epochs"] == 1
    assert result["rows_per_s"] > 0 and result["rows_per_cpu_s"] > 0 and result["peak_rss_mb"] > 100  # TensorFlow alone takes more
    assert 0.0 <= result["accuracy"] <= 1.0
    assert (tmp_path / "data" / "manifest.json").exists()


@pytest.mark.slow
def test_polytope_letter_search_chooses_on_validation_and_refits_the_choice(tmp_path, rng):
    import _data
    import polytope_letter

    x = rng.normal(size=(300, 3)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32") + 2 * (x[:, 2] > 0.5).astype("int32")
    split = _data.Split(x[:180], y[:180], x[180:240], y[180:240], x[240:], y[240:], 4)
    best = polytope_letter.search(split, depth=2, experts=1, trials=2, directory=str(tmp_path),
                                  epochs_per_level=(3, 5))
    assert best["max_depth"] == 2 and {"num_experts", "prior_gamma0", "prior_a_beta", "learning_rate"} <= set(best)
    result = polytope_letter.run_cpt_hp(split, best, seed=0)
    assert result["hyperparameters"] == best and 1 < result["leaves"] <= 4 and result["accuracy"] > 0.5


# ---------------------------------------------------------------- smoke runs
def smoke(script, tmp_path, capfd, *args):
    """``python <script> --smoke <args> --json <tmp>``: its output and its JSON."""
    out_json = tmp_path / "smoke.json"
    out = run_in_process(script, ["--smoke", *args, "--json", out_json], tmp_path, capfd)
    assert f"wrote {out_json}" in out or out_json.exists(), out
    return out, json.loads(out_json.read_text())


@pytest.mark.slow
def test_end_to_end_finetune_speed_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/end_to_end_finetune_speed.py", tmp_path, capfd)
    assert "letter forest: 2 trees, depth <= 3" in out and "grown in" in out
    line_with(out, "prune_threshold", "1st epoch", "epoch CPU", "peak RSS", "leaves/tree", "speedup", "memory")
    assert len(lines_matching(out, r"^\s+(0|0\.0001)\s+[\d.]+s\s+[\d.]+s\s+[\d.]+s\s+[\d.]+GB\s")) == 2
    assert payload["benchmark"] == "end_to_end_finetune_speed" and payload["smoke"] is True
    dense, pruned = payload["rows"]
    assert dense["threshold"] == 0.0 and pruned["threshold"] > 0
    for row in (dense, pruned):
        assert len(row["epoch_seconds"]) == len(row["epoch_cpu_seconds"]) == len(row["loss"]) == 2
        assert row["peak_rss_gb"] > 0 and 0.0 <= row["accuracy"] <= 1.0 and np.isfinite(row["loss"]).all()
        assert 1 <= row["kept_leaves"] <= 8 and row["split_evaluations"] >= 1
    assert dense["max_dropped_mass"] == 0.0  # the dense path drops nothing
    # Which path each row timed, and on which device (a GPU's peak memory; None on the CPU).
    assert dense["path"] == "dense keras.ops" and pruned["path"] in ("pruned kernels", "pruned keras.ops reference")
    assert payload["device"] == dense["device"] == pruned["device"] and dense["device"].startswith("cpu")
    assert dense["peak_device_memory_gb"] is None and "(dense keras.ops): epochs" in out


@pytest.mark.slow
def test_em_estep_speed_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/em_estep_speed.py", tmp_path, capfd)
    assert "letter forest: 2 trees, depth <= 3" in out
    lines_matching(out, r"^\s+fused: [\d.]+ s wall, [\d.]+ s CPU per E-step")
    lines_matching(out, r"^ two walks: [\d.]+ s wall")
    line_with(out, "two walks / fused", "largest count difference")
    assert payload["benchmark"] == "em_estep_speed" and set(payload["wall"]) == {"fused", "two walks"}
    assert payload["largest_count_difference"] < 1e-3  # the fused kernel counts what the two walks count


@pytest.mark.slow
def test_end_to_end_forest_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/end_to_end_forest.py", tmp_path, capfd)
    line_with(out, "increment", "accuracy", "splits/sample")
    lines_matching(out, r"^\s+0\.1\s+[\d.]+ ± [\d.]+\s+[\d.]+$")
    (row,) = payload["rows"]
    assert payload["trees"] == 2 and row["increment"] == 0.1 and 0.0 <= row["accuracy"] <= 1.0
    assert 0 < row["split_evals"] <= row["max_split_evals"]


@pytest.mark.slow
def test_end_to_end_letter_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/end_to_end_letter.py", tmp_path, capfd)
    line_with(out, "depth", "Greedy", "Finetune", "CART")
    lines_matching(out, r"^\s+2\s+[\d.]+ ± [\d.]+\s+[\d.]+ ± [\d.]+\s+[\d.]+ ± [\d.]+$")
    assert "best Finetune:" in out
    (row,) = payload["rows"]
    assert row["depth"] == 2 and 1 <= row["leaves"] <= 4 and 0 <= row["finetune"] <= 1 and 0 <= row["cart"] <= 1


@pytest.mark.slow
def test_fit_time_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/fit_time.py", tmp_path, capfd, "--compare-patience")
    assert "make_classification: 600 rows x 20 columns, 480 to fit; seeds [0]" in out
    line_with(out, "hinge", "fit", "epochs", "accuracy", "CART (CV) beside it", "fixed patience", "time ratio")
    line_with(out, "tel", "fit", "time ratio")
    assert payload["benchmark"] == "fit_time" and [r["model"] for r in payload["results"]] == ["hinge", "tel"]
    for row in payload["results"]:
        assert row["adaptive"]["epochs"] == row["fixed"]["epochs"] == 1 and row["adaptive"]["seconds"] > 0
        # the reference, timed once per seed beside its fits: one time for both rules
        (adaptive,), (fixed,) = row["adaptive"]["runs"], row["fixed"]["runs"]
        assert adaptive["cart_cv_seconds"] == fixed["cart_cv_seconds"] > 0
        assert row["adaptive"]["cart_cv_ratio"] == adaptive["seconds"] / adaptive["cart_cv_seconds"]


@pytest.mark.slow
def test_fit_time_curves_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/fit_time.py", tmp_path, capfd, "--curves", "iris")
    line_with(out, "hinge", "iris", "1 epochs recorded")
    line_with(out, "adaptive 0.5, 10 (the default)", "1/1")
    curve, = payload["curves"]
    assert len(curve["val_loss"]) == len(curve["accuracy"]) == len(curve["auc"]) == 1
    assert {row["rule"] for row in payload["summary"]} >= {"fixed", "adaptive 0.5, 10 (the default)"}


def test_fit_time_replays_early_stopping_as_keras_does():
    import fit_time

    curve = dict(val_loss=[3.0, 2.0, 1.0] + [1.5] * 60, patience=30, max_epochs=200)
    assert fit_time.replay(curve, None) == (33, 2)
    assert fit_time.replay(curve, (0.5, 10)) == (15, 2)  # the stop of the callback's test
    assert fit_time.replay(dict(curve, max_epochs=20), None) == (20, 2)


@pytest.mark.slow
def test_hard_routing_speed_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/hard_routing_speed.py", tmp_path, capfd)
    line_with(out, "depth", "op ms", "dense ms", "speedup", "flop ratio")
    lines_matching(out, r"^\s+4\s+[\d.]+ \(\s*[\d.]+\)\s+[\d.]+ \(\s*[\d.]+\)\s+[\d.]+x")
    (row,) = payload["rows"]
    assert payload["backend"] == "tensorflow" and row["depth"] == 4 and row["op_ms"] > 0 and row["dense_ms"] > 0


@pytest.mark.slow
def test_hinge_speed_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/hinge_speed.py", tmp_path, capfd)
    assert "smoke run" in out
    line_with(out, "depth", "train op", "dense", "ratio", "infer op")
    assert len(lines_matching(out, r"^\s+2 \|\s+[\d.]+\s+[\d.]+\s+[\d.]+x \|")) == 2  # trees and ferns
    lines_matching(out, r"ratio dense / op: [\d.]+x")
    assert [(r["kind"], r["depth"]) for r in payload["rows"]] == [("tree", 2), ("fern", 2)]
    assert [r["impl"] for r in payload["keras_train_on_batch_depth3"]] == ["op", "dense"]


@pytest.mark.slow
def test_hinge_letter_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/hinge_letter.py", tmp_path, capfd)
    line_with(out, "model", "paper", "final test err", "best over epochs", "ms/step")
    assert len(lines_matching(out, r"^(forest|ferns)\s+[\d.]+%\s+[\d.]+ \+- [\d.]+%")) == 2
    assert payload["complete"] and payload["smoke"] and payload["epochs"] == 1
    assert [r["model"] for r in payload["runs"]] == ["forest", "ferns"]
    assert all(0 <= r["final_test_error_pct"] <= 100 for r in payload["runs"])


@pytest.mark.slow
def test_non_greedy_letter_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/non_greedy_letter.py", tmp_path, capfd)
    line_with(out, "depth", "CART test", "non-greedy test", "diff", "CART leaves", "NG active")
    lines_matching(out, r"^\s+4\s+[\d.]+±[\d.]+\s+[\d.]+±[\d.]+\s+[+-][\d.]+")
    (row,) = payload["rows"]
    assert row["depth"] == 4 and row["ng_nu"] == 10.0 and 1 <= row["ng_active"] <= 16


@pytest.mark.slow
def test_non_greedy_speed_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/non_greedy_speed.py", tmp_path, capfd)
    line_with(out, "depth", "exact_s", "fast_s", "route_s", "exact/fast", "agree")
    lines_matching(out, r"^\s+4\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+$")
    (row,) = payload["rows"]
    assert payload["batch"] == 200 and row["depth"] == 4 and 0.5 <= row["agree"] <= 1.0


@pytest.mark.slow
def test_peers_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/peers.py", tmp_path, capfd)
    assert "--smoke: 600 rows of each set" in out
    table = out.split("\nwisconsin: test accuracy")[1].split("\n\n")[0]
    line_with(table, "model", "accuracy", "AUC", "train s", "size (mean)", "seeds")
    line_with(out, "family", "reference", "accuracy diff (points)", "goal", "met")
    assert payload["datasets"] == ["wisconsin"] and payload["seeds"] == [0] and payload["failures"] == []
    assert not {"node", "grande"} & set(payload["models"])  # no peer environments
    ran = set(payload["results"]["wisconsin"])
    assert {"cart", "cart-cv", "cart-d8", "rf", "tel", "hinge", "e2e", "polytope", "nongreedy", "tel+search"} <= ran
    assert ran | set(payload["skipped"]) == set(payload["models"])
    (cv,) = payload["results"]["wisconsin"]["cart-cv"]
    assert cv["chosen"]["max_depth"] in (1, 2, 4, 8, "unlimited")  # --quick's depths, chosen by 5-fold CV
    goals = out.split("Goals of the defaults")[1]
    lines_matching(goals, r"^  (e2e|polytope|nongreedy)\s+cart-cv\s+[-+][\d.]+\s+[-+][\d.]+\s")
    for model in ran:
        (run,) = payload["results"]["wisconsin"][model]
        lines_matching(table, rf"^  {re.escape(model)}\s+[\d.]+ \+- [\d.]+\s")
        assert 0.5 < run["auc"] <= 1.0 and run["size"] > 0, (model, run)


@pytest.mark.slow
def test_polytope_circles_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/polytope_circles.py", tmp_path, capfd)
    for name in ("cpt", "cart_d2", "cart_d6", "cart_d10"):
        lines_matching(out, rf"^{name}\s+AUC [\d.]+ \+- [\d.]+  leaves [\d.]+$")
    assert payload["experts"] == 2 and payload["seeds"] == [0]
    assert 1 <= payload["results"]["cpt"][0]["leaves"] <= 4 and 0 <= payload["summary"]["cpt"]["auc_mean"] <= 1


@pytest.mark.slow
def test_polytope_diabetes_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/polytope_diabetes.py", tmp_path, capfd)
    for name in ("cpt", "cpt_k1", "cart"):
        lines_matching(out, rf"^{name}\s+RMSE [\d.]+ \+- [\d.]+  leaves [\d.]+$")
    assert payload["depth"] == 2 and all(np.isfinite(s["rmse_mean"]) for s in payload["summary"].values())


@pytest.mark.slow
def test_polytope_letter_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/polytope_letter.py", tmp_path, capfd)
    for name in ("cart", "cart_unlimited", "cpt_k1", "cpt_k2"):
        lines_matching(out, rf"^{name}\s+accuracy [\d.]+ \+- [\d.]+  leaves \d+$")
    assert payload["depth"] == 2 and payload["refine_epochs"] == 1
    assert set(payload["summary"]) == {"cart", "cart_unlimited", "cpt_k1", "cpt_k2"}
    assert "refine" in payload["results"]["cpt_k2"][0]


@pytest.mark.slow
def test_prune_threshold_accuracy_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/prune_threshold_accuracy.py", tmp_path, capfd)
    line_with(out, "task", "thr 0", "thr 0.0001", "max |diff| to thr 0")
    for task in ("letter", "cpt_circles"):
        lines_matching(out, rf"^\s+{task}\s+[\d.]+ ± [\d.]+\s+[\d.]+ ± [\d.]+\s+[\d.]+ points$")
        assert set(payload["results"][task]) == {"0.0", "0.0001"}


@pytest.mark.slow
def test_regressors_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/regressors.py", tmp_path, capfd)
    line_with(out, "model", "diabetes", "average", "fit s")
    summary = payload["summary"]
    assert set(summary) == {"cart-d8", "cart-cv", "xgboost", "TreeEnsembleRegressor", "HingeForestRegressor",
                            "EndToEndTreeRegressor", "ConvexPolytopeTreeRegressor", "NonGreedyTreeRegressor"}
    for model, s in summary.items():
        lines_matching(out, rf"^{model}\s+-?[\d.]+\s+-?[\d.]+\s+[\d.]+$")
        assert np.isfinite(s["average"]) and s["average"] <= 1.0


@pytest.mark.slow
def test_regressors_extra_sets_and_params(tmp_path, capfd, monkeypatch):
    """An extra synthetic set runs, ``--params`` reaches the estimator (each
    fit of the non-greedy regressor sees ``init_depth="max_depth"``, not its
    default ``"cv"``), and a bad item names the expected form."""
    import _data
    import pytest
    import regressors

    from keras_trees import estimators

    seen = []
    real_fit = estimators.NonGreedyTreeRegressor.fit

    def fit(self, *args, **kwargs):
        seen.append(self.init_depth)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(estimators.NonGreedyTreeRegressor, "fit", fit)
    out, payload = smoke("benchmarks/regressors.py", tmp_path, capfd, "--datasets", "friedman1_300",
                         "--models", "NonGreedyTreeRegressor", "--params",
                         "NonGreedyTreeRegressor:init_depth=max_depth")
    assert seen == ["max_depth"]
    assert payload["sets"] == ["friedman1_300"] and payload["params"] == {
        "NonGreedyTreeRegressor": {"init_depth": "max_depth"}}
    line_with(out, "model", "friedman1_300", "average")
    with pytest.raises(ValueError, match="--params: expected NAME:ARG=VALUE"):
        _data.parse_params(["cart-cv:max_depth=3"], set(regressors.ESTIMATORS))


@pytest.mark.slow
def test_scale_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/scale.py", tmp_path, capfd, "--data-dir", tmp_path / "data")
    assert "all runs in this process" in out
    line_with(out, "family", "rows/s", "rows/CPU-s", "peak RSS MB", "test acc")
    results = payload["results"]
    assert [r["family"] for r in results] == list(scale.FAMILIES) and {r["n"] for r in results} == {2048}
    for r in results:
        assert "failed" not in r, r["failed"]
        if "skipped" not in r:
            lines_matching(out, rf"^{r['family']}\s+2,048\s+[\d,]+\s+[\d,]+\s+\d+\s")
            assert r["rows_per_s"] > 0 and 0.0 <= r["accuracy"] <= 1.0


@pytest.mark.slow
def test_tel_pmlb_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/tel_pmlb.py", tmp_path, capfd)
    line_with(out, "data set", "TEL", "XGBoost", "CART", "paper TEL")
    lines_matching(out, r"^wisconsin\s+[\d.]+ ± [\d.]+\s+[\d.]+ ± [\d.]+\s+[\d.]+ ± [\d.]+")
    assert payload["smoke"] and payload["sets"] == ["wisconsin"] and payload["settings"]["tel_trials"] == 1
    (run,) = payload["runs"]["wisconsin"]
    assert all(0.0 <= run[m]["test_auc"] <= 1.0 for m in ("tel", "xgboost", "cart"))
    assert run["xgboost"]["test_auc"] > 0.8  # scored, not just run (one TEL trial of one epoch can be poor)


@pytest.mark.slow
def test_tel_speed_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/tel_speed.py", tmp_path, capfd)
    line_with(out, "depth", "state", "leaves", "train op", "smooth", "logistic", "infer op")
    for state in ("init", "trained"):
        lines_matching(out, rf"^\s+2\s+{state}\s+[\d.]+ \|\s+[\d.]+")
    assert [(r["depth"], r["state"]) for r in payload["rows"]] == [(2, "init"), (2, "trained")]


@pytest.mark.slow
def test_check_cost_graph_checks_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/check_cost.py", tmp_path, capfd, "--graph-checks")
    line_with(out, "layer", "step", "without", "with", "ratio", "scans", "total")
    lines_matching(out, r"^TreeEnsembleLayer d6\s+train\s+[\d.]+ ms\s+[\d.]+ ms")
    assert payload["mode"] == "graph-checks" and set(payload["results"]) == set(check_cost.SMOKE_CASES)


@pytest.mark.slow
def test_check_cost_paired_smoke(tmp_path, capfd):
    """The comparison of two trees (here this checkout against itself, no worktree)."""
    out, payload = smoke("benchmarks/check_cost.py", tmp_path, capfd, "--paired")
    line_with(out, "layer", "step", "base cpu", "this cpu", "ratio cpu (min-max)", "ratio wall (min-max)")
    lines_matching(out, r"^NonGreedyTree d6\s+predict\s+[\d.]+ ms")
    assert payload["paired"] and len(payload["results"]) == 2 * len(check_cost.SMOKE_CASES)


@pytest.mark.slow
def test_export_formats_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/export_formats.py", tmp_path, capfd)
    line_with(out, "family", "format", "size KB", "median us", "p90 us", "max|diff|", "export s")
    for format in ("tf_saved_model", "onnx", "litert"):
        lines_matching(out, rf"^HingeForest\s+20 trees, depth 6\s+{format}\s+[\d.]+\s+[\d.]+\s+[\d.]+")
    assert payload["benchmark"] == "export_formats" and payload["smoke"] is True
    assert [row["format"] for row in payload["rows"]] == ["tf_saved_model", "onnx", "litert"]
    for row in payload["rows"]:
        assert row["bytes"] > 0 and row["median_us"] > 0 and row["max_abs_diff"] < 1e-5


@pytest.mark.slow
def test_ordered_categoricals_smoke(tmp_path, capfd):
    out, payload = smoke("benchmarks/ordered_categoricals.py", tmp_path, capfd)
    assert "five classes, 6 numeric + 2 ordered categorical columns, 400 rows" in out
    line_with(out, "model", "accuracy", "AUC")
    for label in ("hinge ranks", "hinge one-hot", "tel ranks", "tel one-hot"):
        (run,) = payload["results"][label]
        assert 0 <= run["accuracy"] <= 1 and 0 <= run["auc"] <= 1 and run["seconds"] > 0
        line_with(out, label)


# The recorded plan of every GPU pipeline at gpu_budget.py's shapes: (launches,
# host copies, syncs, sorts, scratch bytes, zero-filled bytes). A change to a
# pipeline changes its row here; lower is the goal (gpu_budget.py's BUDGETS).
GPU_PLAN = {
    ("hinge_forward", "100 trees of depth 10"): (4, 0, 0, 0, 409456, 0),
    ("hinge_backward", "100 trees of depth 10"): (9, 0, 0, 2, 17765888, 1637600),
    ("hard_routing_forward", "100 trees of depth 10"): (3, 1, 1, 0, 96, 0),
    ("tree_ensemble_forward", "10 trees of depth 10"): (4, 0, 0, 0, 1638656, 0),
    ("tree_ensemble_backward", "10 trees of depth 10"): (11, 0, 0, 0, 429670656, 335380480),
    ("tree_ensemble_forward", "20 trees of depth 8"): (4, 0, 0, 0, 3277056, 0),
    ("tree_ensemble_backward", "20 trees of depth 8"): (20, 0, 0, 0, 187033856, 167444480),
    ("pruned_routing_forward", "70 trees of depth 10"): (3, 1, 1, 0, 144, 0),
    ("pruned_routing_backward", "70 trees of depth 10"): (80, 1, 1, 0, 973012576, 4694179840),
    ("pruned_routing_leaf_statistics", "70 trees of depth 10"): (18, 1, 1, 0, 591501376, 2347663360),
    ("pruned_routing_em_statistics", "70 trees of depth 10"): (22, 1, 1, 0, 706424192, 2347663360),
    ("loss_augmented_forward", "one tree of depth 14, exact search"): (5, 2, 2, 0, 65792, 0),
    ("loss_augmented_forward", "one tree of depth 14, fast search"): (4, 2, 2, 0, 112, 0),
}


def test_gpu_budget_records_every_pipelines_plan(tmp_path, capfd):
    """benchmarks/gpu_budget.py: the plan-recording executor over every GPU
    pipeline, its table of calls and of budgets, and its JSON rows."""
    out, rows = smoke("benchmarks/gpu_budget.py", tmp_path, capfd, "--plans-only")
    import gpu_budget

    got = {}
    for row in rows:
        parts = [part.strip() for part in row["shape"].split(",")]
        key = (row["call"], parts[1] + (f", {parts[-1]}" if parts[-1].endswith("search") else ""))
        got[key] = tuple(row[m] for m in gpu_budget.METRICS)
        lines_matching(out, rf"^{row['call']}\s+{row['launches']}\s+{row['host_copies']}\s+{row['syncs']}\s")
    assert got == GPU_PLAN
    results = gpu_budget.budgets(rows)
    assert len(results) == 11 and f"{sum(r[-1] for r in results)} of 11 budgets hold" in out
    hinge = next(r for r in results if r[0] == "hinge fwd+bwd launches")
    assert hinge[2] == 13 and not hinge[-1]
    line_with(out, "host syncs of every call", "not yet")
    assert "kernels not measured: --plans-only" in out
    # Each call names the kernels it launches, each once, with the template the
    # CUDA executor runs it in (64-bit indices only where the body asks).
    forward, backward = rows[0], rows[1]
    assert [(k["body"].replace("keras_trees::", ""), k["launcher"]) for k in forward["kernels"]] == [
        ("pipeline::Fill<unsigned long long>", "ForKernel32"),
        ("pipeline::Together<hinge::Splits<float>, pipeline::FiniteChecks<float> >", "ForKernel32"),
        ("pipeline::Together<hinge::Walk<float>, pipeline::Capture<int> >", "ForKernel32"),
        ("hinge::Output<float>", "ForKernel32")]
    # The hinge and Tree Ensemble pipelines defer their checks (core/check_modes.h):
    # no copy or wait on the success path; the other families still read their words back.
    deferred = ("hinge_", "tree_ensemble_")
    assert all(r["host_copies"] == r["syncs"] == 0 for r in rows if r["call"].startswith(deferred))
    assert all(r["syncs"] >= 1 for r in rows if not r["call"].startswith(deferred))
    assert ("keras_trees::hinge::PairCoefficients<float>", "ForKernel") in {
        (k["body"], k["launcher"]) for k in backward["kernels"]}
    for row in rows:
        assert 1 <= len(row["kernels"]) <= row["launches"]
        assert all(k["blocks"] >= 1 and k["threads"] in (64, 128, 256) for k in row["kernels"])
    routing = next(r for r in rows if r["call"] == "hard_routing_forward")
    assert {k["launcher"] for k in routing["kernels"]} == {"ForKernel32", "ForGroupsKernel"}
    (exact,) = [r for r in rows if r["shape"].endswith("exact search")]
    assert exact["kernels"][-1]["launcher"] == "BlocksKernel" and exact["kernels"][-1]["blocks"] == 1024


@pytest.mark.slow
@pytest.mark.skipif(_build.find_nvcc() is None, reason="nvcc not found: the kernels' resources are not read here")
def test_gpu_budget_reads_every_kernels_resources(tmp_path, capfd):
    """benchmarks/gpu_budget.py with nvcc: every kernel the recorded calls launch,
    as nvcc builds it for sm_90 (registers, stack, spills, 64-bit divisions,
    occupancy from cuda_occupancy.h), and the kernel budgets."""
    pytest.importorskip("jax")
    out, rows = smoke("benchmarks/gpu_budget.py", tmp_path, capfd)
    import gpu_budget

    calls = [r for r in rows if "call" in r]
    kernels = [r for r in rows if "kernel" in r]
    launched = {(k["launcher"], k["body"].replace("keras_trees::", "").replace(" >", ">"))
                for r in calls for k in r["kernels"]}
    assert {(k["launcher"], k["kernel"]) for k in kernels} == launched and len(kernels) == len(launched)
    for k in kernels:
        assert set(gpu_budget.KERNEL_METRICS) <= set(k) and k["registers"] > 0 and 0 < k["occupancy"] <= 1
        assert all(isinstance(k[m], int) and k[m] >= 0 for m in gpu_budget.KERNEL_METRICS if m != "occupancy")
        lines_matching(out, rf"^{re.escape(k['kernel'])}\s+{k['launcher']}\s+{k['registers']}\s+{k['stack_bytes']}\s")
    # The calculator's answer for 256 threads of 80 registers: 3 blocks, 24 of 64 warps.
    walk = next(k for k in kernels if k["kernel"] == "pipeline::Together<tel::Walk<float>, pipeline::Capture<float>>")
    if walk["registers"] == 80:
        assert walk["occupancy"] == 0.375
    results = gpu_budget.budgets(calls, kernels)
    assert len(results) == 15 and f"{sum(r[-1] for r in results)} of 15 budgets hold" in out
    for what, metric, limit in gpu_budget.KERNEL_BUDGETS:
        (result,) = [r for r in results if r[0] == what]
        assert result[2] == max(k[metric] for k in kernels) and result[-1] == (result[2] <= limit)


def test_plan_recorder_chooses_the_gpu_executors_chunks():
    """The recorder, the CUDA executor and the CPU emulation of the GPU read the
    GPU's constants from core/pipeline.h, so the three run one chunk plan and
    the recorded grids are the GPU's (the CPU kernels' executor spends no wide
    scratch)."""
    def source(path):
        return open(os.path.join(REPO_ROOT, "custom_ops", path)).read()

    assert re.findall(r"constexpr int kGpuThreads = (\d+);", source("core/pipeline.h")) == ["256"]
    assert re.findall(r"constexpr int64_t kGpuWideScratchBytes = (int64_t\{1\} << \d+);",
                      source("core/pipeline.h")) == ["int64_t{1} << 30"]
    for path in ("core/launch_record.h", "cuda/launch.cuh"):
        assert re.findall(r"kWideScratchBytes = (\w+);", source(path)) == ["kGpuWideScratchBytes"], path
        assert re.findall(r"constexpr int kThreads = (\w+);", source(path)) == ["kGpuThreads"], path
    cpu = source("core/launch_cpu.h")
    assert "using CpuExecutor = BasicCpuExecutor<0>;" in cpu
    assert "using GpuEmulationExecutor = BasicCpuExecutor<kGpuWideScratchBytes>;" in cpu
    # The emulation (the portable handlers, TensorFlow's trace-free CPU kernels) runs the GPU's plan.
    for path in ("xla/portable_ffi.cc", "xla/pruned_routing_portable_ffi.cc", "xla/loss_augmented_portable_ffi.cc",
                 "tensorflow/tree_ensemble_kernels.cc"):
        assert "GpuEmulationExecutor" in source(path) and not re.search(r"\bCpuExecutor\b", source(path)), path
