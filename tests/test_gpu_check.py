"""The prepared GPU check, cheaply on the CPU: benchmarks/gpu_speed.py --smoke runs
end to end under the JAX backend, and tests/gpu/run_check.sh and its helper
scripts parse (the check itself needs a lent GPU machine: tests/gpu/README.md)."""

import importlib.util
import json
import os
import py_compile
import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO_ROOT, run_python

GPU_DIR = os.path.join(REPO_ROOT, "tests", "gpu")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_gpu_speed_smoke_prints_its_table_and_writes_json(tmp_path):
    out_json = tmp_path / "gpu_speed.json"
    benchmarks = os.path.join(REPO_ROOT, "benchmarks")
    # The JAX kernels when they are already built (building them takes a minute);
    # else the keras.ops path on both sides, which still runs every line of the script.
    build_py = os.path.join(REPO_ROOT, "keras_trees", "_build.py")
    code = f"""
        import importlib.util, os, runpy, sys
        spec = importlib.util.spec_from_file_location("_kt_build", {build_py!r})
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        try:
            built = build.library_path("jax").exists()
        except Exception:
            built = False
        if not built:
            os.environ["KERAS_TREES_DISABLE_CUSTOM_OPS"] = "1"
        sys.path.insert(0, {benchmarks!r})
        sys.argv = ["gpu_speed.py", "--smoke", "--json", {str(out_json)!r}]
        runpy.run_path({os.path.join(benchmarks, "gpu_speed.py")!r}, run_name="__main__")
    """
    out = run_python(code, cwd=tmp_path, env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert "device: cpu" in out and "custom_ops_available: hinge=" in out, out
    header = next(line for line in out.splitlines() if line.startswith("setting "))
    for column in ("batch", "path", "kernels ms", "piped", "keras.ops ms", "unchecked", "ratio", "uncheck",
                   "bitwise", "max rel diff", "goal"):
        assert column in header, header
    assert re.search(r"^an empty jitted call: [\d.]+ ms synchronized, [\d.]+ ms pipelined$", out, re.M), out
    rows = [line for line in out.splitlines() if line.startswith(("hinge ", "hard routing ", "TEL "))]
    assert len(rows) == 7 and rows[0].startswith("hinge forest fwd+bwd, depth 3"), out
    assert rows[5].startswith("TEL fwd+bwd, depth 3, init (") and " lv)" in rows[5], rows
    assert all(" yes " in row and "x " in row for row in rows), rows  # bit-identical reruns, a ratio
    assert "published (shared/benchmarks.md, one H100)" in out

    result = json.loads(out_json.read_text())
    assert result["benchmark"] == "gpu_speed" and result["smoke"] is True and result["reps"] == 2
    assert result["empty_call_ms"] > 0 and result["empty_call_pipelined_ms"] > 0
    assert result["platform"] == "cpu" and set(result["custom_ops_available"]) == {
        "hinge", "hard_routing", "soft_tree", "pruned_routing", "loss_augmented"}
    assert [r["family"] for r in result["rows"]] == (["hinge"] * 3 + ["routing"] * 2 + ["tel"] * 2
                                                     + ["pruned", "pruned_em"] + ["lai"] * 2)
    assert all(0 < r["reachable_leaves"] <= 8 for r in result["rows"][5:7]), result["rows"][5:7]
    assert [r["setting"] for r in result["rows"][-2:]] == ["loss-augmented inf. fast, depth 3",
                                                          "loss-augmented inf. exact, depth 3"]
    for row in result["rows"]:
        assert {"setting", "batch", "path", "kernels_ms", "reference_ms", "ratio", "kernels_pipelined_ms",
                "reference_pipelined_ms", "ratio_pipelined", "reference_unchecked_ms",
                "reference_unchecked_pipelined_ms", "ratio_unchecked", "bitwise_deterministic", "agrees",
                "max_rel_diff", "goal", "goal_met"} <= set(row), row
        assert row["kernels_ms"] > 0 and row["reference_ms"] > 0 and row["agrees"] and row["bitwise_deterministic"]
        assert row["reference_unchecked_ms"] > 0 and row["kernels_pipelined_ms"] > 0
        assert row["ratio_unchecked"] == pytest.approx(row["reference_unchecked_ms"] / row["kernels_ms"])
        # The checks of the keras.ops path are conditionals; the unchecked path has none.
        assert row["reference_conditionals"] > 0 and row["unchecked_conditionals"] == 0, row
        assert row["goal_met"] is None  # goals are judged on full shapes only
        assert row["path"] == ("kernels" if row["ffi_targets"] else "reference")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_run_check_script_and_its_helpers_parse(tmp_path):
    script = os.path.join(GPU_DIR, "run_check.sh")
    proc = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = open(script).read()
    # The profile sees every kernel (no name filter: XLA's fusions and the
    # block bodies count), and the budgets come back beside the times.
    assert "ncu " in text and "--kernel-name" not in text
    assert "step budget " in text and "benchmarks/gpu_budget.py --json $LOGDIR/gpu_budget.json" in text
    helpers = sorted(name for name in os.listdir(GPU_DIR) if name.endswith(".py"))
    assert {"gpu_env.py", "gpu_determinism.py", "gpu_sanitize.py", "gpu_train.py", "conftest.py"} <= set(helpers)
    for name in helpers:
        py_compile.compile(os.path.join(GPU_DIR, name), cfile=str(tmp_path / (name + "c")), doraise=True)


NCU_REPORT = """==PROF== Connected to process 7051 (/usr/bin/python3.12)
[7051] python3.12@127.0.0.1
  void cub::DeviceRadixSortOnesweepKernel<cub::policy_hub<int, int, unsigned int>::Policy1000, 0, int, int, unsigned int, int, int, cub::identity_decomposer_t>(T7 *, T7 *, T5 *, const T5 *, T3 *, const T3 *, T4 *, const T4 *, T6, int, int, T8) (47, 1, 1)x(384, 1, 1), Device 0, CC 9.0, Invocations 18
    Section: Command line profiler metrics
    ---------------------- ----------- ------- ------- -------
    Metric Name            Metric Unit Minimum Maximum Average
    ---------------------- ----------- ------- ------- -------
    gpu__time_duration.sum          us   12.42   14.46   13.63
    ---------------------- ----------- ------- ------- -------

  void keras_trees::ForKernel32<hinge::Output<float>>(T1, unsigned int) (41600, 1, 1)x(256, 1, 1), Device 0, CC 9.0, Invocations 3
    Section: Command line profiler metrics
    Metric Name            Metric Unit Minimum Maximum Average
    gpu__time_duration.sum          us   52.45   52.74   52.63

  void keras_trees::cuda_launch::ForWarpsKernel<routing::Walk<float>>(T1, long) (12800, 1, 1)x(256, 1, 1), Device 0, CC 9.0, Invocations 3
    Section: Command line profiler metrics
    Metric Name            Metric Unit Minimum Maximum Average
    gpu__time_duration.sum          ms    0.21    0.22    0.21

  void keras_trees::cuda_launch::ForGroupsKernel<routing::Walk<double>>(T1, long, int) (6400, 1, 1)x(256, 1, 1), Device 0, CC 9.0, Invocations 1
    Section: Command line profiler metrics
    Metric Name            Metric Unit Minimum Maximum Average
    gpu__time_duration.sum          ns  900.00  900.00  900.00

  void keras_trees::cuda_launch::BlocksKernel<lai::Exact<float, int>>(T1, long) (1024, 1, 1)x(256, 1, 1), Device 0, CC 9.0, Invocations 2
    Section: Command line profiler metrics
    Metric Name            Metric Unit Minimum Maximum Average
    gpu__time_duration.sum          us   40.00   40.00   40.00

  loop_add_fusion (16, 1, 1)x(128, 1, 1), Device 0, CC 9.0, Invocations 4
    Section: Command line profiler metrics
    Metric Name            Metric Unit Minimum Maximum Average
    gpu__time_duration.sum          us    2.50    2.50    2.50
"""


def test_gpu_speed_keeps_a_slow_row_to_its_time_budget(monkeypatch):
    """A row whose calls are slow gets fewer timed calls (the H200's first check
    ran out of its step's time on the pruned row at the paper's forest shape);
    fast rows and smoke runs keep what was asked."""
    monkeypatch.syspath_prepend(os.path.join(REPO_ROOT, "benchmarks"))
    spec = importlib.util.spec_from_file_location("gpu_speed", os.path.join(REPO_ROOT, "benchmarks", "gpu_speed.py"))
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    assert speed.row_budget(0.002, 200, 3, False) == (200, 3, speed.PIPELINE_CALLS)  # 0.7 s in all
    assert speed.row_budget(5.0, 2, 1, True) == (2, 1, speed.PIPELINE_CALLS)  # smoke: as asked
    reps, rounds, calls = speed.row_budget(0.5, 200, 3, False)  # 175 s as asked
    assert (reps, rounds, calls) == (10, 1, 10)
    assert 0.5 * (reps + rounds * calls) <= speed.ROW_BUDGET_S
    assert speed.row_budget(30.0, 200, 3, False) == (speed.MIN_REPS, 1, speed.MIN_REPS)  # at least MIN_REPS


def test_ncu_summary_reads_nsight_compute_per_kernel_times(tmp_path, capsys):
    """The profile step's condenser (tests/gpu/ncu_summary.py), on the shape of
    an ncu report from an H200 run: kernels by body and loop width, times in
    microseconds whatever ncu's unit, slowest total first; no times: exit 1."""
    spec = importlib.util.spec_from_file_location("ncu_summary", os.path.join(GPU_DIR, "ncu_summary.py"))
    ncu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ncu)
    assert ncu.parse(NCU_REPORT) == [
        ("cub DeviceRadixSortOnesweepKernel", "47x384", 18, 13.63),
        ("hinge::Output<float> (32-bit)", "41600x256", 3, 52.63),
        ("routing::Walk<float> (warps)", "12800x256", 3, 210.0),
        ("routing::Walk<double> (lane groups)", "6400x256", 1, 0.9),
        ("lai::Exact<float, int> (block body)", "1024x256", 2, 40.0),
        ("xla loop_add_fusion", "16x128", 4, 2.5),
    ]
    report = tmp_path / "ncu.txt"
    report.write_text(NCU_REPORT)
    assert ncu.main([str(report)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[1:7]] == ["routing::Walk<float>", "cub", "hinge::Output<float>",
                                                          "lai::Exact<float,", "xla", "routing::Walk<double>"]
    total = 630 + 18 * 13.63 + 3 * 52.63 + 0.9 + 80 + 10
    assert lines[1].split()[-1] == f"{100 * 630 / total:.1f}%"
    # Then the time of each origin: the library's kernels, CUB's, XLA's own.
    assert [line.split()[:4] for line in lines[7:]] == [["ncu", "all", "keras-trees", "kernels"],
                                                        ["ncu", "all", "cub", "kernels"],
                                                        ["ncu", "all", "xla", "kernels"]]
    assert lines[9].split()[-2:] == ["10.00", f"{100 * 10 / total:.1f}%"]
    assert lines[7].split()[4] == "9"  # calls of the library's kernels
    report.write_text("==ERROR== Failed to initialize the profiler\n")
    assert ncu.main([str(report)]) == 1
    assert "no kernel times" in capsys.readouterr().out


def test_gpu_train_compares_the_gpu_run_with_the_cpu_run(monkeypatch, capsys):
    """gpu_train.py's verdict (the probabilistic trees' models): the floor, the gap to the CPU run
    (--max-gap), a failed CPU run and --expect-gpu, with the training replaced
    by fixed results (the training itself is the dry run's: tests/gpu/README.md)."""
    spec = importlib.util.spec_from_file_location("gpu_train", os.path.join(GPU_DIR, "gpu_train.py"))
    gpu_train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_train)
    assert {"e2e", "polytope", "nongreedy"} <= set(gpu_train.FAMILY)
    assert gpu_train.FAMILY["e2e"] == gpu_train.FAMILY["polytope"] == "pruned_routing"
    assert gpu_train.FAMILY["nongreedy"] == "loss_augmented"

    def result(accuracy, platform="gpu", kernels=True):
        return {"device": f"{platform}:0", "device_kind": "test", "platform": platform, "kernels": kernels,
                "summary": "", "epochs": 1, "accuracy": accuracy, "seconds": 1.0}

    calls = []

    def run(model, here, cpu, *flags):
        monkeypatch.setattr(gpu_train, "train", lambda epochs, seed, name, smoke: calls.append(
            (epochs, name, smoke)) or here)
        monkeypatch.setattr(gpu_train, "start_on_cpu", lambda epochs, seed, name, smoke: (epochs, name, smoke))
        monkeypatch.setattr(gpu_train, "finish_on_cpu", lambda child: cpu)
        code = gpu_train.main(["--model", model, "--epochs", "2", "--min-accuracy", "0.8", *flags])
        return code, capsys.readouterr()

    code, out = run("e2e", result(0.85), result(0.87, "cpu"), "--expect-gpu")
    assert code == 0 and "training: e2e ok (test accuracy 0.8500 >= 0.8, CPU 0.8700, gap allowed 0.03)" in out.out
    assert "EndToEndForest(10 trees, depth <= 4" in out.out and calls[-1] == (2, "e2e", False)
    code, out = run("polytope", result(0.85), result(0.89, "cpu"))  # 0.04 below the CPU
    assert code == 1 and "more than 0.03 below the CPU run's 0.8900" in out.err
    code, out = run("polytope", result(0.85), result(0.89, "cpu"), "--max-gap", "0.05", "--smoke")
    assert code == 0 and "ConvexPolytopeTree(depth 1, 2 experts)" in out.out and calls[-1] == (2, "polytope", True)
    code, out = run("nongreedy", result(0.75), result(0.75, "cpu"))  # below the floor
    assert code == 1 and "test accuracy 0.7500 on gpu:0 < 0.8" in out.err
    code, out = run("nongreedy", result(0.9), None)
    assert code == 1 and "the CPU run failed" in out.err
    code, out = run("nongreedy", result(0.9, "cpu"), result(0.9, "cpu"), "--expect-gpu")
    assert code == 1 and "not a GPU" in out.err
    code, out = run("nongreedy", result(0.9, kernels=False), result(0.9, "cpu"), "--expect-gpu")
    assert code == 1 and "custom_ops_available('loss_augmented') is False" in out.err
    with pytest.raises(SystemExit):
        gpu_train.main(["--model", "unknown"])
