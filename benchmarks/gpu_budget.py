"""GPU budgets on the CPU: what each GPU pipeline launches, copies, waits for and fills.

Compiles ``benchmarks/gpu_budget.cc`` with the host C++ compiler and runs it:
every GPU pipeline of ``custom_ops/core`` (the code the CUDA kernels run) on
the plan-recording executor (``custom_ops/core/launch_record.h``), at the
shapes of ``benchmarks/gpu_speed.py``, float32. The plan of a call depends on
the shapes alone, so no GPU and no memory is needed. Per call:

* ``launches``: kernels of the library's own bodies (a sort's CUB kernels are
  not included: see ``sorts``);
* ``host_copies`` / ``syncs``: device-to-host copies, and waits for the stream
  (each copy waits);
* ``sorts``: radix sorts;
* ``scratch_bytes``: scratch memory; ``zero_fill_bytes``: memory the call sets
  to zero.

Then the budgets the GPU kernels are to meet, each with the measured value.

    python benchmarks/gpu_budget.py [--json PATH]

``--json`` writes the list of per-call rows. ``--smoke`` runs the same (the
whole run takes seconds).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "benchmarks", "gpu_budget.cc")
METRICS = ("launches", "host_copies", "syncs", "sorts", "scratch_bytes", "zero_fill_bytes")
MB = 10**6

# (what, calls summed at each shape, metric, at most). A budget over several
# calls holds at every shape those calls are recorded at.
BUDGETS = [
    ("host copies of every call", None, "host_copies", 0),
    ("host syncs of every call", None, "syncs", 0),
    ("hinge backward sorts", ("hinge_backward",), "sorts", 0),
    ("hinge fwd+bwd launches", ("hinge_forward", "hinge_backward"), "launches", 6),
    ("hard routing launches", ("hard_routing_forward",), "launches", 2),
    ("TEL fwd+bwd launches", ("tree_ensemble_forward", "tree_ensemble_backward"), "launches", 8),
    ("TEL fwd+bwd zero-filled", ("tree_ensemble_forward", "tree_ensemble_backward"), "zero_fill_bytes", 2 * MB),
    ("pruned fwd+bwd launches", ("pruned_routing_forward", "pruned_routing_backward"), "launches", 16),
    ("pruned fwd+bwd zero-filled", ("pruned_routing_forward", "pruned_routing_backward"), "zero_fill_bytes",
     64 * MB),
]


def compiler():
    found = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not found:
        raise SystemExit("gpu_budget.py needs a C++17 compiler: install g++ or set CXX")
    return found


def record(build_dir):
    """The per-call rows of the recorded plans."""
    binary = os.path.join(build_dir, "gpu_budget")
    subprocess.run([compiler(), "-std=c++17", "-O1", "-fopenmp-simd", "-Wall", "-Werror",
                    "-I", os.path.join(ROOT, "custom_ops"), SOURCE, "-o", binary], check=True)
    out = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    failed = [row for row in rows if row["error"]]
    if failed:
        raise SystemExit(f"a recorded pipeline refused its inputs: {failed}")
    return rows


def budgets(rows):
    """``(what, shape, measured, at most, holds)`` for every budget and shape."""
    results = []
    for what, calls, metric, limit in BUDGETS:
        if calls is None:
            worst = max(rows, key=lambda r: r[metric])
            results.append((what, f"{worst['call']}, {worst['shape']}" if worst[metric] else "every call",
                            worst[metric], limit, worst[metric] <= limit))
            continue
        for shape in dict.fromkeys(r["shape"] for r in rows if r["call"] in calls):
            value = sum(r[metric] for r in rows if r["call"] in calls and r["shape"] == shape)
            results.append((what, shape, value, limit, value <= limit))
    return results


def _size(value, metric):
    return f"{value / MB:.1f} MB" if metric.endswith("bytes") else str(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the per-call rows as JSON")
    parser.add_argument("--smoke", action="store_true", help="the same run (it takes seconds)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keras_trees_gpu_budget_") as build_dir:
        rows = record(build_dir)
    print(f"{'call':<32} {'launches':>8} {'copies':>6} {'syncs':>5} {'sorts':>5} {'scratch':>10} "
          f"{'zero-filled':>11}  shape")
    for r in rows:
        print(f"{r['call']:<32} {r['launches']:>8} {r['host_copies']:>6} {r['syncs']:>5} {r['sorts']:>5} "
              f"{_size(r['scratch_bytes'], 'bytes'):>10} {_size(r['zero_fill_bytes'], 'bytes'):>11}  {r['shape']}")
    print(f"\n{'budget':<28} {'measured':>10} {'at most':>9}  {'':<7}  where")
    results = budgets(rows)
    metric = {what: m for what, _, m, _ in BUDGETS}
    for what, shape, value, limit, holds in results:
        print(f"{what:<28} {_size(value, metric[what]):>10} {_size(limit, metric[what]):>9}  "
              f"{'holds' if holds else 'not yet':<7}  {shape}")
    print(f"\n{sum(r[-1] for r in results)} of {len(results)} budgets hold")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
