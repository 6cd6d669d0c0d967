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
  to zero;
* ``kernels``: the CUDA kernels it launches (body, kernel template, grid).

Then, where nvcc and JAX are installed, each of those kernels as nvcc builds
it for an H100 / H200 (sm_90): the JAX CUDA library's sources
(``custom_ops/cuda/xla_*.cu``) compiled with the library's own nvcc flags and
``--resource-usage``:

* ``registers``, ``stack_bytes``, ``spill_bytes`` (stores + loads),
  ``shared_bytes`` (static shared memory): ptxas's report;
* ``div64_calls``: 64-bit integer divisions and remainders in the kernel's
  PTX (each one a call of a software division routine in the machine code);
* ``occupancy``: the fraction of an SM's 64 warps its blocks can hold, from
  the CUDA toolkit's calculator (``cuda_occupancy.h``, gpu_occupancy.cc).

Then the budgets the GPU kernels are to meet, each with the measured value.

    python benchmarks/gpu_budget.py [--json PATH] [--plans-only]

``--json`` writes the per-call rows, then the per-kernel rows.
``--plans-only`` leaves out the kernels (their build takes about a minute on
2 cores; the plans take seconds). ``--smoke`` runs the same as without it.
"""

import argparse
import concurrent.futures
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "benchmarks", "gpu_budget.cc")
OCCUPANCY_SOURCE = os.path.join(ROOT, "benchmarks", "gpu_occupancy.cc")
METRICS = ("launches", "host_copies", "syncs", "sorts", "scratch_bytes", "zero_fill_bytes")
KERNEL_METRICS = ("registers", "stack_bytes", "spill_bytes", "div64_calls", "shared_bytes", "occupancy")
ARCH = "90"
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
# (what, metric, at most) over every kernel the calls launch.
KERNEL_BUDGETS = [
    ("kernel stack bytes", "stack_bytes", 0),
    ("kernel spill bytes", "spill_bytes", 0),
    ("kernel registers", "registers", 64),
    ("kernel 64-bit divisions", "div64_calls", 0),
]


def compiler():
    """The library's C++ compiler ($CXX, else g++ or c++: keras_trees/_build.py)."""
    build = _load_build()
    try:
        return build._compiler()
    except build.BuildError as exc:
        raise SystemExit(f"gpu_budget.py needs a C++17 compiler: {exc}") from None


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


