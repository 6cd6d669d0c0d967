"""The GPU kernels of loss-augmented inference: the portable bodies of
custom_ops/core/loss_augmented_bodies.h (fast search one thread per sample,
exact search one block per sample) against the CPU engine and the keras.ops
reference. The outputs are discrete choices: the leaves g and h must equal
the CPU engine's and the reference's exactly (the tie rule is a total order),
the bound within rounding (the bodies' dot products and log-sum-exp are the
portable ones of core/portable.h, not the CPU engine's).

Engines: "portable" (JAX: the CPU emulation of the CUDA kernels, target
KerasTreesLossAugmentedInferencePortable, on every CI run) and "gpu" (the
CUDA kernels of the default device: JAX's KerasTreesLossAugmentedInference on
the "CUDA" platform, TensorFlow's DEVICE_GPU kernel), only when a GPU is
visible (the prepared GPU check, tests/gpu/). Under TensorFlow without a GPU
nothing here runs: TensorFlow has no CPU emulation of this kernel (the JAX
run covers the bodies).
"""

import contextlib

import numpy as np
import pytest

from keras_trees.ops import _library
from keras_trees.ops.loss_augmented import loss_augmented_inference
from tests._backend import precision
from tests.ops.random_inputs import lai_problem
from tests.backends.conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"),
                                reason=f"no GPU kernels of loss-augmented inference on {BACKEND}")


def _has_gpu():
    if BACKEND == "jax":
        import jax

        return jax.default_backend() in ("gpu", "cuda")
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def engines():
    found = ["portable"] if BACKEND == "jax" else []
    if _has_gpu():
        found.append("gpu")
    return found or [pytest.param("none", marks=pytest.mark.skip(
        reason="TensorFlow without a GPU: the bodies are tested through JAX's CPU emulation"))]


@contextlib.contextmanager
def scope(engine):
    """"portable": the CPU emulation; "gpu": the default (GPU) device;
    "cpu": the CPU engine; "reference": keras.ops."""
    if engine == "gpu":
        yield
        return
    if engine == "reference":
        with _library.reference_only():
            yield
        return
    if BACKEND == "jax":
        import jax

        with contextlib.ExitStack() as stack:
            stack.enter_context(jax.default_device(jax.devices("cpu")[0]))
            if engine == "portable":
                stack.enter_context(_library.portable_bodies())
            yield
        return
    import tensorflow as tf

    with tf.device("/CPU:0"):
        yield


def run(engine, args, loss, fast):
    with precision(np.asarray(args[0]).dtype), scope(engine):
        out = loss_augmented_inference(*args, loss=loss, fast=fast)
        return [np.asarray(t) for t in out]


def problem(rng, depth, loss, batch, p=3, k=4, dtype="float64", scale=1.0):
    return lai_problem(rng, depth, loss, batch, p, k, dtype, scale)


def assert_same_choices(got, want, dtype, score_exact=False):
    np.testing.assert_array_equal(got[1], want[1])  # h
    np.testing.assert_array_equal(got[0], want[0])  # g
    assert got[0].dtype == np.int32 and got[2].dtype == np.dtype(dtype)
    if score_exact:
        np.testing.assert_array_equal(got[2], want[2])
    else:
        tol = 2e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got[2], want[2], rtol=tol, atol=tol)


def test_the_portable_target_is_registered():
    if BACKEND != "jax":
        pytest.skip("the CPU emulation is a JAX target")
    assert "KerasTreesLossAugmentedInference" in _library.PORTABLE_TARGETS
    assert "KerasTreesLossAugmentedInference" in _library.CUDA_TARGETS
    assert _library.custom_ops_available("loss_augmented"), _library.execution_report()["summary"]
    with _library.portable_bodies():
        assert _library.target("KerasTreesLossAugmentedInference") == "KerasTreesLossAugmentedInferencePortable"


