"""Bad inputs to the public ops are rejected on every path.

One table of (op, bad input, expected message) run over every path the
active backend has: the compiled kernels and the ``keras.ops`` reference
(``reference_only()``, the path of PyTorch, of ``export_portable`` and of
``KERAS_TREES_DISABLE_CUSTOM_OPS=1``), each eagerly and compiled
(``tf.function`` / ``jax.jit``). Eager calls raise ``ValueError`` /
``TypeError``; compiled graphs may carry the same message in the backend's
runtime error (values are only known when the graph runs). A second table
checks that every op and its reference agree on valid inputs, batch 0 and 1
included, and reject the same bad ones. CI runs this file under TensorFlow,
JAX and PyTorch.
"""

import contextlib

import keras
import numpy as np
import pytest

from keras_trees import ops as tree_ops
from keras_trees.ops import _library

from tests._backend import BACKEND, runtime_errors
NAN = float("nan")


def _paths():
    paths = []
    kernels = BACKEND in ("tensorflow", "jax") and _library.custom_ops_available()
    for path in (["kernels"] if kernels else []) + ["reference"]:
        for mode in ("eager", "graph") if BACKEND in ("tensorflow", "jax") else ("eager",):
            paths.append((path, mode))
    return paths


PATHS = _paths()
# The traced paths of the two largest matrices run in the full suite only (the
# fast tier keeps their eager paths, and the traced path of the other tests).
TIERED_PATHS = [pytest.param(p, m, id=f"{p}-{m}", marks=[pytest.mark.slow] if m == "graph" else [])
                for p, m in PATHS]


def _numpy(out):
    if isinstance(out, (list, tuple)):
        return [_numpy(o) for o in out]
    return keras.ops.convert_to_numpy(out)


def _traceable(a):
    """Whether a NumPy argument can be a traced input (else it is closed over)."""
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
        return False
    return not (BACKEND == "jax" and a.dtype.itemsize == 8)  # JAX without x64 would wrap int64/float64


def _closed_key(a):
    """A hashable identity of an argument closed over by the compiled function."""
    if isinstance(a, np.ndarray):
        return ("array", a.dtype.str, a.shape, a.tobytes())
    return (type(a).__name__, repr(a))


# (function, path, traced positions, closed-over arguments) -> its tf.function / jax.jit.
# One compiled function serves every case whose closed-over arguments are the
# same: the traced inputs are placeholders, so a bad value reaches the same
# runtime checks as in a fresh trace, and new dtypes or shapes retrace.
_COMPILED = {}


def run(fn, args, kwargs, path, mode):
    """``fn(*args, **kwargs)`` on a path, results as NumPy."""
    with _library.reference_only(path == "reference"):
        if mode == "eager":
            return _numpy(fn(*args, **kwargs))
        traced = [i for i, a in enumerate(args) if _traceable(a)]
        closed = tuple((i, _closed_key(a)) for i, a in enumerate(args) if i not in traced)
        key = (fn, path, tuple(traced), closed, repr(sorted(kwargs.items())))
        compiled = _COMPILED.get(key)
        if compiled is None:
            fixed = list(args)

            def call(*inputs):
                full = list(fixed)
                for i, t in zip(traced, inputs):
                    full[i] = t
                return fn(*full, **kwargs)

            if BACKEND == "tensorflow":
                import tensorflow as tf

                compiled = tf.function(call)
            else:
                import jax

                compiled = jax.jit(call)
            _COMPILED[key] = compiled
        if BACKEND == "tensorflow":
            import tensorflow as tf

            return _numpy(compiled(*[tf.constant(args[i]) for i in traced]))
        return _numpy(compiled(*[args[i] for i in traced]))


@contextlib.contextmanager
def rejected(mode, error, message):
    errors = (error,) if mode == "eager" else (error, ValueError, TypeError) + runtime_errors()
    with pytest.raises(errors, match=message):
        yield


# ---------------------------------------------------------------- valid arguments of every op


def _rng():
    return np.random.default_rng(16)


def f32(*shape):
    return _rng().normal(size=shape).astype("float32")


