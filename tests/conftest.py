"""Shared test fixtures and helpers."""

import gc
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def add_xla_flags(flags, *more):
    """``flags`` (an ``XLA_FLAGS`` value) with each of ``more`` added unless set already."""
    words = flags.split()
    names = {w.split("=", 1)[0] for w in words}
    return " ".join(words + [m for m in more if m.split("=", 1)[0] not in names])


# XLA (JAX's jit, TensorFlow's jit_compile) compiles the tests' programs
# without LLVM's optimization passes: the same operations in the same order
# (no fast-math either way), so the same results, at a fraction of the
# compile time that dominates the JAX tests. Child processes inherit it.
os.environ["XLA_FLAGS"] = add_xla_flags(os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


TEST_SEED = 1234


FAST_TIER = os.environ.get("KERAS_TREES_TEST_TIER") == "fast"
FAST_PARAMETERS = 3  # parameter sets per test function in the fast tier


def pytest_collection_modifyitems(config, items):
    """The fast tier (``python -m tests --fast``) leaves out the tests marked
    ``slow_on(backend, ...)`` for the running backend (e.g. tests whose cost on
    JAX is its compilation of every shape), and runs at most ``FAST_PARAMETERS``
    parameter sets of each test function: the first, the last and one between,
    in collection order (the same on every run). The full suite runs them all."""
    if not FAST_TIER:
        return
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    slow_here = {id(item) for item in items
                 if any(backend in mark.args for mark in item.iter_markers("slow_on"))}
    groups = {}
    for item in items:
        if getattr(item, "callspec", None) is not None:
            groups.setdefault((item.module.__name__, item.originalname), []).append(item)
    dropped = set(slow_here)
    for group in groups.values():
        if len(group) > FAST_PARAMETERS:
            kept = {round(i * (len(group) - 1) / (FAST_PARAMETERS - 1)) for i in range(FAST_PARAMETERS)}
            dropped.update(id(item) for i, item in enumerate(group) if i not in kept)
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if id(item) in dropped])
        items[:] = [item for item in items if id(item) not in dropped]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of a file (and its fixtures' teardown): one full
    garbage collection, then every surviving object is moved out of the
    collector's sight (``gc.freeze``) until the next file's end. A TensorFlow
    pytest worker holds about a million live objects after a few files, and
    each automatic full collection walks them all (benchmarks/NOTES.md);
    frozen, they are walked once per file. A cycle outlives its file by at
    most one file: each file's end unfreezes and collects everything."""
    if nextitem is None or nextitem.path != item.path:
        gc.unfreeze()
        gc.collect()
        gc.freeze()


def cpu_seconds():
    """(this process's CPU seconds, its waited-for child processes' CPU seconds)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``KERAS_TREES_TEST_CPU=PREFIX`` (set by ``python -m tests``): each
    test's CPU seconds, its own (set-up and teardown included) and its child
    processes' (compilers, fresh interpreters), as a JSON line
    ``[test id, own, children]`` appended to ``PREFIX.<pid>.jsonl``. On a
    machine with fewer cores than busy processes the suite's time follows
    this sum, not the tests' wall times."""
    prefix = os.environ.get("KERAS_TREES_TEST_CPU")
    before = cpu_seconds() if prefix else None
    yield
    if prefix:
        import json

        after = cpu_seconds()
        with open(f"{prefix}.{os.getpid()}.jsonl", "a") as log:
            log.write(json.dumps([item.nodeid, round(after[0] - before[0], 3), round(after[1] - before[1], 3)]) + "\n")


@pytest.fixture(autouse=True)
def _same_random_state_for_every_test():
    """Starts every test from the same random state, whatever ran before it.

    Layers draw their initial weights from Keras' global seed generator, so
    without this a test's weights depend on which tests its pytest-xdist worker
    happened to run first. Under TensorFlow this is `keras.utils.set_random_seed`;
    under JAX and PyTorch the same without importing TensorFlow (which
    `set_random_seed` does whenever it is installed).
    """
    import random

    import keras

    if keras.backend.backend() == "tensorflow":
        keras.utils.set_random_seed(TEST_SEED)
        return
    from keras.src.backend.common import global_state

    global_state.set_global_attribute("global_random_seed", TEST_SEED)
    global_state.set_global_attribute("global_seed_generator", None)
    random.seed(TEST_SEED)
    np.random.seed(TEST_SEED)
    if keras.backend.backend() == "torch":
        import torch

        torch.manual_seed(TEST_SEED)


@pytest.fixture
def eager_tensorflow():
    """On TensorFlow, ``tf.function``s run eagerly for the test: a fit of a few
    steps on tiny data costs less eagerly than traced (the traced path is
    tested by the layer tests); elsewhere a no-op."""
    import keras

    if keras.backend.backend() != "tensorflow":
        yield
        return
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(False)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


#: A fresh-process snippet (`FreshProcess`, `reloaded`): the portable SavedModel in
#: ``portable/`` loads and predicts ``pred.npy`` on ``x.npy`` within ``{tolerance}``
#: without importing keras_trees, and no op of its graph or nested functions is a
#: keras-trees op. Run it before anything imports keras_trees.
PORTABLE_SAVED_MODEL_CHECK = """
import sys, numpy as np, tensorflow as tf
assert "keras_trees" not in sys.modules
loaded = tf.saved_model.load("portable")
pred = loaded.serve(tf.constant(np.load("x.npy"))).numpy()
assert "keras_trees" not in sys.modules
np.testing.assert_allclose(pred, np.load("pred.npy"), rtol={tolerance}, atol={tolerance})
ops = set()
for f in loaded.serve.concrete_functions:  # the graph and every nested function
    gdef = f.graph.as_graph_def()
    ops |= {{n.op for n in gdef.node}}
    ops |= {{n.op for fn in gdef.library.function for n in fn.node_def}}
assert ops and not any(t.startswith("KerasTrees") for t in ops), sorted(ops)
print("ok")
"""


def build_cpp_program(tmp_path, name, source, flags):
    """Compiles the C++ program ``source`` with g++ and ``flags``, the kernel
    sources (custom_ops/) on the include path; returns the binary's path.
    Skips the test where there is no g++."""
    import shutil

    from keras_trees import _build

    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to build the C++ program")
    path = tmp_path / f"{name}.cc"
    path.write_text(source)
    binary = tmp_path / name
    subprocess.run([cxx, "-std=c++17", *flags, "-I", str(_build.source_dir()), str(path), "-o", str(binary)],
                   check=True, capture_output=True, text=True)
    return binary


def run_python(code, cwd, env=None, timeout=600):
    """Runs `code` in a fresh Python process and returns its stdout.

    Fails the test with the child's output when it exits non-zero.
    """
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = REPO_ROOT + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        pytest.fail(f"child process failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


class FreshProcess:
    """Snippets of code that run one after another in one fresh Python process,
    each in its own namespace, for tests that each read one snippet's result:
    one process start and import for all of them instead of one per test.

    ``output(name)`` runs the process on first use and returns the snippet's
    stdout, or fails the calling test with the snippet's traceback (the other
    snippets still run and report on their own).
    """

    _MARK = "<<fresh-process-results>>"
    _RUNNER = textwrap.dedent("""
        import contextlib, io, json, sys, textwrap, traceback
        results = {}
        for name, code in json.loads(sys.stdin.read()).items():
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(textwrap.dedent(code), name, "exec"), {"__name__": "__main__"})
                results[name] = ["ok", out.getvalue()]
            except BaseException:
                results[name] = ["failed", out.getvalue() + traceback.format_exc()]
        print(MARK + json.dumps(results))
    """)

    def __init__(self, snippets, cwd, env=None, timeout=600):
        self.snippets, self.cwd, self.env, self.timeout = dict(snippets), cwd, env, timeout
        self._results = None

    def output(self, name):
        if self._results is None:
            import json

            child_env = dict(os.environ)
            child_env["PYTHONPATH"] = REPO_ROOT + os.pathsep + child_env.get("PYTHONPATH", "")
            child_env.update(self.env or {})
            proc = subprocess.run([sys.executable, "-c", self._RUNNER.replace("MARK", repr(self._MARK))],
                                  input=json.dumps(self.snippets), cwd=self.cwd, env=child_env,
                                  capture_output=True, text=True, timeout=self.timeout)
            lines = [line for line in proc.stdout.splitlines() if line.startswith(self._MARK)]
            if proc.returncode != 0 or not lines:
                failure = ["failed", f"child process failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"]
                self._results = {snippet: failure for snippet in self.snippets}
            else:
                self._results = json.loads(lines[-1][len(self._MARK):])
        status, text = self._results[name]
        if status != "ok":
            pytest.fail(f"{name} failed in the shared child process:\n{text}")
        return text


@pytest.fixture(scope="module")
def reloaded(request, saved):
    """The checks ``RELOADS`` (``{name: code}``) of the requesting module, run
    in one fresh process in the folder of its ``saved`` fixture."""
    return FreshProcess(request.module.RELOADS, cwd=saved)


def finite_difference_check(loss, params, num_coords=12, eps=1e-6, rng=None):
    """Compares autodiff gradients of a float64 scalar `loss(*params)` with central
    differences on `num_coords` random coordinates of each parameter.

    Returns a list of (param_index, analytic, numeric) triples.
    """
    import tensorflow as tf

    rng = rng or np.random.default_rng(0)
    tensors = [tf.Variable(p) for p in params]
    with tf.GradientTape() as tape:
        value = loss(*tensors)
    grads = tape.gradient(value, tensors)
    results = []
    for i, p in enumerate(params):
        g = np.zeros_like(p) if grads[i] is None else tf.convert_to_tensor(grads[i]).numpy()
        flat = p.reshape(-1)
        if flat.size == 0:
            continue
        for j in rng.choice(flat.size, size=min(num_coords, flat.size), replace=False):
            plus, minus = flat.copy(), flat.copy()
            plus[j] += eps
            minus[j] -= eps
            args_p = [q if k != i else plus.reshape(p.shape) for k, q in enumerate(params)]
            args_m = [q if k != i else minus.reshape(p.shape) for k, q in enumerate(params)]
            numeric = (float(loss(*args_p)) - float(loss(*args_m))) / (2 * eps)
            results.append((i, float(g.reshape(-1)[j]), numeric))
    return results
