"""The compiled kernels of the active backend's binding against the keras.ops
reference and finite differences: TensorFlow custom ops under TensorFlow, XLA
FFI handlers under JAX, ``torch.library`` ops under PyTorch (CI runs this file
with all three). Every kernel: forward pass, every gradient, batch 0 and 1,
float32 and float64, compiled (``tf.function`` / ``jax.jit``; PyTorch: eager,
``torch.compile`` is tested in tests/backends/test_torch_binding.py) and eager,
bit-identical reruns, bad inputs.

The families with GPU kernels (hinge forests and ferns, hard routing) run
their tests on every engine (:func:`engines`): the kernels of the default
device (the CPU engines on CI; the CUDA kernels on a GPU, in the prepared GPU
check, tests/gpu/) and, under JAX, the CPU emulation of the CUDA kernels (the
portable bodies on the CPU launcher), so the bodies a GPU runs are checked on
every CI run.
"""

import contextlib
import os

import numpy as np
import pytest

from keras_trees import ops as tree_ops
from tests._backend import compiled, precision
from tests.backends.conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND not in ("tensorflow", "jax", "torch"),
                                reason=f"no compiled kernels on {BACKEND}")

DTYPES = ["float32", "float64"]
# (batch, dtype): both dtypes at a real batch, the edge batches once each.
CASES = [(9, "float32"), (9, "float64"), (1, "float32"), (0, "float64")]
TOL = {"float32": 2e-5, "float64": 1e-10}
# Depths of the depth sweeps: the edges and a middle one on CI; every depth
# from 1 to 12 with KERAS_TREES_ALL_DEPTHS=1 (the prepared GPU check).
DEPTHS = range(1, 13) if os.environ.get("KERAS_TREES_ALL_DEPTHS") else (1, 2, 5, 12)


def engines():
    """The engines of the families with GPU kernels: "kernels" (the default
    device's compiled kernels) and, under JAX, "portable" (the CPU emulation of
    the CUDA kernels)."""
    return ["kernels", "portable"] if BACKEND == "jax" else ["kernels"]


def tel_engines():
    """The engines of the Tree Ensemble Layer: as :func:`engines`, and under
    TensorFlow also "portable" (the CPU kernels of the trace-free ops, the
    CPU emulation of their GPU kernels)."""
    return ["kernels", "portable"] if BACKEND in ("jax", "tensorflow") else ["kernels"]


@contextlib.contextmanager
def engine_scope(engine):
    if engine == "kernels":
        yield
        return
    from keras_trees.ops import _library

    if BACKEND == "tensorflow":
        import tensorflow as tf

        with _library.portable_bodies(), tf.device("/CPU:0"):
            yield
        return
    import jax

    with _library.portable_bodies(), jax.default_device(jax.devices("cpu")[0]):
        yield


def sweep_engines():
    """The engines of the depth sweeps: the GPU kernels on a GPU, else their
    CPU emulation (JAX); the CPU engines' depths are covered by tests/ops/."""
    if BACKEND != "jax":
        return ["portable"]  # skipped: see jax_only
    import jax

    return ["kernels"] if jax.default_backend() in ("gpu", "cuda") else ["portable"]


jax_only = pytest.mark.skipif(BACKEND != "jax", reason="the CPU emulation of the GPU kernels is bound to JAX")


def test_compiled_kernels_are_built_and_loaded():
    """Guard: the suite fails if the kernels silently fall back to the reference."""
    if os.environ.get("KERAS_TREES_DISABLE_CUSTOM_OPS"):
        pytest.skip("KERAS_TREES_DISABLE_CUSTOM_OPS is set")
    assert tree_ops.custom_ops_available(), tree_ops.load_error()
    report = tree_ops.execution_report()
    assert report["library_loaded"] and "kernels" in report["devices"].values(), report["summary"]


def numpy(tree):
    return [np.asarray(t) for t in tree] if isinstance(tree, (list, tuple)) else np.asarray(tree)


def value_and_gradients(fn, args, diff, cotangent):
    """``sum(fn(*args) * cotangent)`` and its gradients with respect to args[i], i in diff."""
    if BACKEND == "jax":
        import jax
        import jax.numpy as jnp

        def loss(*free):
            full = list(args)
            for i, v in zip(diff, free):
                full[i] = v
            return jnp.sum(fn(*full) * cotangent)

        value, grads = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(diff)))))(
            *[args[i] for i in diff])
        return float(value), numpy(grads)
    if BACKEND == "torch":
        import torch

        full = [torch.tensor(a) for a in args]
        for i in diff:
            full[i].requires_grad_(True)
        value = (fn(*full) * torch.as_tensor(cotangent)).sum()
        grads = torch.autograd.grad(value, [full[i] for i in diff], allow_unused=True)
        return float(value.detach()), [np.zeros(args[i].shape) if g is None else g.detach().numpy()
                              for i, g in zip(diff, grads)]
    import tensorflow as tf

    full = [tf.constant(a) for a in args]
    with tf.GradientTape() as tape:
        tape.watch([full[i] for i in diff])
        value = tf.reduce_sum(fn(*full) * cotangent)
    grads = tape.gradient(value, [full[i] for i in diff])
    return float(value), [np.zeros(args[i].shape) if g is None else tf.convert_to_tensor(g).numpy()
                          for i, g in zip(diff, grads)]


def check_gradients(kernel, reference, args, diff, dtype, rng, fd_coords=8):
    """Kernel vs reference autodiff; in float64 also vs central differences."""
    out = np.asarray(kernel(*args))
    cot = rng.normal(size=out.shape).astype(dtype)
    _, g_kernel = value_and_gradients(kernel, args, diff, cot)
    _, g_ref = value_and_gradients(reference, args, diff, cot)
    for i, a, b in zip(diff, g_kernel, g_ref):
        np.testing.assert_allclose(a, b, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10, err_msg=f"gradient {i}")
    if dtype == "float64":
        check_finite_differences(kernel, args, diff, g_kernel, cot, rng, fd_coords)