STATE = np.array([[2, 1, 1, 0, 0, 0, 0], [2, 2, 1, 1, 1, 0, 0]], "int32")  # depth 2, two trees
IS_SPLIT = STATE[:, :3] == 2


def ensemble(batch=4):
    return [f32(batch, 3), f32(2, 3, 3), f32(2, 3), f32(2, 4, 2), 1.0]


def hinge(batch=4):
    return [f32(batch, 5), f32(2, 3), np.array([[0, 4, 2], [1, 3, 0]], "int32"), f32(2, 4, 2)]


def routing(batch=4):
    return [f32(batch, 3), f32(2, 3, 3), f32(2, 3), IS_SPLIT.copy()]


def experts(batch=4):
    return [f32(batch, 3), f32(2, 3, 2, 3), f32(2, 3, 2), IS_SPLIT.copy(),
            np.abs(f32(2, 3, 2)), np.abs(f32(2, 3))]


def lai(batch=4):
    return [f32(batch, 3), f32(3, 3), f32(3), f32(4, 2), np.arange(batch, dtype="int32") % 2]


def pruned(batch=4):
    return [f32(batch, 3), f32(2, 3, 3), f32(2, 3), np.full((2, 3), 2.0, "float32"), IS_SPLIT.copy(), f32(2, 7, 2)]


def em(batch=4):
    values = np.abs(f32(2, 7, 3)) + 0.1
    return [f32(batch, 3), f32(2, 3, 3), f32(2, 3), np.full((2, 3), 2.0, "float32"), IS_SPLIT.copy(), values,
            np.arange(batch, dtype="int32") % 3, np.ones(batch, "float32")]


def paths(batch=4):
    return [f32(batch, 3), f32(2, 3, 3), f32(2, 3), np.full((2, 3), 2.0, "float32"), STATE.copy()]


def frontier_args(batch=4):
    return paths(batch) + [np.ones((2, 3), bool)]


def hard_route_experts(x, w, b, s, r, c):
    return tree_ops.hard_route(x, w, b, s, expert_weights=r, threshold=c)


def surrogate(x, w, b, theta, y, g):
    return tree_ops.surrogate(x, w, b, theta, y, g)


def surrogate_args(batch=4):
    return lai(batch) + [np.zeros(batch, "int32")]


def em_statistics(x, w, b, g, s, v, y, sw):
    return tree_ops.pruned_em_statistics(x, w, b, g, s, v, y, sw, prune_threshold=0.0)


# op name -> (function, argument builder, names of the arguments)
OPS = {
    "soft_tree_ensemble": (tree_ops.soft_tree_ensemble, ensemble, ("x", "node_weights", "node_bias", "leaf_weights", "gamma")),
    "soft_tree_ensemble_reference": (tree_ops.soft_tree_ensemble_reference, ensemble, ("x", "node_weights", "node_bias", "leaf_weights", "gamma")),
    "mean_reachable_leaves": (tree_ops.mean_reachable_leaves, lambda b=4: ensemble(b)[:3] + [1.0], ("x", "node_weights", "node_bias", "gamma")),
    "hinge_forest": (tree_ops.hinge_forest, hinge, ("x", "thresholds", "feature_indices", "leaf_weights")),
    "hinge_forest_reference": (tree_ops.hinge_forest_reference, hinge, ("x", "thresholds", "feature_indices", "leaf_weights")),
    "hinge_forest_traversal": (tree_ops.hinge_forest_traversal, lambda b=4: hinge(b)[:3], ("x", "thresholds", "feature_indices")),
    "hard_route": (tree_ops.hard_route, routing, ("x", "split_weights", "split_bias", "is_split")),
    "hard_route_reference": (tree_ops.hard_route_reference, routing, ("x", "split_weights", "split_bias", "is_split")),
    "hard_route_experts": (hard_route_experts, experts, ("x", "split_weights", "split_bias", "is_split", "expert_weights", "threshold")),
    "loss_augmented_inference": (tree_ops.loss_augmented_inference, lai, ("x", "split_weights", "split_bias", "leaf_values", "labels")),
    "loss_augmented_inference_reference": (tree_ops.loss_augmented_inference_reference, lai, ("x", "split_weights", "split_bias", "leaf_values", "labels")),
    "surrogate": (surrogate, surrogate_args, ("x", "split_weights", "split_bias", "leaf_values", "labels", "g_leaf")),
    "pruned_route": (tree_ops.pruned_route, pruned, ("x", "split_weights", "split_bias", "gamma", "is_split", "leaf_values")),
    "pruned_route_reference": (tree_ops.pruned_route_reference, pruned, ("x", "split_weights", "split_bias", "gamma", "is_split", "leaf_values")),
    "pruned_em_statistics": (em_statistics, em, ("x", "split_weights", "split_bias", "gamma", "is_split", "leaf_values", "labels", "sample_weight")),
    "soft_leaf_log_probabilities": (tree_ops.soft_leaf_log_probabilities, paths, ("x", "split_weights", "split_bias", "gamma", "node_state")),
    "heap_leaf_probabilities": (tree_ops.heap_leaf_probabilities, paths, ("x", "split_weights", "split_bias", "gamma", "node_state")),
    "frontier": (tree_ops.frontier, frontier_args, ("x", "split_weights", "split_bias", "gamma", "node_state", "candidate")),
}