# Depths 1..14: the exact search's top levels in shared memory (depth <= 8)
# and the subtrees below them (depth > 8); batches shrink with the depth so
# the sweep stays cheap (the reference's exact search is dense in 2**depth).
SWEEP = [(d, 9 if d <= 8 else (5 if d <= 11 else 2)) for d in range(1, 15)]


@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
@pytest.mark.parametrize("loss", ["log", "squared"])
def test_depth_sweep_matches_cpu_engine(engine, loss, fast):
    rng = np.random.default_rng(33)
    for depth, batch in SWEEP:
        for dtype in ("float32", "float64"):
            args = problem(rng, depth, loss, batch, dtype=dtype)
            got = run(engine, args, loss, fast)
            assert_same_choices(got, run("cpu", args, loss, fast), dtype)


# The keras.ops reference compiles for several seconds per shape: compared
# once per (loss, search) at a depth with subtrees below the shared-memory
# levels (the CPU engine equals the reference at other depths:
# tests/ops/test_loss_augmented.py).
@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
@pytest.mark.parametrize("loss", ["log", "squared"])
def test_matches_reference(engine, loss, fast):
    rng = np.random.default_rng(9)
    args = problem(rng, 10, loss, 41, p=4, dtype="float64")
    assert_same_choices(run(engine, args, loss, fast), run("reference", args, loss, fast), "float64")


@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
@pytest.mark.parametrize("loss", ["log", "squared"])
@pytest.mark.parametrize("batch", [0, 1, 37])
def test_batches_and_dtypes(engine, loss, fast, batch):
    rng = np.random.default_rng(batch)
    for dtype in ("float32", "float64"):
        for depth in (3, 9):
            args = problem(rng, depth, loss, batch, p=5, k=3, dtype=dtype)
            got = run(engine, args, loss, fast)
            assert got[0].shape == (batch,) and got[2].shape == (batch,)
            assert_same_choices(got, run("cpu", args, loss, fast), dtype)


@pytest.mark.parametrize("engine", engines())
def test_bitwise_deterministic(engine):
    rng = np.random.default_rng(7)
    for loss in ("log", "squared"):
        for fast in (True, False):
            args = problem(rng, 10, loss, 23, p=6, dtype="float32")
            first = run(engine, args, loss, fast)
            for _ in range(2):
                again = run(engine, args, loss, fast)
                for a, b in zip(first, again):
                    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("engine", engines())
def test_compiled_equals_eager(engine):
    rng = np.random.default_rng(8)
    args = problem(rng, 9, "log", 11, dtype="float32")
    eager = run(engine, args, "log", False)
    with precision("float32"), scope(engine):
        if BACKEND == "jax":
            import jax

            fn = jax.jit(lambda *a: loss_augmented_inference(*a, loss="log", fast=False))
        else:
            import tensorflow as tf

            fn = tf.function(lambda *a: loss_augmented_inference(*a, loss="log", fast=False))
        compiled = [np.asarray(t) for t in fn(*args)]
    for a, b in zip(eager, compiled):
        assert a.tobytes() == b.tobytes()


def _tie_problem(depth):
    """Every split value 0 (so h is leaf 0, the all-left path, and every margin
    is 0) and leaf losses that tie: the fast candidates are leaves 2**l, met
    from the largest; leaves 2 and 4 tie for the highest loss (the smaller
    index wins although the scan meets 4 first), leaf 0 (h) has the lowest."""
    num_leaves = 2**depth
    x = np.random.default_rng(0).normal(size=(6, 2))
    w = np.zeros((num_leaves - 1, 2))
    b = np.zeros(num_leaves - 1)
    theta = np.zeros((num_leaves, 2))
    theta[:, 0] = 1.0  # loss of label 1: lse - theta[1]
    theta[2] = theta[4] = [3.0, 0.0]  # the highest loss, tied
    theta[0] = [0.0, 3.0]  # h: the lowest loss
    y = np.ones(6, "int32")
    return x, w, b, theta, y