def check_finite_differences(kernel, args, diff, grads, cot, rng, fd_coords):
    """``grads`` (of sum(kernel(*args) * cot) for args[i], i in diff) against
    central differences of the kernel at ``fd_coords`` coordinates each (float64)."""
    eps = 1e-6
    for i, g in zip(diff, grads):
        flat = args[i].reshape(-1)
        for j in rng.choice(flat.size, size=min(fd_coords, flat.size), replace=False):
            shifted = []
            for sign in (1, -1):
                p = flat.copy()
                p[j] += sign * eps
                full = list(args)
                full[i] = p.reshape(args[i].shape)
                shifted.append(float(np.sum(np.asarray(kernel(*full)) * cot)))
            numeric = (shifted[0] - shifted[1]) / (2 * eps)
            assert abs(g.reshape(-1)[j] - numeric) <= 1e-5 * max(1.0, abs(numeric)), (i, j)


def ffi_attributes(jaxpr, name):
    """The values of attribute ``name`` of every XLA FFI call in a jaxpr (nested ones too)."""
    found = []
    for eqn in jaxpr.eqns:
        found += [value for key, value in dict(eqn.params.get("attributes", ())).items() if key == name]
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found += ffi_attributes(inner, name)
    return found


def check_deterministic(fn, args):
    first = numpy(fn(*args))
    again = numpy(compiled(fn)(*args))
    for a, b in zip(first if isinstance(first, list) else [first], again if isinstance(again, list) else [again]):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- Tree Ensemble Layer


def ensemble_args(rng, batch, dtype, trees=3, depth=3, features=4, units=2):
    x = rng.normal(size=(batch, features)).astype(dtype)
    w = rng.normal(size=(trees, 2**depth - 1, features)).astype(dtype)
    b = rng.normal(scale=0.3, size=(trees, 2**depth - 1)).astype(dtype)
    o = rng.normal(size=(trees, 2**depth, units)).astype(dtype)
    return [x, w, b, o]


@pytest.mark.parametrize("engine", tel_engines())
@pytest.mark.parametrize("batch,dtype", CASES)
def test_soft_tree_ensemble(dtype, batch, engine):
    rng = np.random.default_rng(batch)
    gamma = 2.0
    kernel = lambda x, w, b, o: tree_ops.soft_tree_ensemble(x, w, b, o, gamma)  # noqa: E731
    reference = lambda x, w, b, o: tree_ops.soft_tree_ensemble_reference(x, w, b, o, gamma)  # noqa: E731
    with precision(dtype), engine_scope(engine):
        args = ensemble_args(rng, batch, dtype)
        out = np.asarray(kernel(*args))
        assert out.shape == (batch, 2) and out.dtype == dtype
        np.testing.assert_allclose(out, np.asarray(reference(*args)), rtol=TOL[dtype], atol=TOL[dtype])
        np.testing.assert_allclose(np.asarray(compiled(kernel)(*args)), out, rtol=TOL[dtype], atol=TOL[dtype])
        if batch > 1:
            check_gradients(kernel, reference, args, [0, 1, 2, 3], dtype, rng)
        check_deterministic(kernel, args)


@pytest.mark.parametrize("engine", tel_engines())
@pytest.mark.parametrize("dtype", DTYPES)
def test_soft_tree_ensemble_gamma_gradient(dtype, engine):
    """A differentiated gamma (a trainable width) gets the reference's gradient
    on the kernels too, and the central differences' in float64."""
    rng = np.random.default_rng(7)
    kernel = tree_ops.soft_tree_ensemble
    reference = tree_ops.soft_tree_ensemble_reference
    with precision(dtype), engine_scope(engine):
        args = ensemble_args(rng, 9, dtype) + [np.asarray(1.5, dtype)]
        check_gradients(kernel, reference, args, [1, 4], dtype, rng)
        _, (g_gamma,) = value_and_gradients(kernel, args, [4], np.ones((9, 2), dtype))
        assert float(g_gamma) != 0.0


def ensemble_vjp(x, w, b, o, gamma, cot):
    """Output and the gradients of sum(output * cot) for x, w, b and o (JAX)."""
    import jax

    def run(x, w, b, o):
        out, vjp = jax.vjp(lambda x, w, b, o: tree_ops.soft_tree_ensemble(x, w, b, o, gamma), x, w, b, o)
        return [out, *vjp(cot)]

    return numpy(jax.jit(run)(x, w, b, o))


@pytest.mark.slow_on("jax")
@jax_only
@pytest.mark.parametrize("engine", sweep_engines())
def test_soft_tree_ensemble_depths(engine):
    """Depths 1 to 12 (:data:`DEPTHS`), an odd batch of 5 in float32 and
    float64 in turn, gamma from "every node hard" to "every leaf reachable":
    output and every gradient against the CPU core (within rounding), central
    differences (float64) and the reference's output and gradients (at depth
    12 the jit-compiled gradients of the reference were once zero at some
    interior nodes: XLA's CPU compiler and ``ops.clip`` in the smooth-step,
    now clamped by selects)."""
    for depth in DEPTHS:
        dtype = "float64" if depth == 12 else ("float32", "float64")[depth % 2]
        for gamma in (0.05, 1.0, 50.0):
            rng = np.random.default_rng(depth)
            kernel = lambda x, w, b, o, gamma=gamma: tree_ops.soft_tree_ensemble(x, w, b, o, gamma)  # noqa: E731
            reference = lambda x, w, b, o, gamma=gamma: tree_ops.soft_tree_ensemble_reference(  # noqa: E731
                x, w, b, o, gamma)
            with precision(dtype):
                args = ensemble_args(rng, 5, dtype, trees=2, depth=depth, features=6, units=3)
                cot = rng.normal(size=(5, 3)).astype(dtype)
                core = ensemble_vjp(*args, gamma, cot)  # the CPU engine (no GPU here) or the GPU
                with engine_scope(engine):
                    got = ensemble_vjp(*args, gamma, cot)
                    np.testing.assert_allclose(got[0], np.asarray(reference(*args)), rtol=TOL[dtype],
                                               atol=TOL[dtype], err_msg=f"depth {depth}, gamma {gamma}")
                    if gamma == 1.0:
                        check_gradients(kernel, reference, args, [0, 1, 2, 3], dtype, rng, fd_coords=2)
                    if gamma == 1.0 and dtype == "float64":
                        check_finite_differences(kernel, args, [0, 1, 2, 3], got[1:], cot, rng, 3)
                for a, c in zip(got, core):
                    np.testing.assert_allclose(a, c, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10,
                                               err_msg=f"depth {depth}, gamma {gamma}")