def skip_unjittable(op, mode):
    """``soft_leaf_log_probabilities`` gathers the present leaves: its output
    shape depends on ``node_state``'s values, which ``jax.jit`` cannot trace."""
    if BACKEND == "jax" and mode == "graph" and op == "soft_leaf_log_probabilities":
        pytest.skip("data-dependent output shape: not traceable by jax.jit")


def _set(name, fn):
    """A change of argument ``name``: ``fn(value) -> bad value``."""
    return name, fn


def _nan_at(a):
    a = np.array(a, copy=True)
    a.reshape(-1)[0] = NAN
    return a


def _inf_at(a):
    a = np.array(a, copy=True)
    a.reshape(-1)[-1] = np.inf
    return a


def _first(value):
    def change(a):
        a = np.array(a, copy=True)
        a.reshape(-1)[0] = value
        return a

    return change


def _last_level_split(state):
    state = np.array(state, copy=True)
    state[1, 3] = 2  # a split at depth 2 of a depth-2 tree
    return state


_STRINGS = lambda a: np.full(np.shape(a), "1.0")  # noqa: E731
_COMPLEX = lambda a: np.asarray(a).astype("complex64")  # noqa: E731

# (op, change, error, message)
CASES = []
_X_CASES = [
    (_set("x", _nan_at), ValueError, "x contains NaN or Inf"),
    (_set("x", _inf_at), ValueError, "x contains NaN or Inf"),
    (_set("x", _STRINGS), TypeError, "x must be"),
    (_set("x", _COMPLEX), TypeError, "x must be real"),
]
for _op in OPS:
    CASES += [(_op, *case) for case in _X_CASES]

_PARAMETERS = {
    "soft_tree_ensemble": ["node_weights", "node_bias", "leaf_weights"],
    "soft_tree_ensemble_reference": ["node_weights", "node_bias", "leaf_weights"],
    "mean_reachable_leaves": ["node_weights", "node_bias"],
    "hinge_forest": ["leaf_weights"],
    "hinge_forest_reference": ["leaf_weights"],
    "hard_route": ["split_weights", "split_bias"],
    "hard_route_reference": ["split_weights", "split_bias"],
    "hard_route_experts": ["split_weights", "split_bias", "threshold"],
    "loss_augmented_inference": ["split_weights", "split_bias", "leaf_values"],
    "loss_augmented_inference_reference": ["split_weights", "split_bias", "leaf_values"],
    "surrogate": ["split_weights", "leaf_values"],
    "pruned_route": ["split_weights", "split_bias", "gamma", "leaf_values"],
    "pruned_route_reference": ["split_weights", "split_bias", "gamma", "leaf_values"],
    "pruned_em_statistics": ["split_weights", "split_bias", "gamma"],
    "soft_leaf_log_probabilities": ["split_weights", "split_bias", "gamma"],
    "heap_leaf_probabilities": ["split_weights", "split_bias", "gamma"],
    "frontier": ["split_weights", "split_bias", "gamma"],
}
for _op, _names in _PARAMETERS.items():
    for _name in _names:
        # The kernels' messages say "contain"/"contains" (loss-augmented: "split_weights or split_bias").
        CASES.append((_op, _set(_name, _nan_at), ValueError, rf"{_name}( or \w+)? contains? NaN or Inf"))