@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
def test_ties_pick_the_smallest_leaf_and_keep_h(engine, fast):
    for depth in (3, 10):
        args = _tie_problem(depth)
        got = run(engine, args, "log", fast)
        np.testing.assert_array_equal(got[1], 0)
        np.testing.assert_array_equal(got[0], 2)
        assert_same_choices(got, run("cpu", args, "log", fast), "float64")
        # identical leaves: every candidate ties with h, which stays
        x, w, b, theta, y = args
        flat = (x, w, b, np.tile([[1.0, 0.0]], (2**depth, 1)), y)
        got = run(engine, flat, "log", fast)
        np.testing.assert_array_equal(got[0], got[1])
        assert_same_choices(got, run("cpu", flat, "log", fast), "float64")


@pytest.mark.parametrize("engine", engines())
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "exact"])
def test_overflowing_split_values_fail_as_on_the_cpu_engine(engine, fast):
    """Finite inputs whose split values overflow to +-Inf on the searched
    paths fail with the CPU engine's and the reference's message, at depths
    with and without subtrees below the shared-memory levels."""
    rng = np.random.default_rng(3)
    for depth in (2, 9):
        internal = 2**depth - 1
        x = np.abs(rng.normal(size=(7, 2))) + 1.0
        w = rng.choice([-1e308, 1e308, 0.5], size=(internal, 2))
        w[0] = 1e308  # the root's value overflows for every sample
        b = rng.normal(size=internal)
        theta = rng.normal(size=(internal + 1, 3))
        y = rng.integers(0, 3, size=7).astype("int32")
        for where in ("cpu", "reference", engine):
            with pytest.raises(Exception, match="a split value on the path of a sample is not finite"):
                run(where, (x, w, b, theta, y), "log", fast)


@pytest.mark.parametrize("engine", engines())
def test_bad_values_give_the_cpu_engines_errors(engine):
    rng = np.random.default_rng(4)
    x, w, b, theta, y = problem(rng, 3, "log", 8)
    _, _, _, _, targets = problem(rng, 3, "squared", 8)
    bad_x = x.copy(); bad_x[2, 1] = np.nan
    bad_w = w.copy(); bad_w[1, 0] = np.inf
    bad_b = b.copy(); bad_b[3] = np.nan
    bad_theta = theta.copy(); bad_theta[5, 2] = -np.inf
    bad_y = y.copy(); bad_y[5] = 9; bad_y[6] = -1
    bad_t = targets.copy(); bad_t[4, 1] = np.nan
    cases = [((bad_x, w, b, theta, y), "log", "x contains NaN or Inf"),
             ((x, bad_w, b, theta, y), "log", "split_weights or split_bias contain NaN or Inf"),
             ((x, w, bad_b, theta, y), "log", "split_weights or split_bias contain NaN or Inf"),
             ((x, w, b, bad_theta, y), "log", "leaf_values contain NaN or Inf"),
             ((x, w, b, theta, bad_y), "log", r"labels must lie in \[0, 4\), got labels\[5\] = 9"),
             ((x, w, b, theta, bad_t), "squared", "targets contain NaN or Inf")]
    for args, loss, message in cases:
        for where in ("cpu", engine):
            with pytest.raises(Exception, match=message):
                run(where, args, loss, False)


def test_gpu_equals_its_cpu_emulation_bitwise():
    """On a GPU (JAX): the CUDA kernels' leaves and bounds equal, bit for bit,
    those of their CPU emulation (the same bodies on the CPU launcher), fast
    and exact, both losses and dtypes, at depths on both sides of the exact
    search's shared-memory levels."""
    if BACKEND != "jax" or not _has_gpu():
        pytest.skip("needs JAX on a GPU")
    rng = np.random.default_rng(11)
    for depth in (4, 12):
        for loss in ("log", "squared"):
            for dtype in ("float32", "float64"):
                args = problem(rng, depth, loss, 129, p=7, dtype=dtype)
                for fast in (True, False):
                    got = run("gpu", args, loss, fast)
                    want = run("portable", args, loss, fast)
                    for a, b in zip(got, want):
                        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (depth, loss, dtype, fast)
