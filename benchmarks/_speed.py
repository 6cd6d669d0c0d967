"""Backend-neutral pieces of the speed benchmarks.

Each speed script takes ``--backend tensorflow jax`` (default: the active
``KERAS_BACKEND``). The Keras backend is fixed per process, so with several
backends the script re-runs itself once per backend in a fresh process, then
prints the compiled-vs-dense ratios of all of them side by side
(:func:`run_per_backend`). Inside one process, :class:`Backend` compiles
functions (``tf.function`` / ``jax.jit``), differentiates them
(``tf.GradientTape`` / ``jax.value_and_grad``) and waits for results (JAX
dispatches asynchronously), so a timing loop reads the same on both.
"""

import json
import os
import subprocess
import sys
import tempfile

BACKENDS = ("tensorflow", "jax")


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
        else:
            threads = os.cpu_count()
        return f"{self.name} backend, {threads} threads; {report['summary']}"

    def constant(self, array):
        if self.name == "jax":
            import jax.numpy as jnp

            return jnp.asarray(array)
        import tensorflow as tf

        return tf.constant(array)

    def jit(self, fn):
        if self.name == "jax":
            import jax

            return jax.jit(fn)
        import tensorflow as tf

        return tf.function(fn)

    def value_and_grad(self, loss, argnums):
        """Compiled ``f(*args) -> (loss, [d loss / d args[i] for i in argnums])``."""
        if self.name == "jax":
            import jax

            return jax.jit(jax.value_and_grad(loss, argnums=tuple(argnums)))
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
