"""Pruned probabilistic routing's GPU kernels, through their CPU
emulation on machines without a GPU: the "KerasTreesPruned...Portable" XLA FFI
targets (core/pruned_routing_bodies.h and _pipeline.h on the CPU launcher)
against the CPU engine (core/pruned_routing.cc), the keras.ops reference and
finite differences. On a GPU (the prepared check runs this file there) the
same tests run the CUDA handlers ("...Cuda", cuda/xla_pruned_routing.cu) on
the default device instead.

Kept sets: at threshold 0 the kept set of every (sample, tree) pair is
compared exactly (per leaf, via leaf statistics with one-hot weights); at
threshold > 0 too on these random inputs, where no mass lies within rounding
of the threshold (core/pruned_routing_bodies.h documents why the engines may
otherwise differ there), and the dropped-mass bound is checked on its own.
"""

import contextlib
import re

import numpy as np
import pytest

from tests._backend import BACKEND, precision

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="the pruned-routing GPU kernels are bound to JAX")

if BACKEND == "jax":
    import jax
    import jax.numpy as jnp

    from keras_trees import ops as tree_ops
    from keras_trees.ops import _library
    from keras_trees.ops import pruned_routing as pr
    from tests.ops.random_inputs import pruned_inputs

    ON_GPU = jax.default_backend() in ("gpu", "cuda")
else:  # pragma: no cover
    ON_GPU = False

TARGET = "cuda" if ON_GPU else "portable"
FORMS = ("oblique", "experts", "experts_raw")
SPLIT_NAMES = {"oblique": ["split_weights", "split_bias", "gamma"],
               "experts": ["split_weights", "split_bias", "gamma", "expert_weights", "rate0"],
               "experts_raw": ["split_weights", "split_bias", "expert_weights"]}


@pytest.fixture(autouse=True)
def _kernels():
    if not tree_ops.custom_ops_available("pruned_routing"):
        pytest.skip(f"custom ops not loaded: {tree_ops.load_error()}")


@contextlib.contextmanager
def engine(name):
    """"portable" (CPU emulation of the GPU kernels), "cuda" (the GPU's
    default device), "core" (the CPU engine) or "reference" (keras.ops)."""
    cpu = jax.devices("cpu")[0]
    if name == "cuda":
        yield
    elif name == "portable":
        with _library.portable_bodies(), jax.default_device(cpu):
            yield
    elif name == "core":
        with jax.default_device(cpu):
            yield
    else:
        with _library.reference_only(), jax.default_device(cpu):
            yield


def make(rng, form="oblique", batch=9, dim=3, trees=2, depth=4, units=2, dtype="float64", experts=2, p_split=0.75):
    return pruned_inputs(rng, form, batch, dim, trees, depth, units, dtype, experts, p_split)[0]


def route(args, threshold, **values):
    a = {**args, **values}
    return pr.pruned_route(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["is_split"], a["leaf_values"],
                           threshold, expert_weights=a.get("expert_weights"), rate0=a.get("rate0"),
                           annealed=a.get("annealed", True), with_statistics=True)


def statistics(args, weights, threshold):
    return pr.pruned_leaf_statistics(args["x"], args["split_weights"], args["split_bias"], args["gamma"],
                                     args["is_split"], weights, threshold, expert_weights=args.get("expert_weights"),
                                     rate0=args.get("rate0"), annealed=args.get("annealed", True))


def forward(name, args, threshold):
    with engine(name):
        return [np.asarray(v) for v in route(args, threshold)]


def gradients(name, args, threshold, names, probe):
    """d sum(output * probe) / d args[names], computed in the engine."""
    def loss(*free):
        return jnp.sum(route(args, threshold, **dict(zip(names, free)))[0] * probe)

    with engine(name):
        value, grads = jax.value_and_grad(loss, argnums=tuple(range(len(names))))(*[args[k] for k in names])
        return float(value), [np.asarray(g) for g in grads]


def kept_set(name, args, threshold):
    """(batch, trees, positions) booleans: the kept leaves of every pair (leaf
    statistics with one-hot weights over the samples: units = batch)."""
    batch, trees = args["x"].shape[0], args["is_split"].shape[0]
    onehot = np.broadcast_to(np.eye(batch)[:, None, :], (batch, trees, batch)).astype(args["x"].dtype)
    with engine(name):
        stats = np.asarray(statistics(args, onehot, threshold))  # (trees, positions, batch)
    return np.moveaxis(stats, -1, 0) != 0