def _load_build():
    """keras_trees/_build.py on its own (importing the package would build and
    load the kernels): the library's nvcc, flags and CUDA sources."""
    spec = importlib.util.spec_from_file_location("_keras_trees_build", os.path.join(ROOT, "keras_trees", "_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_toolchain():
    """``(build module, nvcc)``, or ``(None, reason)`` where the kernels cannot be
    built here (no nvcc, or no JAX for the XLA FFI headers)."""
    build = _load_build()
    nvcc = build.find_nvcc()
    if nvcc is None:
        return None, "nvcc not found (set KERAS_TREES_NVCC or CUDA_HOME)"
    if importlib.util.find_spec("jax") is None:
        return None, "JAX is not installed (the CUDA handlers include its XLA FFI headers)"
    return build, nvcc


def _demangled(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def _split_kernel(demangled):
    """``(launcher, body)`` of ``void keras_trees::cuda_launch::<launcher><<body> >(...)``;
    None for a kernel not of cuda/launch.cuh (CUB's)."""
    prefix = "void keras_trees::cuda_launch::"
    if not demangled.startswith(prefix):
        return None
    text = demangled[len(prefix):]
    launcher, rest = text.split("<", 1)
    depth = 1
    for i, char in enumerate(rest):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if depth == 0:
            return launcher, _normal(rest[:i])
    raise ValueError(f"unbalanced kernel name: {demangled}")


def _normal(type_name):
    return re.sub(r"\s+>", ">", type_name.strip())


def _ptxas_report(text):
    """{mangled entry: {registers, stack_bytes, spill_bytes, shared_bytes}} from ptxas's
    ``--resource-usage`` lines."""
    found, name = {}, None
    for line in text.splitlines():
        entry = re.search(r"Compiling entry function '(\S+)'", line)
        if entry:
            name = entry.group(1)
            found[name] = {"registers": 0, "stack_bytes": 0, "spill_bytes": 0, "shared_bytes": 0}
            continue
        if name is None:
            continue
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if frame:
            found[name]["stack_bytes"] = int(frame.group(1))
            found[name]["spill_bytes"] = int(frame.group(2)) + int(frame.group(3))
        used = re.search(r"Used (\d+) registers", line)
        if used:
            found[name]["registers"] = int(used.group(1))
            shared = re.search(r"(\d+) bytes smem", line)
            found[name]["shared_bytes"] = int(shared.group(1)) if shared else 0
            name = None
    return found


def _ptx_divisions(ptx):
    """{mangled entry: count of 64-bit div / rem instructions} of a PTX file."""
    counts = {}
    for part in re.split(r"\n(?=(?:\.visible |\.weak )?\.entry )", ptx)[1:]:
        name = re.match(r"(?:\.visible |\.weak )?\.entry (\S+?)\(", part).group(1)
        counts[name] = len(re.findall(r"\b(?:div|rem)\.[su]64\b", part))
    return counts


def _compile_unit(nvcc, flags, source, keep_dir):
    obj = os.path.join(keep_dir, os.path.basename(source) + ".cubin")
    # Device code only (-cubin, one SASS target): ptxas reports the same
    # resources as in the library's build, without its host compilation.
    at = flags.index("-gencode")
    device_flags = [*flags[:at], *flags[at + 2:]]
    assert "-gencode" not in device_flags, "one architecture only"
    done = subprocess.run([nvcc, "-I", os.path.join(ROOT, "custom_ops"), *device_flags, "-gencode",
                           f"arch=compute_{ARCH},code=sm_{ARCH}", "--resource-usage", "--keep", "--keep-dir", keep_dir,
                           "-cubin", source, "-o", obj], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nvcc failed on {source}:\n{done.stdout}{done.stderr}")
    stem = os.path.splitext(os.path.basename(source))[0]
    with open(os.path.join(keep_dir, stem + ".ptx")) as handle:
        ptx = handle.read()
    return _ptxas_report(done.stdout + done.stderr), _ptx_divisions(ptx)


def _occupancy(build_dir, toolkit_includes, kernels):
    binary = os.path.join(build_dir, "gpu_occupancy")
    includes = [arg for folder in toolkit_includes for arg in ("-I", folder)]
    subprocess.run([compiler(), "-std=c++17", "-O1", "-Wall", "-Werror", *includes, OCCUPANCY_SOURCE, "-o", binary],
                   check=True)
    args = [str(v) for k in kernels for v in (k["threads"], k["registers"], k["shared_bytes"])]
    out = subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout.split("\n")
    return [float(line.split()[1]) for line in out if line.strip()]


def kernel_rows(rows, build_dir):
    """One row per kernel the recorded calls launch, with its resources as nvcc
    builds it for sm_90; ``(rows, None)``, or ``([], reason)`` without nvcc or JAX."""
    build, nvcc = kernel_toolchain()
    if build is None:
        return [], nvcc
    flags = build._nvcc_flags("jax", [ARCH], nvcc)
    units = [str(p) for p in build._units("jax", cuda=True) if p.suffix == ".cu"]
    keep_dirs = [os.path.join(build_dir, f"unit{i}") for i in range(len(units))]
    for folder in keep_dirs:
        os.makedirs(folder)
    report, divisions = {}, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(units), os.cpu_count() or 1))) as pool:
        for unit_report, unit_divisions in pool.map(_compile_unit, [nvcc] * len(units), [flags] * len(units), units,
                                                    keep_dirs):
            report.update(unit_report)
            divisions.update(unit_divisions)
    built = {}
    for mangled, demangled in _demangled(list(report)).items():
        split = _split_kernel(demangled)
        if split:
            built[split] = dict(report[mangled], div64_calls=divisions.get(mangled, 0))
    kernels, seen = [], set()
    for row in rows:
        for launch in row["kernels"]:
            key = (launch["launcher"], _normal(launch["body"]))
            if key in seen:
                continue
            seen.add(key)
            if key not in built:
                raise SystemExit(f"{key[0]}<{key[1]}> is launched by {row['call']} but nvcc built no such kernel")
            name = key[1].replace("keras_trees::", "")
            kernels.append(dict({"kernel": name, "launcher": key[0], "threads": launch["threads"]}, **built[key]))
    for kernel, occupancy in zip(kernels, _occupancy(build_dir, build._nvcc_dryrun_paths(nvcc)["INCLUDES"], kernels)):
        kernel["occupancy"] = occupancy
    return kernels, None


def budgets(rows, kernels=()):
    """``(what, shape, measured, at most, holds)`` for every budget and shape (and,
    with `kernels`, every kernel budget: the worst kernel)."""
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
    if kernels:
        for what, metric, limit in KERNEL_BUDGETS:
            worst = max(kernels, key=lambda k: k[metric])
            over = sum(k[metric] > limit for k in kernels)
            where = f"{worst['kernel']} ({over} of {len(kernels)} kernels over)" if over else "every kernel"
            results.append((what, where, worst[metric], limit, worst[metric] <= limit))
    return results


def _size(value, metric):
    if metric in KERNEL_METRICS:
        return f"{value} B" if metric.endswith("bytes") else str(value)
    return f"{value / MB:.1f} MB" if metric.endswith("bytes") else str(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the per-call and per-kernel rows as JSON")
    parser.add_argument("--plans-only", action="store_true", help="leave out the kernels' nvcc build")
    parser.add_argument("--smoke", action="store_true", help="the same run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keras_trees_gpu_budget_") as build_dir:
        rows = record(build_dir)
        kernels, missing = ([], "--plans-only") if args.plans_only else kernel_rows(rows, build_dir)
    print(f"{'call':<32} {'launches':>8} {'copies':>6} {'syncs':>5} {'sorts':>5} {'scratch':>10} "
          f"{'zero-filled':>11}  shape")
    for r in rows:
        print(f"{r['call']:<32} {r['launches']:>8} {r['host_copies']:>6} {r['syncs']:>5} {r['sorts']:>5} "
              f"{_size(r['scratch_bytes'], 'bytes'):>10} {_size(r['zero_fill_bytes'], 'bytes'):>11}  {r['shape']}")
    if kernels:
        width = max(len(k["kernel"]) for k in kernels)
        print(f"\n{'kernel (sm_' + ARCH + ')':<{width}} {'template':<15} {'regs':>4} {'stack':>5} {'spill':>5} "
              f"{'div64':>5} {'smem':>6} {'occupancy':>9}")
        for k in kernels:
            print(f"{k['kernel']:<{width}} {k['launcher']:<15} {k['registers']:>4} {k['stack_bytes']:>5} "
                  f"{k['spill_bytes']:>5} {k['div64_calls']:>5} {k['shared_bytes']:>6} {k['occupancy']:>9.1%}")
    else:
        print(f"\nkernels not measured: {missing}")
    print(f"\n{'budget':<28} {'measured':>10} {'at most':>9}  {'':<7}  where")
    results = budgets(rows, kernels)
    metric = {what: m for what, _, m, _ in BUDGETS}
    metric.update({what: m for what, m, _ in KERNEL_BUDGETS})
    for what, shape, value, limit, holds in results:
        print(f"{what:<28} {_size(value, metric[what]):>10} {_size(limit, metric[what]):>9}  "
              f"{'holds' if holds else 'not yet':<7}  {shape}")
    print(f"\n{sum(r[-1] for r in results)} of {len(results)} budgets hold")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump(rows + kernels, handle, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