for _op in ("hinge_forest", "hinge_forest_reference", "hinge_forest_traversal"):
    CASES += [
        (_op, _set("thresholds", _nan_at), ValueError, "thresholds contains? NaN or Inf"),
        (_op, _set("feature_indices", _first(-1)), ValueError, "feature_indices.*out of range"),
        (_op, _set("feature_indices", lambda a: np.asarray(a, "int64") + np.int64(2**32)), ValueError,
         "feature_indices.*out of range"),
        (_op, _set("feature_indices", lambda a: np.asarray(a, "float32") + 0.5), ValueError,
         "feature_indices must hold integer ids"),
    ]
for _op in ("soft_tree_ensemble", "soft_tree_ensemble_reference", "mean_reachable_leaves"):
    CASES += [
        (_op, _set("gamma", lambda g: 0.0), ValueError, "gamma must be a finite number > 0"),
        (_op, _set("gamma", lambda g: np.float32(0.0).reshape(())), ValueError, "gamma must be a finite number > 0"),
        (_op, _set("gamma", lambda g: np.array(NAN, "float32")), ValueError, "gamma must be a finite number > 0"),
        (_op, _set("gamma", lambda g: None), TypeError, "gamma must be a finite number > 0, got None"),
    ]
for _op in ("hard_route", "hard_route_reference", "pruned_route", "pruned_route_reference"):
    CASES.append((_op, _set("is_split", lambda s: s.astype("int32") * 7), ValueError, "is_split must hold booleans"))
CASES.append(("hard_route_experts", _set("expert_weights", lambda r: -r), ValueError, "expert_weights must be"))
for _op in ("loss_augmented_inference", "loss_augmented_inference_reference", "surrogate", "pruned_em_statistics"):
    CASES += [
        (_op, _set("labels", _first(5)), ValueError, "labels must lie in"),
        (_op, _set("labels", _first(-1)), ValueError, "labels must lie in"),
        (_op, _set("labels", lambda y: np.asarray(y, "int64") + np.int64(2**32)), ValueError, "labels must lie in"),
        (_op, _set("labels", lambda y: np.asarray(y, "float32") + 0.5), ValueError, "labels must hold integer ids"),
    ]
CASES.append(("surrogate", _set("g_leaf", _first(4)), ValueError, "g_leaf must lie in"))
CASES += [
    ("pruned_em_statistics", _set("leaf_values", lambda v: -v), ValueError, "leaf_values must be finite and >= 0"),
    ("pruned_em_statistics", _set("sample_weight", _first(-1.0)), ValueError, r"sample_weight.* must be finite and >= 0"),
]
for _op in ("soft_leaf_log_probabilities", "heap_leaf_probabilities", "frontier"):
    CASES += [
        (_op, _set("node_state", _first(7)), ValueError, "node_state is not a valid topology"),
        (_op, _set("node_state", _first(-1)), ValueError, "node_state is not a valid topology"),
        (_op, _set("node_state", _last_level_split), ValueError, "node_state is not a valid topology"),
        (_op, _set("gamma", lambda g: None), TypeError, "gamma"),
    ]
CASES.append(("frontier", _set("candidate", lambda c: c.astype("int32") * 3), ValueError, "candidate must hold booleans"))


def _case_id(case):
    op, (name, change), error, _ = case
    return f"{op}-{name}-{CASES.index(case)}"


@pytest.mark.parametrize("path,mode", TIERED_PATHS)
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_is_rejected_naming_the_argument(case, path, mode):
    op, (name, change), error, message = case
    skip_unjittable(op, mode)
    fn, build, names = OPS[op]
    args = build()
    i = names.index(name)
    args[i] = change(args[i])
    with rejected(mode, error, message):
        run(fn, args, {}, path, mode)