def tol(dtype):
    return (2e-5, 2e-6) if dtype == "float32" else (1e-11, 1e-13)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", FORMS)
def test_forward_matches_the_cpu_engine_and_the_reference(rng, dtype, form):
    with precision(dtype):
        args = make(rng, form, batch=13, depth=5, dtype=dtype)
        rtol, atol = tol(dtype)
        for threshold in (0.0, pr.DEFAULT_PRUNE_THRESHOLD, 0.02):
            out = forward(TARGET, args, threshold)
            others = [forward("core", args, threshold)]
            if dtype == "float64" and threshold > 0:  # the reference is slow: a small case
                small = make(rng, form, batch=5, depth=3, dtype=dtype)
                out_small, ref_small = forward(TARGET, small, threshold), forward("reference", small, threshold)
                for a, b in zip(out_small, ref_small):
                    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
            assert out[0].dtype == np.dtype(dtype) and out[1].dtype == np.int32
            for other in others:
                np.testing.assert_allclose(out[0], other[0], rtol=rtol, atol=atol)
                np.testing.assert_array_equal(out[1], other[1])  # kept leaves
                np.testing.assert_array_equal(out[2], other[2])  # visited splits
                np.testing.assert_allclose(out[3], other[3], rtol=rtol, atol=atol)
            np.testing.assert_array_equal(kept_set(TARGET, args, threshold), kept_set("core", args, threshold))
            if threshold == 0:
                assert (out[3] == 0).all()
            else:
                assert threshold < 0.01 or (out[3] > 0).any()  # something was pruned
                subtrees = out[2] + 1 - out[1]
                assert (out[3] <= threshold * subtrees * (1 + 1e-6)).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", FORMS)
def test_gradients_match_the_cpu_engine_and_the_reference(rng, dtype, form):
    with precision(dtype):
        args = make(rng, form, batch=11, depth=4, dtype=dtype)
        names = ["x", *SPLIT_NAMES[form], "leaf_values"]
        probe = rng.normal(size=(11, 2, 2)).astype(dtype)
        rtol, atol = (2e-4, 1e-5) if dtype == "float32" else (1e-9, 1e-12)
        for threshold in (0.0, 0.03):
            value, grads = gradients(TARGET, args, threshold, names, probe)
            for other in ["core"]:
                v2, g2 = gradients(other, args, threshold, names, probe)
                np.testing.assert_allclose(value, v2, rtol=rtol)
                for name, a, b in zip(names, grads, g2):
                    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{other} {name} {threshold}")
            for name, g in zip(names, grads):
                if name in ("x", "split_weights", "leaf_values"):
                    assert np.abs(g).max() > 0, name
        if dtype == "float64":  # the keras.ops reference (eager autodiff is slow: a small case)
            small = make(rng, form, batch=5, depth=3, dtype=dtype)
            cot = rng.normal(size=(5, 2, 2))
            value, grads = gradients(TARGET, small, 0.03, names, cot)
            v2, g2 = gradients("reference", small, 0.03, names, cot)
            np.testing.assert_allclose(value, v2, rtol=rtol)
            for name, a, b in zip(names, grads, g2):
                np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"reference {name}")


@pytest.mark.parametrize("form", FORMS)
def test_gradients_match_finite_differences(rng, form):
    with precision("float64"):
        args = make(rng, form, batch=4, depth=3)
        names = ["x", *SPLIT_NAMES[form], "leaf_values"]
        probe = rng.normal(size=(4, 2, 2))
        threshold = 0.02
        _, grads = gradients(TARGET, args, threshold, names, probe)
        eps = 1e-6
        with engine(TARGET):
            for name, g in zip(names, grads):
                flat = np.asarray(args[name], np.float64).ravel()
                for i in rng.choice(flat.size, size=min(4, flat.size), replace=False):
                    vals = []
                    for sign in (1, -1):
                        moved = flat.copy()
                        moved[i] += sign * eps
                        out = route(args, threshold, **{name: moved.reshape(args[name].shape)})[0]
                        vals.append(float(np.sum(np.asarray(out) * probe)))
                    numeric = (vals[0] - vals[1]) / (2 * eps)
                    analytic = g.ravel()[i]
                    assert abs(analytic - numeric) <= 1e-6 + 1e-5 * abs(numeric), (form, name, i, analytic, numeric)


