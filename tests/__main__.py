"""The test suite on every Keras backend: ``python -m tests [--fast] [pytest args]``.

Two tiers:

* the full suite (what CI runs, the README's test command): ``pytest`` over all
  of tests/ and the docstring examples with the TensorFlow backend, then
  tests/backends/ and the ops' and layers' properties (tests/properties/) with
  ``KERAS_BACKEND=jax``, then tests/backends/ with ``torch``;
* ``--fast``: the same three runs without the tests marked ``slow`` or
  ``distributed`` (packaging, CUDA builds, the docs site, examples and
  benchmark smoke runs, the tuner searches, fresh-process round trips, the
  multi-process clusters, the sklearn check matrix) and with one example per
  property (``KERAS_TREES_TEST_TIER=fast``): every backend's contract, kernel,
  layer, estimator and bad-input tests at small sizes, for the minutes between
  two edits.

Each backend runs in its own process, since the backend is fixed when Keras is
imported, and spreads its test files over ``KERAS_TREES_TEST_WORKERS``
pytest-xdist workers (default: the number of CPUs, at most 4; 1 runs
in-process). Exits non-zero when any run fails or runs no test (pytest's exit
code 5). ``KERAS_TREES_TEST_BACKENDS=tensorflow,jax`` runs a subset. At the
end it prints each run's time and CPU seconds, the slowest tests of all runs
and the tests that cost the most CPU (their own and their child processes':
on 2 cores the suite's time follows the CPU, not the wall times);
``KERAS_TREES_TEST_REPORTS=DIR`` keeps each run's JUnit file (and the CPU
logs, ``<backend>.<pid>.jsonl``) there.
"""

import os
import glob
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = {
    "tensorflow": [],  # pyproject's testpaths: tests/ and keras_trees/ (doctests)
    "jax": ["tests/backends", "tests/properties"],  # the ops' properties on the JAX binding too
    "torch": ["tests/backends"],
}
FAST_MARKERS = "not slow and not distributed"
SLOWEST = 15


def workers():
    value = os.environ.get("KERAS_TREES_TEST_WORKERS")
    if value:
        return max(1, int(value))
    return max(1, min(os.cpu_count() or 1, 4))


def slowest(reports, count=SLOWEST):
    """The ``count`` slowest test cases of the JUnit files ``{backend: path}``
    as ``(seconds, backend, test id)``, slowest first."""
    cases = []
    for backend, path in reports.items():
        if not os.path.exists(path):
            continue
        for case in ElementTree.parse(path).iter("testcase"):
            module = case.get("classname", "").replace(".", "/")
            name = f"{module}.py::{case.get('name', '')}"
            cases.append((float(case.get("time") or 0.0), backend, name))
    return sorted(cases, key=lambda c: -c[0])[:count]


def cpu_costs(logs):
    """``{backend: log prefix}`` -> (``{backend: CPU seconds}``, every test as
    ``(CPU seconds, backend, test id)``, costliest first), read off the logs
    tests/conftest.py writes (each test's own and child processes' CPU)."""
    totals, cases = {}, []
    for backend, prefix in logs.items():
        for path in sorted(glob.glob(glob.escape(prefix) + ".*.jsonl")):
            with open(path) as log:
                for line in log:
                    name, own, children = json.loads(line)
                    totals[backend] = totals.get(backend, 0.0) + own + children
                    cases.append((own + children, backend, name))
    return totals, sorted(cases, key=lambda c: -c[0])


def main(argv):
    fast = "--fast" in argv
    argv = [a for a in argv if a != "--fast"]
    parallel = ["-n", str(workers()), "--dist", "loadfile"] if workers() > 1 else []
    tier = ["-m", FAST_MARKERS] if fast else []
    wanted = os.environ.get("KERAS_TREES_TEST_BACKENDS", ",".join(RUNS)).split(",")
    totals = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    status = 0
    times = {}
    reports = {}
    cpu_logs = {}
    keep = os.environ.get("KERAS_TREES_TEST_REPORTS")  # a folder to keep the JUnit files in
    if keep:
        os.makedirs(keep, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="keras_trees_tests_") as scratch:
        scratch = keep or scratch
        for backend in [b.strip() for b in wanted if b.strip()]:
            if backend not in RUNS:
                print(f"unknown backend {backend!r}; choose from {sorted(RUNS)}", file=sys.stderr)
                return 2
            reports[backend] = os.path.join(scratch, f"{backend}.xml")
            cpu_logs[backend] = os.path.join(scratch, backend)
            for old in glob.glob(glob.escape(cpu_logs[backend]) + ".*.jsonl"):  # a kept folder's last run
                os.remove(old)
            env = dict(os.environ, KERAS_BACKEND=backend, KERAS_TREES_TEST_TIER="fast" if fast else "full",
                       KERAS_TREES_TEST_CPU=cpu_logs[backend])
            cmd = [sys.executable, "-m", "pytest", *parallel, *tier, *RUNS[backend],
                   f"--junitxml={reports[backend]}", *argv]
            print(f"\n=== KERAS_BACKEND={backend}: {' '.join(cmd[1:])}", flush=True)
            start = time.time()
            tail = ""
            with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) as proc:
                for line in proc.stdout:  # streamed, and the closing line kept for the totals
                    sys.stdout.write(line)
                    sys.stdout.flush()
                    if line.strip():
                        tail = line
            for count, word in re.findall(r"(\d+) (passed|failed|skipped|error)", tail):
                totals[word] += int(count)
            times[backend] = time.time() - start
            print(f"=== KERAS_BACKEND={backend}: exit {proc.returncode} in {times[backend]:.0f} s", flush=True)
            if proc.returncode != 0:  # includes 5: no test ran
                status = 1
        print(f"\nslowest {SLOWEST} tests of all runs:")
        for seconds, backend, name in slowest(reports):
            print(f"  {seconds:7.1f} s  {backend:<10}  {name}")
        cpu, costliest = cpu_costs(cpu_logs)
        print(f"\ncostliest {SLOWEST} tests in CPU seconds (their own and their child processes'):")
        for seconds, backend, name in costliest[:SLOWEST]:
            print(f"  {seconds:7.1f} s  {backend:<10}  {name}")
    print(f"\n{'fast tier' if fast else 'full suite'}, time per run: "
          + ", ".join(f"{b} {t:.0f} s" for b, t in times.items()) + f"; all {sum(times.values()):.0f} s")
    if cpu:
        print("CPU seconds per run (tests only): " + ", ".join(f"{b} {t:.0f} s" for b, t in cpu.items())
              + f"; all {sum(cpu.values()):.0f} s")
    failed = totals["failed"] + totals["error"]
    print(f"\ntotal: {totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
