"""Per-kernel times from an Nsight Compute report, one line per kernel.

Reads the text that ``ncu --metrics gpu__time_duration.sum --print-summary
per-kernel`` prints (the prepared GPU check's ``profile`` step writes it to
``ncu.txt``) and prints, slowest total first::

    ncu kernel                                      grid       calls   avg us  total us  share
    ncu hinge::PairCoefficients<float> (64-bit)     1600x256       3   105.12    315.36  22.1%

``ForKernel32<Body>`` / ``ForKernel<Body>`` / ``ForGroupsKernel<Body>`` /
``BlocksKernel<Body>`` (the launchers of custom_ops/cuda/launch.cuh;
``ForWarpsKernel`` in reports of older builds) are shown by their body, with the
loop's index width, "lane groups" or "block body"; CUB's kernels by their
name; every other kernel (XLA's own fusions and copies, cuBLAS) as "xla" and
its name. The table ends with the time of each of the three. Exit status 0
when at least one kernel was read, 1 otherwise (the report is then echoed, so
an ncu failure such as missing hardware counters shows in the check's log).

    python tests/gpu/ncu_summary.py ncu.txt
"""

import re
import sys

HEADER = re.compile(
    r"^\s+(?:void )?(?P<sig>.+) \((?P<grid>\d+), \d+, \d+\)x\((?P<block>\d+), \d+, \d+\), "
    r"Device \d+, CC [\d.]+, Invocations (?P<calls>\d+)\s*$")
METRIC = re.compile(r"^\s+gpu__time_duration\.sum\s+(?P<unit>\w+)\s+[\d.,]+\s+[\d.,]+\s+(?P<avg>[\d.,]+)\s*$")
TO_US = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
LAUNCHER = re.compile(r"(?:keras_trees::)?(?:cuda_launch::)?"
                      r"(?P<kind>ForKernel32|ForKernel|ForGroupsKernel|ForWarpsKernel|BlocksKernel)<(?P<body>.+)>\(")
CUB = re.compile(r"cub::(?:\w+::)*(?P<name>\w+Kernel)\b")


def short_name(sig):
    """A kernel's name as the table shows it (see the module docstring)."""
    m = LAUNCHER.search(sig)
    if m:
        width = {"ForKernel32": "32-bit", "ForKernel": "64-bit", "ForGroupsKernel": "lane groups",
                 "ForWarpsKernel": "warps", "BlocksKernel": "block body"}[m["kind"]]
        body = m["body"].replace("keras_trees::", "")
        return f"{body} ({width})"
    m = CUB.search(sig)
    if m:
        return f"cub {m['name']}"
    return "xla " + sig.split("(")[0][:56]


def origin(name):
    """Whose kernel a table name is: "cub", "xla" or "keras-trees"."""
    return name.split()[0] if name.split()[0] in ("cub", "xla") else "keras-trees"


def parse(text):
    """[(name, grid, calls, avg_us)] in the order of the report."""
    kernels, current = [], None
    for line in text.splitlines():
        h = HEADER.match(line)
        if h:
            current = (short_name(h["sig"]), f"{h['grid']}x{h['block']}", int(h["calls"]))
            continue
        m = METRIC.match(line)
        if m and current is not None:
            avg = float(m["avg"].replace(",", "")) * TO_US.get(m["unit"], float("nan"))
            kernels.append(current + (avg,))
            current = None
    return kernels


def table(kernels):
    """The printed lines, slowest total first."""
    total = sum(calls * avg for _, _, calls, avg in kernels) or 1.0
    lines = [f"ncu {'kernel':<58} {'grid':>10} {'calls':>6} {'avg us':>9} {'total us':>9} {'share':>6}"]
    for name, grid, calls, avg in sorted(kernels, key=lambda k: -k[2] * k[3]):
        lines.append(f"ncu {name:<58} {grid:>10} {calls:>6} {avg:>9.2f} {calls * avg:>9.2f} "
                     f"{100 * calls * avg / total:>5.1f}%")
    for who in ("keras-trees", "cub", "xla"):
        mine = [(calls, avg) for name, _, calls, avg in kernels if origin(name) == who]
        spent = sum(calls * avg for calls, avg in mine)
        lines.append(f"ncu {'all ' + who + ' kernels':<58} {'':>10} {sum(c for c, _ in mine):>6} {'':>9} "
                     f"{spent:>9.2f} {100 * spent / total:>5.1f}%")
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python tests/gpu/ncu_summary.py NCU_REPORT.txt", file=sys.stderr)
        return 2
    with open(argv[0], errors="replace") as f:
        text = f.read()
    kernels = parse(text)
    if not kernels:
        print(f"ncu: no kernel times in {argv[0]}; its last lines:")
        print("\n".join(text.splitlines()[-20:]))
        return 1
    print("\n".join(table(kernels)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
