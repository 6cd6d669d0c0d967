"""Backend-neutral pieces of the speed benchmarks.

Each speed script takes ``--backend tensorflow jax torch`` (default: the active
``KERAS_BACKEND``). The Keras backend is fixed per process, so with several
backends the script re-runs itself once per backend in a fresh process, then
prints the compiled-vs-dense ratios of all of them side by side
(:func:`run_per_backend`). Inside one process, :class:`Backend` compiles
functions (``tf.function`` / ``jax.jit``; PyTorch runs eager, as Keras does
there by default), differentiates them (``tf.GradientTape`` /
``jax.value_and_grad`` / ``torch.autograd.grad``) and waits for results (JAX
dispatches asynchronously), so a timing loop reads the same on all.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BACKENDS = ("tensorflow", "jax", "torch")


def add_backend_argument(parser):
    parser.add_argument(
        "--backend", nargs="+", choices=BACKENDS, default=None,
        help="Keras backend(s) to measure, each in its own process (default: $KERAS_BACKEND "
             "or tensorflow); with several, a side-by-side table of ratios ends the run",
    )


def active_backend():
    return os.environ.get("KERAS_BACKEND", "tensorflow")


def run_per_backend(args, summarize):
    """Re-runs this script once per backend asked for, unless that is exactly the
    active one; returns True when it did (the caller then returns).

    Each child writes its JSON to a temporary file; ``summarize(results)`` gets
    ``{backend: json}`` and prints the combined table. With ``--json PATH``
    the combined results are written there too.
    """
    wanted = args.backend or [active_backend()]
    if wanted == [active_backend()]:
        return False
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in wanted:
            out = os.path.join(tmp, f"{backend}.json")
            argv = _strip(sys.argv[1:], ("--backend", "--json"))
            print(f"\n=== KERAS_BACKEND={backend} ===", flush=True)
            env = dict(os.environ, KERAS_BACKEND=backend)
            subprocess.run([sys.executable, sys.argv[0], *argv, "--backend", backend, "--json", out],
                           env=env, check=True)
            with open(out) as handle:
                results[backend] = json.load(handle)
    print("\n=== compiled kernels vs the dense keras.ops path, per backend ===")
    summarize(results)
    if getattr(args, "json", None):
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump({"backends": results}, handle, indent=1)
    return True


def cpu_seconds():
    """CPU time of all of this process's threads so far (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_gb():
    """This process's own peak resident set size so far, in GB.

    On Linux ``VmHWM`` of ``/proc/self/status``: the high-water mark of this
    process's address space. ``getrusage``'s ``ru_maxrss`` (used elsewhere)
    also counts the parent's resident memory at the moment it started this
    process (Linux keeps the larger of the two across ``exec``), so a child
    started by a parent holding a grown forest would report the parent's
    gigabytes as its own."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    scale = 2**30 if sys.platform == "darwin" else 2**20  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def timed(fn, repeats, block=lambda out: out):
    """``(median, best)`` seconds of ``repeats`` calls of ``fn`` after one warm-up
    call (tracing); ``block`` waits for a result (JAX returns before computing).
    On a shared machine the best of N (timeit's convention) is the steadier figure."""
    block(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def _strip(argv, options):
    """argv without the given options and their values."""
    out, skip = [], False
    for arg in argv:
        if skip and not arg.startswith("--"):
            continue
        skip = False
        name = arg.split("=", 1)[0]
        if name in options:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


class Backend:
    """Compilation, differentiation and synchronization for the active backend."""

    def __init__(self):
        import keras

        self.name = keras.backend.backend()
        if self.name not in BACKENDS:
            raise SystemExit(f"the speed benchmarks run on {BACKENDS}, not {self.name!r}")

    def describe(self):
        from keras_trees import ops as tree_ops

        report = tree_ops.execution_report()
        if not report["library_loaded"]:
            raise SystemExit(f"compiled kernels unavailable: {report['load_error']}")
        if self.name == "tensorflow":
            import tensorflow as tf

            threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
        elif self.name == "torch":
            import torch

            threads = torch.get_num_threads()
        else:
            threads = os.cpu_count()
        return f"{self.name} backend, {threads} threads; {report['summary']}"

    def constant(self, array):
        if self.name == "jax":
            import jax.numpy as jnp

            return jnp.asarray(array)
        if self.name == "torch":
            import torch

            return torch.as_tensor(array)
        import tensorflow as tf

        return tf.constant(array)

    def jit(self, fn):
        if self.name == "jax":
            import jax

            return jax.jit(fn)
        if self.name == "torch":
            return fn  # eager, as Keras runs PyTorch by default
        import tensorflow as tf

        return tf.function(fn)

    def value_and_grad(self, loss, argnums):
        """Compiled ``f(*args) -> (loss, [d loss / d args[i] for i in argnums])``."""
        if self.name == "jax":
            import jax

            return jax.jit(jax.value_and_grad(loss, argnums=tuple(argnums)))
        if self.name == "torch":
            import torch

            def torch_fn(*args):
                args = [a.detach().requires_grad_(i in argnums) if torch.is_tensor(a) and a.is_floating_point()
                        else a for i, a in enumerate(args)]
                value = loss(*args)
                return value.detach(), list(torch.autograd.grad(value, [args[i] for i in argnums]))

            return torch_fn
        import tensorflow as tf

        @tf.function
        def fn(*args):
            watched = [args[i] for i in argnums]
            with tf.GradientTape() as tape:
                tape.watch(watched)
                value = loss(*args)
            return value, tape.gradient(value, watched)

        return fn

    def block(self, out):
        """Waits for (and returns) a result: JAX returns before computing."""
        if self.name == "jax":
            import jax

            return jax.block_until_ready(out)
        return out

    def numpy(self, out):
        import numpy as np

        if isinstance(out, (list, tuple)):
            return [self.numpy(o) for o in out]
        if self.name == "torch":
            return out.detach().cpu().numpy()
        return np.asarray(out)



def side_by_side(results, key, label, header, cell):
    """Prints one table row per key (in the first backend's order), one group of
    columns per backend. ``key(row)`` identifies a row (a tuple), ``label(key)``
    its leading text, ``header(backend)`` and ``cell(row)`` a group's header
    and cells (same width; blanks where a backend lacks the row)."""
    keys = list(dict.fromkeys(key(r) for res in results.values() for r in res["rows"]))
    print(label(None) + " " + " ".join(header(b) for b in results))
    for k in keys:
        cells = []
        for backend, res in results.items():
            row = next((r for r in res["rows"] if key(r) == k), None)
            cells.append(cell(row) if row else " " * len(header(backend)))
        print(label(k) + " " + " ".join(cells))