def test_weight_gradients_without_the_input_gradient(rng):
    # x is data: the kernel skips dL/dx (x_grad false); the rest is unchanged.
    with precision("float64"):
        args = make(rng, "oblique", batch=10, depth=4)
        probe = rng.normal(size=(10, 2, 2))
        with_x = gradients(TARGET, args, 0.01, ["x", "split_weights"], probe)[1][1]
        without_x = gradients(TARGET, args, 0.01, ["split_weights"], probe)[1][0]
        core = gradients("core", args, 0.01, ["split_weights"], probe)[1][0]
        np.testing.assert_array_equal(with_x, without_x)
        np.testing.assert_allclose(without_x, core, rtol=1e-9, atol=1e-12)


@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("form", ["oblique", "experts"])
def test_depth_sweep(rng, form):
    """Depths 1 to 10 (balanced-ish random trees), forward and gradients."""
    with precision("float64"):
        names = ["x", *SPLIT_NAMES[form], "leaf_values"]
        for depth in range(1, 11):
            args = make(rng, form, batch=5, depth=depth, p_split=0.9)
            probe = rng.normal(size=(5, 2, 2))
            out, core = forward(TARGET, args, 1e-3), forward("core", args, 1e-3)
            np.testing.assert_allclose(out[0], core[0], rtol=1e-11, atol=1e-13, err_msg=f"depth {depth}")
            np.testing.assert_array_equal(out[1], core[1])
            np.testing.assert_array_equal(out[2], core[2])
            _, g = gradients(TARGET, args, 1e-3, names, probe)
            _, gc = gradients("core", args, 1e-3, names, probe)
            for name, a, b in zip(names, g, gc):
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=f"depth {depth} {name}")


def em_args(rng, batch, dtype="float64", depth=4, classes=3):
    args = make(rng, "oblique", batch=batch, depth=depth, units=classes, dtype=dtype)
    v = rng.uniform(0.01, 1.0, size=args["leaf_values"].shape)
    args["leaf_values"] = (v / v.sum(-1, keepdims=True)).astype(dtype)
    labels = rng.integers(0, classes, batch).astype("int32")
    return args, labels, rng.uniform(0, 2, batch).astype(dtype)


def em(name, args, labels, weights, threshold):
    with engine(name):
        return np.asarray(pr.pruned_em_statistics(args["x"], args["split_weights"], args["split_bias"], args["gamma"],
                                                  args["is_split"], args["leaf_values"], labels, weights, threshold))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_leaf_statistics_and_em_match_the_cpu_engine(rng, dtype):
    with precision(dtype):
        rtol, atol = (2e-5, 2e-6) if dtype == "float32" else (1e-11, 1e-13)
        for form in FORMS:
            args = make(rng, form, batch=17, depth=5, dtype=dtype)
            weights = rng.normal(size=(17, 2, 3)).astype(dtype)
            for threshold in (0.0, 0.02):
                got = []
                for name in (TARGET, "core"):  # the CPU engine's own tests compare it with the reference
                    with engine(name):
                        got.append(np.asarray(statistics(args, weights, threshold)))
                for other in got[1:]:
                    np.testing.assert_allclose(got[0], other, rtol=rtol, atol=atol)
        args, labels, w = em_args(rng, 31, dtype)
        for threshold in (0.0, 0.01):
            for weights in (None, w):
                counts = em(TARGET, args, labels, weights, threshold)
                assert counts.dtype == np.dtype(dtype) and counts.shape == (2, 31, 3)
                np.testing.assert_allclose(counts, em("core", args, labels, weights, threshold), rtol=rtol * 10,
                                           atol=atol)
                total = 31 if weights is None else float(np.sum(w, dtype=np.float64))
                np.testing.assert_allclose(counts.sum(), total, rtol=rtol * 10)