@pytest.mark.skipif(BACKEND != "tensorflow", reason="the trace-free TensorFlow ops")
def test_soft_tree_ensemble_tf_trace_free_ops():
    """The trace-free ops (their CPU kernels: the GPU pipeline on the CPU
    executor) against the traced CPU op at depths 1, 2 and 5, gamma 0.05, 1
    and 50, float32 and float64 in turn: output and every gradient within
    rounding; central differences at gamma 1 (float64). The graph holds the
    trace-free op only inside portable_bodies() (what a GPU placement gets)."""
    import tensorflow as tf

    from keras_trees.ops import _library

    for depth in (1, 2, 5):
        dtype = ("float32", "float64")[depth % 2]
        for gamma in (0.05, 1.0, 50.0):
            rng = np.random.default_rng(depth)
            kernel = lambda x, w, b, o, gamma=gamma: tree_ops.soft_tree_ensemble(x, w, b, o, gamma)  # noqa: E731
            with precision(dtype):
                args = ensemble_args(rng, 5, dtype, trees=2, depth=depth, features=6, units=3)
                cot = rng.normal(size=(5, 3)).astype(dtype)
                with tf.device("/CPU:0"):  # the traced CPU op, also where a GPU is visible
                    want = value_and_gradients(kernel, args, [0, 1, 2, 3], cot)
                with engine_scope("portable"):
                    got = value_and_gradients(kernel, args, [0, 1, 2, 3], cot)
                    np.testing.assert_allclose(got[0], want[0], rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
                    for a, c in zip(got[1], want[1]):
                        np.testing.assert_allclose(a, c, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10,
                                                   err_msg=f"depth {depth}, gamma {gamma}")
                    if gamma == 1.0 and dtype == "float64":
                        check_finite_differences(kernel, args, [0, 1, 2, 3], got[1], cot, rng, 3)
    x, w, b, o = ensemble_args(np.random.default_rng(0), 3, "float32")
    specs = [tf.TensorSpec(a.shape, a.dtype) for a in (x, w, b, o)]

    def graph_ops(device):
        def fn(*a):
            with tf.device(device):
                return tree_ops.soft_tree_ensemble(*a, 1.0)

        graph = tf.function(fn).get_concrete_function(*specs).graph
        return sorted({n.op for n in graph.as_graph_def().node if n.op.startswith("KerasTrees")})

    assert graph_ops("/CPU:0") == ["KerasTrees>SoftTreeEnsemble"]
    with _library.portable_bodies():
        assert graph_ops("/CPU:0") == ["KerasTrees>SoftTreeEnsembleTraceFree"]
    if tf.config.list_physical_devices("GPU") and _library.custom_ops_available("soft_tree"):
        assert graph_ops("/GPU:0") == ["KerasTrees>SoftTreeEnsembleTraceFree"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", tel_engines())
def test_soft_tree_ensemble_over_several_chunks(engine):
    """300 samples through 32 trees of depth 10 (float64): the GPU backward
    pass takes them in three chunks of at most 125 samples (its 64 MiB
    budget, core/tree_ensemble_pipeline.h); every gradient against the
    reference, and bit-identical reruns."""
    rng = np.random.default_rng(17)
    with precision("float64"), engine_scope(engine):
        args = ensemble_args(rng, 300, "float64", trees=32, depth=10, features=4, units=2)
        cot = rng.normal(size=(300, 2))
        kernel = lambda x, w, b, o: tree_ops.soft_tree_ensemble(x, w, b, o, 1.5)  # noqa: E731
        reference = lambda x, w, b, o: tree_ops.soft_tree_ensemble_reference(x, w, b, o, 1.5)  # noqa: E731
        _, g_kernel = value_and_gradients(kernel, args, [0, 1, 2, 3], cot)
        _, g_again = value_and_gradients(kernel, args, [0, 1, 2, 3], cot)
        _, g_ref = value_and_gradients(reference, args, [0, 1, 2, 3], cot)
        for i, (a, again, r) in enumerate(zip(g_kernel, g_again, g_ref)):
            np.testing.assert_array_equal(a, again)
            np.testing.assert_allclose(a, r, rtol=1e-9, atol=1e-9, err_msg=f"gradient {i}")


@pytest.mark.parametrize("engine", tel_engines())
def test_soft_tree_ensemble_rejects_bad_inputs(engine):
    rng = np.random.default_rng(0)
    x, w, b, o = ensemble_args(rng, 4, "float32")
    with engine_scope(engine):
        for fn in (tree_ops.soft_tree_ensemble, compiled(tree_ops.soft_tree_ensemble)):
            for gamma in (0.0, -1.0):
                with pytest.raises(Exception, match="gamma must be a finite number > 0"):
                    np.asarray(fn(x, w, b, o, gamma))
            for name, i in (("x", 0), ("node_weights", 1), ("node_bias", 2), ("leaf_weights", 3)):
                args = [x, w, b, o]
                args[i] = args[i].copy()
                args[i].flat[3] = np.nan if i != 3 else np.inf
                with pytest.raises(Exception, match=f"{name} contains? NaN or Inf"):
                    np.asarray(fn(*args, 1.0))


# ---------------------------------------------------------------- hinge trees and ferns


def hinge_args(rng, batch, dtype, fern, trees=3, depth=3, features=5, units=2):
    n = depth if fern else 2**depth - 1
    x = rng.normal(size=(batch, features)).astype(dtype)
    t = rng.uniform(-1.5, 1.5, size=(trees, n)).astype(dtype)
    f = rng.integers(0, features, size=(trees, n)).astype("int32")
    w = rng.normal(size=(trees, 2**depth, units)).astype(dtype)
    return [x, t, f, w]


@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("fern", [False, True], ids=["tree", "fern"])
@pytest.mark.parametrize("batch,dtype", CASES)
def test_hinge_forest(fern, dtype, batch, engine):
    rng = np.random.default_rng(batch + 10 * fern)
    kernel = lambda x, t, f, w: tree_ops.hinge_forest(x, t, f, w, fern=fern)  # noqa: E731
    reference = lambda x, t, f, w: tree_ops.hinge_forest_reference(x, t, f, w, fern=fern)  # noqa: E731
    with precision(dtype), engine_scope(engine):
        args = hinge_args(rng, batch, dtype, fern)
        out = np.asarray(kernel(*args))
        assert out.shape == (batch, 3, 2) and out.dtype == dtype
        np.testing.assert_allclose(out, np.asarray(reference(*args)), rtol=TOL[dtype], atol=TOL[dtype])
        dense = np.asarray(tree_ops.hinge_forest_dense(*args, fern=fern))
        np.testing.assert_allclose(out, dense, rtol=TOL[dtype], atol=TOL[dtype])
        if batch > 1:
            check_gradients(kernel, reference, args, [0, 1, 3], dtype, rng)
        check_deterministic(kernel, args)
        # The margin output is differentiable too (the layers' margin regularizers use it).
        margin = lambda x, t, f, w: tree_ops.hinge_forest_traversal(x, t, f, fern=fern)[1]  # noqa: E731
        margin_ref = lambda x, t, f, w: tree_ops.hinge_traversal_reference(x, t, f, fern=fern)[1]  # noqa: E731
        leaf, _, vertex = numpy(tree_ops.hinge_forest_traversal(*args[:3], fern=fern))
        leaf_ref, _, vertex_ref = numpy(tree_ops.hinge_traversal_reference(*args[:3], fern=fern))
        np.testing.assert_array_equal(leaf, leaf_ref)
        np.testing.assert_array_equal(vertex, vertex_ref)
        if batch > 1:
            check_gradients(margin, margin_ref, args, [0, 1], dtype, rng)


@pytest.mark.parametrize("engine", engines())
def test_hinge_forest_rejects_bad_inputs(engine):
    rng = np.random.default_rng(0)
    x, t, f, w = hinge_args(rng, 4, "float32", fern=False)
    bad = f.copy()
    bad[1, 2] = 7
    with engine_scope(engine):
        for fn in (tree_ops.hinge_forest, compiled(tree_ops.hinge_forest)):
            with pytest.raises(Exception, match=r"feature_indices\[1, 2\] = 7 is out of range"):
                np.asarray(fn(x, t, bad, w))
            for name, i in (("x", 0), ("thresholds", 1), ("leaf_weights", 3)):
                args = [x, t, f, w]
                args[i] = args[i].copy()
                args[i].flat[3] = np.nan if i != 3 else np.inf
                with pytest.raises(Exception, match=f"{name} contains? NaN or Inf"):
                    np.asarray(fn(*args))
        with pytest.raises(ValueError, match="leaf_weights must have shape"):
            tree_ops.hinge_forest(x, t, f, w[:, :4])


@pytest.mark.slow_on("jax")
@jax_only
@pytest.mark.parametrize("engine", sweep_engines())
@pytest.mark.parametrize("fern", [False, True], ids=["tree", "fern"])
def test_hinge_forest_depths(fern, engine):
    """Depths 1 to 12 (:data:`DEPTHS`; 2 to 4096 leaves), an odd batch of 5
    in float32 and float64 in turn: outputs and every gradient against the reference."""
    for depth in DEPTHS:
        dtype = ("float32", "float64")[depth % 2]
        rng = np.random.default_rng(depth)
        kernel = lambda x, t, f, w: tree_ops.hinge_forest(x, t, f, w, fern=fern)  # noqa: E731
        reference = lambda x, t, f, w: tree_ops.hinge_forest_reference(x, t, f, w, fern=fern)  # noqa: E731
        with precision(dtype), engine_scope(engine):
            args = hinge_args(rng, 5, dtype, fern, trees=2, depth=depth, features=6, units=3)
            np.testing.assert_allclose(np.asarray(kernel(*args)), np.asarray(reference(*args)),
                                       rtol=TOL[dtype], atol=TOL[dtype], err_msg=f"depth {depth}")
            check_gradients(kernel, reference, args, [0, 1, 3], dtype, rng, fd_coords=2)


@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("engine", engines())
def test_hinge_forest_gradients_over_long_runs(engine):
    """700 samples through depth-2 trees and ferns: each leaf and vertex
    gathers hundreds of samples, so the GPU kernels' run sums cross their
    blocks of 32 sorted positions (pipeline::SumRuns)."""
    rng = np.random.default_rng(3)
    with precision("float64"), engine_scope(engine):
        for fern in (False, True):
            kernel = lambda x, t, f, w, fern=fern: tree_ops.hinge_forest(x, t, f, w, fern=fern)  # noqa: E731
            reference = lambda x, t, f, w, fern=fern: tree_ops.hinge_forest_reference(x, t, f, w, fern=fern)  # noqa: E731
            args = hinge_args(rng, 700, "float64", fern, trees=2, depth=2, features=3, units=2)
            check_gradients(kernel, reference, args, [0, 1, 3], "float64", rng, fd_coords=2)


@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("engine", engines())
def test_hinge_forest_wide_rows(engine):
    """Rows of 16 and 40 outputs per tree (the leaf-weight rows longer than
    the 4-way partial sums of portable::Dot and, on a GPU, than a warp)
    against the reference, forward and every gradient."""
    rng = np.random.default_rng(11)
    with precision("float64"), engine_scope(engine):
        for fern, units in ((False, 16), (True, 40)):
            kernel = lambda x, t, f, w, fern=fern: tree_ops.hinge_forest(x, t, f, w, fern=fern)  # noqa: E731
            reference = lambda x, t, f, w, fern=fern: tree_ops.hinge_forest_reference(x, t, f, w, fern=fern)  # noqa: E731
            args = hinge_args(rng, 6, "float64", fern, trees=2, depth=3, features=4, units=units)
            np.testing.assert_allclose(np.asarray(kernel(*args)), np.asarray(reference(*args)),
                                       rtol=TOL["float64"], atol=TOL["float64"])
            check_gradients(kernel, reference, args, [0, 1, 3], "float64", rng, fd_coords=2)


def test_gpu_kernels_match_their_cpu_emulation_bitwise():
    """On a GPU (the prepared check, tests/gpu/): the CUDA kernels' outputs and
    gradients equal, bit for bit, those of their CPU emulation (the same
    portable bodies on the CPU launcher)."""
    if BACKEND != "jax":
        pytest.skip("the CUDA kernels are run through JAX")
    import jax

    if jax.default_backend() not in ("gpu", "cuda"):
        pytest.skip("no GPU: the CPU emulation is tested against the reference instead")
    from keras_trees.ops import _library

    assert tree_ops.custom_ops_available("hinge"), tree_ops.execution_report()["summary"]
    assert tree_ops.custom_ops_available("soft_tree"), tree_ops.execution_report()["summary"]
    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        with precision(dtype):
            for fern, units in ((False, 5), (True, 5), (False, 40), (True, 19)):
                args = hinge_args(rng, 37, dtype, fern, trees=4, depth=6, features=9, units=units)
                cot = rng.normal(size=(37, 4, units)).astype(dtype)

                def run(x, t, w, fern=fern, f=args[2], cot=cot):
                    out, vjp = jax.vjp(lambda x, t, w: tree_ops.hinge_forest(x, t, f, w, fern=fern), x, t, w)
                    return [out, *vjp(cot)]

                gpu = numpy(jax.jit(run)(args[0], args[1], args[3]))
                with engine_scope("portable"):
                    cpu = numpy(jax.jit(run)(args[0], args[1], args[3]))
                for a, b in zip(gpu, cpu):
                    np.testing.assert_array_equal(a, b)
            for features in (7, 64, 200):  # 4, 16 and 32 lanes per pair on the GPU
                x = rng.normal(size=(29, features)).astype(dtype)
                w = rng.normal(size=(3, 31, features)).astype(dtype)
                b = rng.normal(size=(3, 31)).astype(dtype)
                is_split = rng.random((3, 31)) < 0.9
                gpu = numpy(tree_ops.hard_route(x, w, b, is_split))
                with engine_scope("portable"):
                    cpu = numpy(tree_ops.hard_route(x, w, b, is_split))
                for a, c in zip(gpu, cpu):
                    np.testing.assert_array_equal(a, c)
            # The Tree Ensemble Layer: soft and hard splits, and 300 samples
            # through depth 10 (three backward chunks).
            for batch, trees, depth, gamma in ((37, 4, 6, 1.0), (37, 4, 6, 0.05), (300, 32, 10, 1.5)):
                args = ensemble_args(rng, batch, dtype, trees=trees, depth=depth, features=9, units=5)
                cot = rng.normal(size=(batch, 5)).astype(dtype)
                gpu = ensemble_vjp(*args, gamma, cot)
                with engine_scope("portable"):
                    cpu = ensemble_vjp(*args, gamma, cot)
                for a, c in zip(gpu, cpu):
                    np.testing.assert_array_equal(a, c)
    assert _library.target("KerasTreesHingeForest") == "KerasTreesHingeForest"


# ---------------------------------------------------------------- hard routing


@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("experts", [0, 3], ids=["oblique", "noisy_or"])
@pytest.mark.parametrize("batch,dtype", CASES)
def test_hard_route(experts, dtype, batch, engine):
    rng = np.random.default_rng(batch + 7 * experts)
    check_hard_route(rng, experts, dtype, batch, depth=3, engine=engine)


@pytest.mark.slow_on("jax")
@jax_only
@pytest.mark.parametrize("engine", sweep_engines())
@pytest.mark.parametrize("experts", [0, 2], ids=["oblique", "noisy_or"])
def test_hard_route_depths(experts, engine):
    """Depths 1 to 12 (:data:`DEPTHS`), an odd batch, float32 and float64 in turn."""
    for depth in DEPTHS:
        rng = np.random.default_rng(depth + 20 * experts)
        check_hard_route(rng, experts, ("float32", "float64")[depth % 2], 7, depth=depth, engine=engine)


@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("experts", [0, 2], ids=["oblique", "noisy_or"])
def test_hard_route_input_widths(experts, engine):
    """Inputs of 3 to 200 features: every width of the GPU's lane groups (4,
    8, 16 and 32 lanes per (sample, tree), core/hard_routing_bodies.h Lanes),
    rows shorter than a group, and rows of several elements per lane, against
    the reference (float64)."""
    for features in (3, 20, 33, 64, 100, 200):
        rng = np.random.default_rng(features + 3 * experts)
        check_hard_route(rng, experts, "float64", 9, depth=4, engine=engine, features=features)


def check_hard_route(rng, experts, dtype, batch, depth, engine, features=4):
    trees = 2
    internal = 2**depth - 1
    is_split = rng.random((trees, internal)) < 0.8
    is_split[:, 0] = True
    with precision(dtype), engine_scope(engine):
        x = rng.normal(size=(batch, features)).astype(dtype)
        if experts:
            w = rng.normal(size=(trees, internal, experts, features)).astype(dtype)
            b = rng.normal(size=(trees, internal, experts)).astype(dtype)
            extra = [rng.uniform(0, 1, size=(trees, internal, experts)).astype(dtype),
                     rng.uniform(0, 1, size=(trees, internal)).astype(dtype)]
        else:
            w = rng.normal(size=(trees, internal, features)).astype(dtype)
            b = rng.normal(size=(trees, internal)).astype(dtype)
            extra = []

        def kernel(x, w, b, is_split, *extra):
            if extra:
                return tree_ops.hard_route(x, w, b, is_split, expert_weights=extra[0], threshold=extra[1])
            return tree_ops.hard_route(x, w, b, is_split)

        args = [x, w, b, is_split, *extra]
        node, path = numpy(kernel(*args))
        node_ref, path_ref = numpy(tree_ops.hard_route_reference(*args))
        assert node.shape == (batch, trees) and path.shape == (batch, trees, depth)
        np.testing.assert_array_equal(node, node_ref)
        np.testing.assert_allclose(path, path_ref, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
        check_deterministic(kernel, args)


@pytest.mark.parametrize("engine", engines())
def test_hard_route_rejects_bad_inputs(engine):
    x = np.zeros((2, 3), "float32")
    w = np.zeros((1, 3, 3), "float32")
    b = np.zeros((1, 3), "float32")
    split = np.ones((1, 3), bool)
    with engine_scope(engine):
        with pytest.raises(Exception, match="x contains NaN"):
            np.asarray(compiled(tree_ops.hard_route)(x + np.nan, w, b, split)[0])
        with pytest.raises(Exception, match="split_weights contains NaN"):
            np.asarray(tree_ops.hard_route(x, w + np.inf, b, split)[0])
        with pytest.raises(Exception, match="not finite"):  # <w, x> + b overflows
            np.asarray(tree_ops.hard_route(x + 3e38, w + 3e38, b, split)[0])
        we = np.zeros((1, 3, 2, 3), "float32")
        rates = np.ones((1, 3, 2), "float32")
        rates[0, 1, 1] = -0.5
        with pytest.raises(Exception, match=r"expert_weights must be finite and >= 0 \(noisy-OR rates\), got -0.5"):
            np.asarray(tree_ops.hard_route(x, we, rates * 0, split, expert_weights=rates, threshold=b)[0])
        with pytest.raises(ValueError, match="split_bias"):
            tree_ops.hard_route(x, w, np.zeros((1, 2), "float32"), split)


# ---------------------------------------------------------------- loss-augmented inference


@pytest.mark.parametrize("loss", ["log", "squared"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
@pytest.mark.parametrize("batch,dtype", CASES)
def test_loss_augmented_inference(loss, fast, dtype, batch):
    rng = np.random.default_rng(batch)
    depth, features, classes = 3, 4, 3
    with precision(dtype):
        x = rng.normal(size=(batch, features)).astype(dtype)
        w = rng.normal(size=(2**depth - 1, features)).astype(dtype)
        b = rng.normal(size=(2**depth - 1,)).astype(dtype)
        theta = rng.normal(size=(2**depth, classes)).astype(dtype)
        if loss == "log":
            y = rng.integers(0, classes, size=batch).astype("int32")
        else:
            y = rng.normal(size=(batch, classes)).astype(dtype)

        def kernel(x, w, b, theta, y):
            return tree_ops.loss_augmented_inference(x, w, b, theta, y, loss=loss, fast=fast)

        g, h, score = numpy(kernel(x, w, b, theta, y))
        g_ref, h_ref, score_ref = numpy(compiled(
            lambda *a: tree_ops.loss_augmented_inference_reference(*a, loss=loss, fast=fast)
        )(x, w, b, theta, y))
        assert g.shape == h.shape == score.shape == (batch,)
        np.testing.assert_array_equal(h, h_ref)
        np.testing.assert_array_equal(g, g_ref)
        np.testing.assert_allclose(score, score_ref, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
        check_deterministic(kernel, [x, w, b, theta, y])


def test_loss_augmented_inference_rejects_labels_out_of_range_when_compiled():
    x = np.zeros((2, 3), "float32")
    w, b, theta = np.ones((3, 3), "float32"), np.zeros(3, "float32"), np.zeros((4, 2), "float32")
    fn = compiled(lambda x, y: tree_ops.loss_augmented_inference(x, w, b, theta, y)[0])
    with pytest.raises(Exception, match=r"labels must lie in \[0, 2\), got labels\[1\] = 5"):
        np.asarray(fn(x, np.array([0, 5], "int32")))


def overflow_problem(where):
    """A depth-3 tree and one sample whose split value at heap node ``where``
    overflows (3e38 * 2 in float32); the sample goes right at the root and left
    at node 1, so the fast search reads nodes 0, 2, 6 (its path), 1, 3 and 5
    (the flips), but not node 4."""
    x = np.ones((1, 2), "float32")
    w = np.full((7, 2), 0.25, "float32")
    w[1] = -0.25
    w[where] = 3e38
    return x, w, np.zeros(7, "float32"), np.zeros((8, 2), "float32"), np.array([1], "int32")


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
@pytest.mark.parametrize("where", [0, 3, 4], ids=["root", "flip", "unread"])
def test_loss_augmented_inference_refuses_an_overflowing_split_value(fast, where):
    """A split value that the search reads and that is not finite fails with
    hard routing's message on the kernel and on the reference, compiled or
    not; one the fast search never reads does not matter to it."""
    args = overflow_problem(where)
    fns = [lambda *a: tree_ops.loss_augmented_inference(*a, fast=fast),
           lambda *a: tree_ops.loss_augmented_inference_reference(*a, fast=fast)]
    for fn in fns + [compiled(fn) for fn in fns]:
        if fast and where == 4:
            g, h, score = numpy(fn(*args))
            assert h.tolist() == [7] and np.isfinite(score).all()  # right at nodes 0, 2 and 6
        else:
            with pytest.raises(Exception, match="a split value on the path of a sample is not finite"):
                numpy(fn(*args))


# ---------------------------------------------------------------- pruned probabilistic routing


def pruned_args(rng, batch, dtype, experts, trees=3, depth=3, features=4, units=2):
    internal = 2**depth - 1
    x = rng.normal(size=(batch, features)).astype(dtype)
    is_split = rng.random((trees, internal)) < 0.8
    is_split[:, 0] = True
    gamma = rng.uniform(0.5, 3.0, size=(trees, internal)).astype(dtype)
    v = rng.normal(size=(trees, 2 * internal + 1, units)).astype(dtype)
    if experts:
        w = rng.normal(size=(trees, internal, experts, features)).astype(dtype)
        b = rng.normal(size=(trees, internal, experts)).astype(dtype)
        r = rng.uniform(0, 1, size=(trees, internal, experts)).astype(dtype)
        rate0 = rng.uniform(0.5, 1.5, size=(trees, internal)).astype(dtype)
        return [x, w, b, gamma, v, r, rate0], is_split
    w = rng.normal(size=(trees, internal, features)).astype(dtype)
    b = rng.normal(size=(trees, internal)).astype(dtype)
    return [x, w, b, gamma, v], is_split


@pytest.mark.parametrize("threshold", [0.0, 0.05], ids=["exact", "pruned"])
@pytest.mark.parametrize("experts", [0, 3], ids=["oblique", "noisy_or"])
@pytest.mark.parametrize("batch,dtype", CASES)
def test_pruned_routing(threshold, experts, batch, dtype):
    rng = np.random.default_rng(batch + 5 * experts)
    with precision(dtype):
        args, is_split = pruned_args(rng, batch, dtype, experts)

        def call(fn, *a, **kw):
            x, w, b, gamma, v, *extra = a
            more = dict(expert_weights=extra[0], rate0=extra[1]) if extra else {}
            return fn(x, w, b, gamma, is_split, v, threshold, **more, **kw)

        kernel = lambda *a: call(tree_ops.pruned_route, *a)  # noqa: E731
        reference = lambda *a: call(tree_ops.pruned_route_reference, *a)  # noqa: E731
        out, kept, evaluations, dropped = numpy(call(tree_ops.pruned_route, *args, with_statistics=True))
        ref = numpy(call(tree_ops.pruned_route_reference, *args, with_statistics=True))
        assert out.shape == (batch, 3, 2) and out.dtype == dtype
        np.testing.assert_allclose(out, ref[0], rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
        np.testing.assert_array_equal(kept, ref[1])
        np.testing.assert_array_equal(evaluations, ref[2])
        np.testing.assert_allclose(dropped, ref[3], rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
        # The documented bound on the dropped mass.
        assert np.all(dropped <= threshold * (evaluations + 1 - kept) + TOL[dtype])
        if batch > 1:
            check_gradients(kernel, reference, args, list(range(len(args))), dtype, rng)
            weights = rng.normal(size=(batch, 3, 2)).astype(dtype)
            stats = lambda *a: call(tree_ops.pruned_leaf_statistics, *a[:4], weights, *a[5:])  # noqa: E731
            stats_ref = lambda *a: call(tree_ops.pruned_leaf_statistics_reference, *a[:4], weights, *a[5:])  # noqa: E731
            np.testing.assert_allclose(np.asarray(stats(*args)), np.asarray(stats_ref(*args)),
                                       rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
        check_deterministic(kernel, args)


@pytest.mark.parametrize("threshold", [0.0, 0.05], ids=["exact", "pruned"])
@pytest.mark.parametrize("batch,dtype", CASES)
def test_pruned_em_statistics(threshold, batch, dtype):
    # The fused EM E-step against its reference (eager and compiled), deterministic.
    rng = np.random.default_rng(31 + batch)
    with precision(dtype):
        (x, w, b, gamma, _), is_split = pruned_args(rng, batch, dtype, 0, units=3)
        v = rng.uniform(0.01, 1, size=(3, 15, 3))
        v = (v / v.sum(-1, keepdims=True)).astype(dtype)
        labels = rng.integers(0, 3, batch).astype("int32")
        weights = rng.uniform(0, 2, batch).astype(dtype)

        def kernel(x, w, b, gamma, v, labels, weights):
            return tree_ops.pruned_em_statistics(x, w, b, gamma, is_split, v, labels, weights, threshold)

        args = [x, w, b, gamma, v, labels, weights]
        counts = np.asarray(kernel(*args))
        ref = np.asarray(tree_ops.pruned_em_statistics_reference(x, w, b, gamma, is_split, v, labels, weights,
                                                                  threshold))
        assert counts.shape == (3, 15, 3) and counts.dtype == dtype
        np.testing.assert_allclose(counts, ref, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
        np.testing.assert_allclose(counts.sum(), weights.sum(), rtol=TOL[dtype] * 10)
        check_deterministic(kernel, args)
    # Bad labels are rejected inside compiled code too (the kernel checks).
    if batch > 1:
        bad = labels.copy()
        bad[1] = 7
        with pytest.raises(Exception, match=r"labels must lie in \[0, 3\).*got labels\[1\] = 7"):
            np.asarray(compiled(kernel)(x, w, b, gamma, v, bad, weights))


@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("experts", [0, 3], ids=["oblique", "noisy_or"])
def test_pruned_weight_gradients_when_the_input_is_data(experts):
    # x not differentiated (the usual case: x is data): the kernels skip dL/dx
    # (TensorFlow: the tape's skip_input_indices; JAX: custom_vjp's perturbed
    # flag), and the weight gradients and statistics gradients are unchanged.
    rng = np.random.default_rng(11 + experts)
    args, is_split = pruned_args(rng, 12, "float64", experts)
    with precision("float64"):

        def call(fn, *a):
            x, w, b, gamma, v, *extra = a
            more = dict(expert_weights=extra[0], rate0=extra[1]) if extra else {}
            return fn(x, w, b, gamma, is_split, v, 0.05, **more)

        weights = rng.normal(size=(12, 3, 2))
        for kernel, reference in [
            (lambda *a: call(tree_ops.pruned_route, *a), lambda *a: call(tree_ops.pruned_route_reference, *a)),
            (lambda *a: call(tree_ops.pruned_leaf_statistics, *a[:4], weights, *a[5:]),
             lambda *a: call(tree_ops.pruned_leaf_statistics_reference, *a[:4], weights, *a[5:])),
        ]:
            check_gradients(kernel, reference, args, list(range(1, len(args))), "float64", rng, fd_coords=3)
            if BACKEND == "jax":
                import jax

                def loss(w, kernel=kernel):
                    return kernel(args[0], w, *args[2:]).sum()

                flags = ffi_attributes(jax.make_jaxpr(jax.grad(loss))(args[1]).jaxpr, "x_grad")
                assert flags == [False], flags


@jax_only
@pytest.mark.parametrize("engine", sweep_engines())
def test_hinge_forest_deferred_checks(monkeypatch, engine):
    """What a GPU does by default (KERAS_TREES_GPU_CHECKS unset; core/check_modes.h),
    on a GPU's kernels, else emulated on the CPU with
    KERAS_TREES_GPU_CHECKS=deferred: a call with a bad
    input does not raise but gives NaN outputs and gradients, and its message
    comes from the next call or from ``check_gpu_errors()``, once."""
    import jax

    rng = np.random.default_rng(0)
    x, t, f, w = hinge_args(rng, 4, "float32", fern=False)
    bad = f.copy()
    bad[1, 2] = 7
    earlier = "an earlier keras-trees call on this GPU failed"
    loss = jax.jit(jax.grad(lambda x, t, w, f: tree_ops.hinge_forest(x, t, f, w).sum(), argnums=(0, 1, 2)))
    monkeypatch.setenv("KERAS_TREES_GPU_CHECKS", "deferred")
    with engine_scope(engine):
        tree_ops.check_gpu_errors()  # nothing left by another test
        assert tree_ops.check_gpu_errors() is None
        for fn in (tree_ops.hinge_forest, compiled(tree_ops.hinge_forest)):
            out = np.asarray(fn(x, t, bad, w))
            assert out.shape == (4, 3, 2) and np.isnan(out).all()
            with pytest.raises(Exception, match=earlier + r".*feature_indices\[1, 2\] = 7 is out of range"):
                np.asarray(fn(x, t, f, w))
            good = np.asarray(fn(x, t, f, w))  # raised once: the next call is clean
            np.testing.assert_allclose(good, np.asarray(tree_ops.hinge_forest_reference(x, t, f, w)), rtol=2e-5,
                                       atol=2e-5)
        nan_x = x.copy()
        nan_x[2, 1] = np.nan
        assert np.isnan(np.asarray(compiled(tree_ops.hinge_forest)(nan_x, t, f, w))).all()
        with pytest.raises(ValueError, match=earlier + r".*: x contains NaN or Inf"):
            tree_ops.check_gpu_errors()
        assert tree_ops.check_gpu_errors() is None
        # In one jitted call, the backward raises what the forward found.
        with pytest.raises(Exception, match=earlier + r".*feature_indices\[1, 2\] = 7"):
            loss(x, t, w, bad)
        with pytest.raises(ValueError, match=earlier + ".*margin contains NaN or Inf"):
            tree_ops.check_gpu_errors()
        # The gradients of a call with a bad feature id: NaN, the message deferred too.
        _, vjp = jax.vjp(lambda x, t, w: tree_ops.hinge_forest(x, t, bad, w), x, t, w)
        with pytest.raises(ValueError, match=earlier + r".*feature_indices\[1, 2\] = 7"):
            tree_ops.check_gpu_errors()
        grads = [np.asarray(g) for g in vjp(np.ones((4, 3, 2), "float32"))]
        assert all(np.isnan(g).all() for g in grads)
        with pytest.raises(ValueError, match=earlier + ".*margin contains NaN or Inf"):
            tree_ops.check_gpu_errors()
        # KERAS_TREES_GPU_CHECKS=sync: the call raises its own message.
        monkeypatch.setenv("KERAS_TREES_GPU_CHECKS", "sync")
        with pytest.raises(Exception, match=r"^(?!an earlier).*feature_indices\[1, 2\] = 7 is out of range"):
            np.asarray(compiled(tree_ops.hinge_forest)(x, t, bad, w))
        assert tree_ops.check_gpu_errors() is None


@jax_only
@pytest.mark.parametrize("engine", sweep_engines())
def test_tree_ensemble_deferred_checks(monkeypatch, engine):
    """The Tree Ensemble Layer's GPU pipelines with deferred checks (as
    test_hinge_forest_deferred_checks): NaN outputs and gradients for a bad
    input, its message at the next call or from ``check_gpu_errors()``, once;
    the sync mode raises at the call. (A bad gamma is refused before the
    kernels run: by the ops' own check.)"""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    x, w, b, o = ensemble_args(rng, 5, "float32")
    earlier = "an earlier keras-trees call on this GPU failed"
    call = jax.jit(lambda x, w, b, o, gamma: tree_ops.soft_tree_ensemble(x, w, b, o, gamma))
    grads = jax.jit(jax.grad(lambda x, w, b, o, gamma: tree_ops.soft_tree_ensemble(x, w, b, o, gamma).sum(),
                             argnums=(0, 1, 2, 3)))
    nan_o = o.copy()
    nan_o[1, 2, 0] = np.nan
    monkeypatch.setenv("KERAS_TREES_GPU_CHECKS", "deferred")
    with engine_scope(engine):
        tree_ops.check_gpu_errors()  # nothing left by another test
        nan_x = x.copy()
        nan_x[3, 1] = np.inf
        out = np.asarray(call(nan_x, w, b, o, jnp.float32(1.0)))
        assert out.shape == (5, 2) and np.isnan(out).all()
        with pytest.raises(Exception, match=earlier + r".*x contains NaN or Inf; the tree ensemble needs finite"):
            np.asarray(call(x, w, b, o, jnp.float32(1.0)))
        good = np.asarray(call(x, w, b, o, jnp.float32(1.0)))  # raised once: the next call is clean
        np.testing.assert_allclose(good, np.asarray(tree_ops.soft_tree_ensemble_reference(x, w, b, o, 1.0)),
                                   rtol=2e-5, atol=2e-5)
        got = [np.asarray(g) for g in grads(x, w, b, nan_o, jnp.float32(1.0))]
        assert all(np.isnan(g).all() for g in got)
        with pytest.raises(ValueError, match=earlier + ".*leaf_weights contains NaN or Inf"):
            tree_ops.check_gpu_errors()
        assert tree_ops.check_gpu_errors() is None
        # Batch 0: the parameter gradients are NaN too.
        empty = [np.asarray(g) for g in grads(x[:0], w, b, nan_o, jnp.float32(1.0))]
        assert all(np.isnan(g).all() for g in empty[1:]) and empty[0].shape == (0, 4)
        with pytest.raises(ValueError, match=earlier + ".*leaf_weights contains NaN or Inf"):
            tree_ops.check_gpu_errors()
        monkeypatch.setenv("KERAS_TREES_GPU_CHECKS", "sync")
        with pytest.raises(Exception, match=r"^(?!an earlier).*leaf_weights contains NaN or Inf"):
            np.asarray(call(x, w, b, nan_o, jnp.float32(1.0)))
        assert tree_ops.check_gpu_errors() is None
