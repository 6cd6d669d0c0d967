"""benchmarks/peers.py: a tiny run of the side-by-side table, and the peer environments' cache.

The peers' own virtual environments (NODE, GRANDE) are not created here: that
takes minutes and gigabytes; the run uses --no-peer-envs.
"""

import importlib.util
import json
import os
import sys

import pytest

from tests.conftest import REPO_ROOT, run_python

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

import _peer_envs  # noqa: E402


def _importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


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
