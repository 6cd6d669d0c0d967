"""The whole test suite on every Keras backend: ``python -m tests [pytest args]``.

Runs ``pytest`` (all of tests/ and the docstring examples) with the TensorFlow
backend, then tests/backends/ with ``KERAS_BACKEND=jax`` (and the ops' property
tests, tests/properties/) and ``torch``; each in
its own process, since the backend is fixed when Keras is imported. Exits
non-zero when any run fails or runs no test (pytest's exit code 5). Set
``KERAS_TREES_TEST_BACKENDS=tensorflow,jax`` to run a subset.

Each run spreads its test files over ``KERAS_TREES_TEST_WORKERS`` pytest-xdist
workers (default: the number of CPUs, at most 4; 1 runs in-process): much of
the suite waits on fresh Python processes, imports and compilation, which
overlap well even on 2 cores.
"""

import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = {
    "tensorflow": [],  # pyproject's testpaths: tests/ and keras_trees/ (doctests)
    "jax": ["tests/backends", "tests/properties"],  # the ops' properties on the JAX binding too
    "torch": ["tests/backends"],
}


def workers():
    value = os.environ.get("KERAS_TREES_TEST_WORKERS")
    if value:
        return max(1, int(value))
    return max(1, min(os.cpu_count() or 1, 4))


def main(argv):
    parallel = ["-n", str(workers()), "--dist", "loadfile"] if workers() > 1 else []
    wanted = os.environ.get("KERAS_TREES_TEST_BACKENDS", ",".join(RUNS)).split(",")
    totals = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    status = 0
    for backend in [b.strip() for b in wanted if b.strip()]:
        if backend not in RUNS:
            print(f"unknown backend {backend!r}; choose from {sorted(RUNS)}", file=sys.stderr)
            return 2
        env = dict(os.environ, KERAS_BACKEND=backend)
        cmd = [sys.executable, "-m", "pytest", *parallel, *RUNS[backend], *argv]
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
        print(f"=== KERAS_BACKEND={backend}: exit {proc.returncode} in {time.time() - start:.0f} s", flush=True)
        if proc.returncode != 0:  # includes 5: no test ran
            status = 1
    failed = totals["failed"] + totals["error"]
    print(f"\ntotal: {totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