@pytest.mark.parametrize("batch", [0, 1, 7])
def test_batch_edges(rng, batch):
    with precision("float64"):
        args = make(rng, "experts", batch=batch, depth=3)
        out, core = forward(TARGET, args, 0.01), forward("core", args, 0.01)
        assert out[0].shape == (batch, 2, 2)
        for a, b in zip(out, core):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
        names = ["x", *SPLIT_NAMES["experts"], "leaf_values"]
        probe = rng.normal(size=(batch, 2, 2))
        _, g = gradients(TARGET, args, 0.01, names, probe)
        _, gc = gradients("core", args, 0.01, names, probe)
        for name, a, b in zip(names, g, gc):
            assert a.shape == np.shape(args[name])
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)
        e_args, labels, w = em_args(rng, batch)
        np.testing.assert_allclose(em(TARGET, e_args, labels, w, 0.01), em("core", e_args, labels, w, 0.01),
                                   rtol=1e-10, atol=1e-13)


def test_several_chunks_and_root_leaves(rng):
    """Depth 13 with 2 trees: the backward pass, leaf statistics and the E-step
    go in several sample chunks (64 MiB of coefficients each); a tree that is a
    single leaf."""
    with precision("float64"):
        args = make(rng, "oblique", batch=300, dim=2, depth=13, units=1, p_split=0.97)
        args["is_split"][1] = False  # tree 1 is one leaf
        out, core = forward(TARGET, args, 1e-3), forward("core", args, 1e-3)
        np.testing.assert_allclose(out[0], core[0], rtol=1e-11, atol=1e-13)
        np.testing.assert_array_equal(out[1], core[1])
        names = ["x", "split_weights", "gamma", "leaf_values"]
        probe = rng.normal(size=(300, 2, 1))
        _, g = gradients(TARGET, args, 1e-3, names, probe)
        _, gc = gradients("core", args, 1e-3, names, probe)
        for name, a, b in zip(names, g, gc):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)
        e_args, labels, w = em_args(rng, 600, depth=13, classes=2)
        np.testing.assert_allclose(em(TARGET, e_args, labels, w, 1e-3), em("core", e_args, labels, w, 1e-3),
                                   rtol=1e-10, atol=1e-13)


def test_bitwise_deterministic_across_runs(rng):
    with precision("float32"):
        args = make(rng, "experts", batch=40, depth=6, dtype="float32")
        names = ["x", *SPLIT_NAMES["experts"], "leaf_values"]
        probe = rng.normal(size=(40, 2, 2)).astype("float32")
        e_args, labels, w = em_args(rng, 40, "float32")
        runs = []
        for _ in range(2):
            runs.append([*forward(TARGET, args, 1e-3), *gradients(TARGET, args, 1e-3, names, probe)[1],
                         em(TARGET, e_args, labels, w, 1e-3)])
        for a, b in zip(*runs):
            assert a.tobytes() == b.tobytes()


def test_bad_inputs_raise_the_cpu_engine_messages(rng):
    args = make(rng, "experts", batch=5, depth=3, dtype="float32")
    e_args, labels, w = em_args(rng, 5, "float32")

    def message(name, fn):
        with engine(name), pytest.raises(Exception) as info:
            jax.block_until_ready(fn())
        # XLA appends the executable's name on some paths (" [executable_name='jit_ffi_call']" on a GPU):
        # the message is what must match.
        return re.sub(r" \[executable_name='[^']*'\]$", "", str(info.value))

    nan_x = {**args, "x": np.where(np.arange(15).reshape(5, 3) == 7, np.nan, args["x"]).astype("float32")}
    negative = {**args, "expert_weights": -args["expert_weights"]}
    bad_labels = labels.copy()
    bad_labels[3] = 9
    bad_w = w.copy()
    bad_w[2] = -1.0
    cases = {
        "x": lambda: route(nan_x, 0.01)[0],
        "expert_weights": lambda: route(negative, 0.01)[0],
        "labels": lambda: pr.pruned_em_statistics(e_args["x"], e_args["split_weights"], e_args["split_bias"],
                                                  e_args["gamma"], e_args["is_split"], e_args["leaf_values"],
                                                  bad_labels, w, 0.01),
        "sample_weight": lambda: pr.pruned_em_statistics(e_args["x"], e_args["split_weights"], e_args["split_bias"],
                                                         e_args["gamma"], e_args["is_split"], e_args["leaf_values"],
                                                         labels, bad_w, 0.01),
    }
    for case, fn in cases.items():
        target, core = message(TARGET, fn), message("core", fn)
        assert target == core, (case, target, core)
        assert case in target or "x contains" in target, (case, target)
