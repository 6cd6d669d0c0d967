"""The environment and kernel report of the GPU check (tests/gpu/run_check.sh).

Prints the versions, the devices JAX sees, where ``keras_trees`` is imported
from, the compiled libraries in ``$KERAS_TREES_CACHE_DIR``,
``keras_trees.ops.execution_report()["summary"]`` and
``custom_ops_available(family)`` for the families with CUDA kernels.

    KERAS_BACKEND=jax python tests/gpu/gpu_env.py [--expect-gpu]

With ``--expect-gpu`` it exits non-zero unless JAX's default device is a GPU
and ``custom_ops_available(family)`` is True there for each of "hinge",
"hard_routing" and "soft_tree" (the Tree Ensemble Layer, JAX only) (the per-family form of ``custom_ops_available`` is required
then). Without it (the dry run on a CPU machine) it only reports, falling back
to ``custom_ops_available()`` where the per-family form raises ``TypeError``,
and fails only when no kernel loads at all.
"""

import argparse
import glob
import os
import sys

FAMILIES = ("hinge", "hard_routing", "soft_tree")


def family_available(family):
    """``(available, per-family form supported)``."""
    from keras_trees import ops as tree_ops

    try:
        return bool(tree_ops.custom_ops_available(family)), True
    except TypeError:
        return bool(tree_ops.custom_ops_available()), False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect-gpu", action="store_true",
                        help="fail unless the default device is a GPU running the CUDA kernels")
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")

    import jax
    import jaxlib
    import keras

    import keras_trees
    from keras_trees import ops as tree_ops

    print(f"python {sys.version.split()[0]}, jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
          f"keras {keras.__version__} (backend {keras.backend.backend()})")
    print(f"keras_trees from {os.path.dirname(keras_trees.__file__)}")
    print(f"jax.devices(): {jax.devices()}; default backend {jax.default_backend()}; "
          f"device kind {jax.devices()[0].device_kind!r}")
    cache = os.environ.get("KERAS_TREES_CACHE_DIR", os.path.expanduser("~/.cache/keras_trees"))
    libraries = sorted(glob.glob(os.path.join(cache, "*", "*.so")))
    print(f"compiled libraries in {cache}:" + "".join(f"\n  {p}" for p in libraries) if libraries
          else f"no compiled library in {cache}")
    report = tree_ops.execution_report()
    print(f"execution_report summary: {report['summary']}")
    for key in ("load_error", "gpu_error", "families"):  # the last two only where reported
        if report.get(key):
            print(f"{key}: {report[key]}")

    failures = []
    for family in FAMILIES:
        available, per_family = family_available(family)
        form = f'custom_ops_available("{family}")' if per_family else "custom_ops_available() [no per-family form yet]"
        print(f"{form}: {available}")
        if args.expect_gpu and not per_family:
            failures.append('custom_ops_available(family) is missing: the CUDA dispatch has not landed')
        if not available:
            failures.append(f"{family}: the kernels do not run on {jax.devices()[0]}")
    if args.expect_gpu and jax.default_backend() != "gpu":
        failures.append(f"JAX's default backend is {jax.default_backend()!r}, not 'gpu'")
    if not report["library_loaded"]:
        failures.append(f"no kernel library loaded: {report['load_error']}")
    for failure in dict.fromkeys(failures):
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