# ---------------------------------------------------------------- features: dtypes and static shapes


@pytest.mark.parametrize("path,mode", TIERED_PATHS)
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("kind", ["int32", "int64", "bool"])
def test_integer_and_boolean_x_give_floating_outputs(op, kind, path, mode):
    """Integer and boolean features are cast to floatx: the float math never
    comes back as int or bool, and equals the call on the floated features."""
    skip_unjittable(op, mode)
    fn, build, _ = OPS[op]
    args = build()
    x = (args[0] > 0) if kind == "bool" else np.round(args[0] * 3)
    args[0] = x.astype(kind)
    out = run(fn, args, {}, path, mode)
    args[0] = x.astype("float32")
    want = run(fn, args, {}, path, mode)
    for a, b in zip(out if isinstance(out, list) else [out], want if isinstance(want, list) else [want]):
        if b.dtype.kind == "f":
            assert a.dtype == b.dtype, (a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="unknown static shapes are a tf.function signature")
@pytest.mark.parametrize("path", [p for p, m in PATHS if m == "graph"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("shape,message", [(None, "x must have rank 2"),
                                           ([None, None], "x must have a known last dimension")])
def test_unknown_rank_or_feature_dimension_when_traced(op, shape, message, path):
    import tensorflow as tf

    fn, build, _ = OPS[op]
    args = build()
    spec = tf.TensorSpec(shape, tf.float32)
    traced = tf.function(lambda x: fn(x, *args[1:]), input_signature=[spec])
    with _library.reference_only(path == "reference"), pytest.raises(ValueError, match=message):
        traced.get_concrete_function()


# ---------------------------------------------------------------- op and reference agree


# op -> its reference, on the same arguments.
PAIRS = {
    "soft_tree_ensemble": "soft_tree_ensemble_reference",
    "hinge_forest": "hinge_forest_reference",
    "hard_route": "hard_route_reference",
    "loss_augmented_inference": "loss_augmented_inference_reference",
    "pruned_route": "pruned_route_reference",
}


@pytest.mark.parametrize("mode", sorted({m for _, m in PATHS}))
@pytest.mark.parametrize("batch", [0, 1, 5])
@pytest.mark.parametrize("op", sorted(PAIRS) + ["mean_reachable_leaves", "pruned_em_statistics"])
def test_op_matches_reference_on_valid_inputs(op, batch, mode):
    """The compiled op (where it runs) and the keras.ops reference give the
    same result on valid inputs, batch 0 and 1 included (no raise)."""
    fn, build, _ = OPS[op]
    args = build(batch)
    ref_fn = OPS[PAIRS[op]][0] if op in PAIRS else fn
    path = PATHS[0][0]
    out = run(fn, args, {}, path, mode)
    ref = run(ref_fn, args, {}, "reference", mode)
    for a, b in zip(out if isinstance(out, list) else [out], ref if isinstance(ref, list) else [ref]):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_mean_reachable_leaves_of_an_empty_batch_is_zero():
    for path, mode in PATHS:
        out = run(tree_ops.mean_reachable_leaves, OPS["mean_reachable_leaves"][1](0), {}, path, mode)
        assert float(out) == 0.0, (path, mode)


@pytest.mark.parametrize("path,mode", PATHS, ids=[f"{p}-{m}" for p, m in PATHS])
def test_hard_route_takes_x_dtype_on_both_paths(path, mode):
    """float64 x with float32 split parameters: both paths compute in x's dtype."""
    if BACKEND == "jax":
        import jax

        context = jax.enable_x64(True)
    else:
        context = contextlib.nullcontext()
    with context:
        x, w, b, s = routing(6)
        x = x.astype("float64")
        node, values = run(tree_ops.hard_route, [x, w, b, s], {}, path, mode)
        want_node, want_values = run(tree_ops.hard_route, [x, w.astype("float64"), b.astype("float64"), s], {},
                                     path, mode)
    np.testing.assert_array_equal(node, want_node)
    assert values.dtype == np.float64
    np.testing.assert_allclose(values, want_values, rtol=1e-12)
