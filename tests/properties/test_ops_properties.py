"""Properties of every public op (``keras_trees.ops.__all__``).

Valid inputs (random shapes, batch 0 and 1, depths 1-12 where the op's cost
allows, float32/float64, integer ``x``): the compiled op, the op under
``reference_only()`` and its ``*_reference`` give the same result, eagerly
and compiled (``tf.function`` / ``jax.jit``) (contract items 1 and 7).

Invalid inputs (wrong shapes, strings, complex numbers, NaN/Inf in ``x`` and
in the parameters, out-of-range or wrapping indices and labels, broken
topologies, bad scalars): every path rejects them with a ``ValueError`` or
``TypeError`` whose message names the argument; inside a compiled function the
backend's runtime error carrying the message is accepted (contract items 2-5, 8).

Each example reports every path that breaks the property, not only the first.
This file runs under TensorFlow (CI) and JAX (``KERAS_BACKEND=jax``: the XLA
FFI handlers against the reference; string inputs are only checked eagerly
there, since ``jax.jit`` cannot take strings).
"""

import contextlib
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_trees import ops as tree_ops
from keras_trees import topology
from tests.properties import strategies as S

pytestmark = pytest.mark.skipif(S.BACKEND not in ("tensorflow", "jax"),
                                reason=f"no compiled kernels on {S.BACKEND}")

# Fixed (derandomized) examples per op: the first is hypothesis's simplest
# case (one tree of depth 1, float32), the others random shapes, depths and
# dtypes. Each example traces or jit-compiles every path for its new shapes.
# The invalid inputs are drawn twice on TensorFlow and once on the other
# backends: the same derandomized first draw there, where each example
# costs a jit compile of every path (about a second).
VALID_EXAMPLES = 3
INVALID_EXAMPLES = 2 if S.BACKEND == "tensorflow" else 1


# ---------------------------------------------------------------- cases and paths


@dataclass
class Case:
    """One call: ``arrays`` are passed as tensors (arguments of the compiled
    function in graph mode), ``static`` as Python values."""

    arrays: dict
    static: dict = field(default_factory=dict)
    dtype: str = "float32"  # the parameters' dtype (tolerances)

    def replace(self, **arrays):
        return Case({**self.arrays, **arrays}, dict(self.static), self.dtype)

    def restatic(self, **static):
        return Case(dict(self.arrays), {**self.static, **static}, self.dtype)


@dataclass
class Spec:
    name: str
    build: callable  # (draw, rng, nonempty) -> Case
    op: callable  # (arrays, static) -> outputs
    references: dict  # label -> (arrays, static) -> outputs (besides the op under reference_only())
    corruptions: dict  # label -> (case, rng) -> (bad case, argument names, extra substring) or None
    post: callable = None  # outputs -> comparable outputs (applied to every path)
    kernels: bool = True  # False: keras.ops only (the op is its own reference path)
    unread: dict = field(default_factory=dict)  # reference label -> arguments it does not take
    jax_jit: bool = True  # False: output shapes depend on values, so jax.jit cannot trace the op


def paths(spec):
    """label -> (function, reference_only?, also compiled?) of every path of
    ``spec``: the public op on the kernels and on the reference path, eager and
    compiled; its ``*_reference`` functions eagerly (inside a compiled function
    they are the op under ``reference_only()``)."""
    out = {"op": (spec.op, False, spec.jax_jit or S.BACKEND != "jax")}
    if spec.kernels:
        out["op under reference_only()"] = (spec.op, True, True)
    for label, fn in spec.references.items():
        out[label] = (fn, True, False)
    return out


# (function, path, argument names, static arguments, precision) -> its compiled
# function. The examples are derandomized, so the corruptions of one op start
# from the same drawn cases: a corruption that changes values only (NaN, bad
# indices, broken topologies) runs in the function traced for the sound case
# (the traced arrays are placeholders, so the runtime checks see the bad
# values as in a fresh trace); new dtypes or shapes retrace.
_COMPILED = {}


def compiled(fn, reference, keys, static, wide):
    key = (fn, reference, tuple(keys), tuple((k, type(v).__name__, repr(v)) for k, v in sorted(static.items())), wide)
    if key not in _COMPILED:
        _COMPILED[key] = S.compiled(lambda *vs: fn(dict(zip(keys, vs)), dict(static)))
    return _COMPILED[key]


def run(fn, reference, case, graph):
    keys = list(case.arrays)
    values = [case.arrays[k] for k in keys]
    context = tree_ops.reference_only() if reference else contextlib.nullcontext()
    wide = any("64" in str(getattr(v, "dtype", "")) for v in values)
    with S.precision("float64" if wide else "float32"), context:
        if graph:
            result = compiled(fn, reference, keys, case.static, wide)(*values)
        else:
            result = fn(dict(case.arrays), case.static)
        return S.to_numpy(result)


def modes(graphs=True):
    return [False, True] if graphs else [False]


def check_valid(spec, case, what=""):
    """Every path, eager and compiled, gives the result of the compiled op (eager)."""
    post = spec.post or (lambda out, case: out)
    try:
        expected = post(run(spec.op, False, case, graph=False), case)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{what}the op rejects a valid input: {type(exc).__name__}: {str(exc)[:400]}") from exc
    failures = []
    for label, (fn, reference, graphs) in paths(spec).items():
        for graph in modes(graphs):
            name = f"{label}{' compiled' if graph else ''}"
            try:
                got = post(run(fn, reference, case, graph), case)
                S.assert_same(got, expected, case.dtype, name)
            except Exception as exc:  # noqa: BLE001 - collect every failing path
                failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:400]}")
    assert not failures, f"{what} paths disagree with the op:\n" + "\n".join(failures)
    return expected


def check_rejected(spec, bad, arg_names, also=None, eager_only=False):
    failures = []
    for label, (fn, reference, graphs) in paths(spec).items():
        if set(arg_names) <= set(spec.unread.get(label, ())):
            continue  # this path never sees the corrupted argument
        for graph in modes(graphs):
            if graph and eager_only:
                continue
            name = f"{label}{' compiled' if graph else ''}"
            try:
                S.expect_rejection(lambda: run(fn, reference, bad, graph), arg_names, graph=graph, also=also)
            except AssertionError as exc:
                failures.append(f"{name}: {exc}")
    assert not failures, "invalid input not rejected as the contract says:\n" + "\n".join(failures)


# ---------------------------------------------------------------- shared corruptions


def x_float(case):
    return np.asarray(case.arrays["x"]).dtype.kind == "f"


def c_x_nonfinite(case, rng):
    if not case.arrays["x"].size:
        return None
    x = case.arrays["x"]
    x = x if x_float(case) else x.astype("float32")
    return case.replace(x=S.with_nan(rng, x)), ["x"], "NaN or Inf"


def c_x_not_real(case, rng):
    """Strings or complex numbers (contract item 1: TypeError naming x)."""
    kind = str if rng.random() < 0.5 else "complex64"
    return case.replace(x=np.asarray(case.arrays["x"]).astype(kind)), ["x"], None


def c_x_rank1(case, rng):
    return case.replace(x=np.asarray(case.arrays["x"]).reshape(-1)), ["x"], None


def c_x_features(case, rng):
    x = np.asarray(case.arrays["x"])
    return case.replace(x=np.concatenate([x, x[:, :1]], axis=1)), ["x"], None


def c_nonfinite(name):
    def corrupt(case, rng):
        value = case.arrays.get(name)
        if value is None or not np.asarray(value).size:
            return None
        return case.replace(**{name: S.with_nan(rng, value)}), [name], None

    return corrupt


def c_negative(name):
    def corrupt(case, rng):
        value = case.arrays.get(name)
        if value is None or not np.asarray(value).size:
            return None
        return case.replace(**{name: S.with_entry(rng, value, -0.25)}), [name], None

    return corrupt


def c_indices(name, upper, how):
    """``how``: a kind of :data:`strategies.BAD_INDEX_KINDS`; "out_of_range" draws negative or too large."""
    def corrupt(case, rng):
        ids = case.arrays[name]
        if not np.asarray(ids).size:
            return None
        kind = how if how != "out_of_range" else ("negative", "too_large")[rng.integers(2)]
        return case.replace(**{name: S.bad_indices(rng, ids, upper(case), kind)}), [name], None

    return corrupt


def c_topology(how, name="node_state"):
    def corrupt(case, rng):
        return case.replace(**{name: S.broken_node_state(rng, case.arrays[name], how)}), [name], None

    return corrupt


def c_static(name, *values):
    """The Python argument ``name`` set to one of ``values`` (drawn)."""
    def corrupt(case, rng):
        return case.restatic(**{name: values[rng.integers(len(values))]}), [name], None

    return corrupt


def c_shape(name):
    def corrupt(case, rng):
        value = np.asarray(case.arrays[name])
        return case.replace(**{name: np.concatenate([value, value[..., :1]], axis=-1)}), [name], None

    return corrupt


INDEX_KINDS = ["out_of_range", "int64_wraps", "fractional"]
X_CORRUPTIONS = {
    "x_nonfinite": c_x_nonfinite,
    "x_not_real": c_x_not_real,
    "x_rank1": c_x_rank1,
    "x_features": c_x_features,
}
EAGER_ONLY_ON_JAX = {"x_not_real", "feature_indices_string", "labels_string"}


# ---------------------------------------------------------------- draws shared by the builders


def draw_x(draw, rng, dim, dtype, nonempty):
    batch = draw(S.nonempty_batches if nonempty else S.batches, label="batch")
    x_dtype = draw(S.x_dtypes, label="x_dtype")
    if x_dtype == "float64" or dtype == "float64":  # same float dtype, or integers
        x_dtype = dtype if "float" in x_dtype else x_dtype
    return S.features_array(rng, batch, dim, x_dtype)


def draw_depth(draw, low=1, high=8):
    return draw(st.integers(low, high), label="depth")


def draw_trees(draw, depth, deep=8):
    t = draw(S.trees, label="trees")
    return min(t, 2) if depth > deep else t


# ---------------------------------------------------------------- soft tree ensembles


def build_soft_tree(draw, rng, nonempty):
    dtype = draw(S.float_dtypes, label="dtype")
    depth = draw_depth(draw, 1, 10)
    t, d, u = draw_trees(draw, depth, 6), draw(S.features, label="features"), draw(S.units, label="units")
    arrays = dict(
        x=draw_x(draw, rng, d, dtype, nonempty),
        node_weights=S.grid(rng, (t, 2**depth - 1, d), dtype),
        node_bias=S.grid(rng, (t, 2**depth - 1), dtype),
        leaf_weights=S.grid(rng, (t, 2**depth, u), dtype),
    )
    static = dict(gamma=draw(st.sampled_from([0.5, 1.0, 4.0]), label="gamma"),
                  activation=draw(st.sampled_from(["smooth_step", "logistic"]), label="activation"),
                  training=draw(st.booleans(), label="training"))
    return Case(arrays, static, dtype)


def soft_tree_op(a, s):
    return tree_ops.soft_tree_ensemble(a["x"], a["node_weights"], a["node_bias"], a["leaf_weights"], s["gamma"],
                                       s["activation"], training=s["training"])


def soft_tree_ref(a, s):
    return tree_ops.soft_tree_ensemble_reference(a["x"], a["node_weights"], a["node_bias"], a["leaf_weights"],
                                                 s["gamma"], s["activation"])


SOFT_TREE_CORRUPTIONS = {
    **X_CORRUPTIONS,
    "node_weights_nonfinite": c_nonfinite("node_weights"),
    "node_bias_nonfinite": c_nonfinite("node_bias"),
    "leaf_weights_nonfinite": c_nonfinite("leaf_weights"),
    "leaf_weights_shape": lambda case, rng: (
        case.replace(leaf_weights=case.arrays["leaf_weights"][:, :-1]), ["leaf_weights"], None),
    "gamma_not_positive": c_static("gamma", 0.0, -1.0),
    "gamma_nonfinite": c_static("gamma", float("nan"), float("inf")),
    "gamma_not_a_number": c_static("gamma", None, "1"),
    "activation_unknown": c_static("activation", "relu"),
}


def mean_reachable_op(a, s):
    return tree_ops.mean_reachable_leaves(a["x"], a["node_weights"], a["node_bias"], s["gamma"], s["activation"])


# ---------------------------------------------------------------- hinge forests and ferns


def build_hinge(draw, rng, nonempty):
    dtype = draw(S.float_dtypes, label="dtype")
    fern = draw(st.booleans(), label="fern")
    depth = draw_depth(draw, 1, 12)
    t, d, u = draw_trees(draw, depth), draw(S.features, label="features"), draw(S.units, label="units")
    n = depth if fern else 2**depth - 1
    index_dtype = draw(st.sampled_from(["int32", "int64", "float32"]), label="feature_indices dtype")
    arrays = dict(
        x=draw_x(draw, rng, d, dtype, nonempty),
        thresholds=S.grid(rng, (t, n), dtype),
        feature_indices=rng.integers(0, d, size=(t, n)).astype(index_dtype),  # whole-number floats are ids
        leaf_weights=S.grid(rng, (t, 2**depth, u), dtype),
    )
    return Case(arrays, dict(fern=fern), dtype)


def hinge_op(a, s):
    return tree_ops.hinge_forest(a["x"], a["thresholds"], a["feature_indices"], a["leaf_weights"], fern=s["fern"])


def hinge_ref(a, s):
    return tree_ops.hinge_forest_reference(a["x"], a["thresholds"], a["feature_indices"], a["leaf_weights"],
                                           fern=s["fern"])


def hinge_dense(a, s):
    return tree_ops.hinge_forest_dense(a["x"], a["thresholds"], a["feature_indices"], a["leaf_weights"],
                                       fern=s["fern"])


def hinge_traversal_op(a, s):
    return tree_ops.hinge_forest_traversal(a["x"], a["thresholds"], a["feature_indices"], fern=s["fern"])


def hinge_traversal_ref(a, s):
    return tree_ops.hinge_traversal_reference(a["x"], a["thresholds"], a["feature_indices"], fern=s["fern"])


def num_features(case):
    return case.arrays["x"].shape[-1]


HINGE_CORRUPTIONS = {  # extra features are valid here (feature_indices pick the ones used)
    **{k: v for k, v in X_CORRUPTIONS.items() if k != "x_features"},
    "thresholds_nonfinite": c_nonfinite("thresholds"),
    "leaf_weights_nonfinite": c_nonfinite("leaf_weights"),
    **{f"feature_indices_{how}": c_indices("feature_indices", num_features, how) for how in INDEX_KINDS},
    "feature_indices_string": lambda case, rng: (
        case.replace(feature_indices=case.arrays["feature_indices"].astype(str)), ["feature_indices"], None),
}
HINGE_TRAVERSAL_CORRUPTIONS = {k: v for k, v in HINGE_CORRUPTIONS.items() if "leaf_weights" not in k}


# ---------------------------------------------------------------- hard routing


def draw_oblique(draw, rng, nonempty, max_depth=8, experts=None):
    dtype = draw(S.float_dtypes, label="dtype")
    depth = draw_depth(draw, 1, max_depth)
    t, d = draw_trees(draw, depth, 6), draw(S.features, label="features")
    internal = 2**depth - 1
    state = S.random_node_state(rng, t, depth)
    experts = draw(st.booleans(), label="experts") if experts is None else experts
    arrays = dict(x=draw_x(draw, rng, d, dtype, nonempty))
    if experts:
        k = draw(st.integers(1, 3), label="experts K")
        arrays.update(split_weights=S.grid(rng, (t, internal, k, d), dtype),
                      split_bias=S.grid(rng, (t, internal, k), dtype),
                      expert_weights=S.grid(rng, (t, internal, k), dtype, low=0))
    else:
        arrays.update(split_weights=S.grid(rng, (t, internal, d), dtype), split_bias=S.grid(rng, (t, internal), dtype))
    return Case(arrays, {}, dtype), state, experts


def build_hard_route(draw, rng, nonempty):
    case, state, experts = draw_oblique(draw, rng, nonempty)
    case.arrays["is_split"] = topology.is_split_mask(state)
    if experts:
        case.arrays["threshold"] = S.grid(rng, case.arrays["split_bias"].shape[:2], case.dtype, low=0)
    case.static["with_path_values"] = draw(st.booleans(), label="with_path_values")
    return case


def hard_route_op(a, s):
    out = tree_ops.hard_route(a["x"], a["split_weights"], a["split_bias"], a["is_split"], s["with_path_values"],
                              expert_weights=a.get("expert_weights"), threshold=a.get("threshold"))
    return out


def hard_route_ref(a, s):
    node, path = tree_ops.hard_route_reference(a["x"], a["split_weights"], a["split_bias"], a["is_split"],
                                               expert_weights=a.get("expert_weights"), threshold=a.get("threshold"))
    return node, (path if s["with_path_values"] else path[..., :0])


HARD_ROUTE_CORRUPTIONS = {
    **X_CORRUPTIONS,
    "split_weights_nonfinite": c_nonfinite("split_weights"),
    "split_bias_nonfinite": c_nonfinite("split_bias"),
    "expert_weights_nonfinite": c_nonfinite("expert_weights"),
    "expert_weights_negative": c_negative("expert_weights"),
    "threshold_nonfinite": c_nonfinite("threshold"),
    "is_split_shape": c_shape("is_split"),
}


# ---------------------------------------------------------------- pruned routing


def build_pruned(draw, rng, nonempty, experts=None):
    case, state, experts = draw_oblique(draw, rng, nonempty, experts=experts)
    t, internal = case.arrays["split_weights"].shape[:2]
    a = case.arrays
    a["gamma"] = S.grid(rng, (t, internal), case.dtype, low=1)
    a["is_split"] = topology.is_split_mask(state)
    if experts:
        a["rate0"] = S.grid(rng, (t, internal), case.dtype, low=0)
        case.static["annealed"] = draw(st.booleans(), label="annealed")
    else:
        case.static["annealed"] = True
    case.static["prune_threshold"] = draw(S.prune_thresholds, label="prune_threshold")
    return case


def build_pruned_route(draw, rng, nonempty):
    case = build_pruned(draw, rng, nonempty)
    t, internal = case.arrays["split_weights"].shape[:2]
    u = draw(S.units, label="units")
    case.arrays["leaf_values"] = S.grid(rng, (t, 2 * internal + 1, u), case.dtype)
    return case


def _pruned_kwargs(a, s):
    return dict(prune_threshold=s["prune_threshold"], expert_weights=a.get("expert_weights"), rate0=a.get("rate0"),
                annealed=s["annealed"])


def pruned_route_op(a, s):
    return tree_ops.pruned_route(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["is_split"],
                                 a["leaf_values"], with_statistics=True, **_pruned_kwargs(a, s))


def pruned_route_ref(a, s):
    return tree_ops.pruned_route_reference(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["is_split"],
                                           a["leaf_values"], with_statistics=True, **_pruned_kwargs(a, s))


def build_pruned_statistics(draw, rng, nonempty):
    case = build_pruned(draw, rng, nonempty)
    t = case.arrays["split_weights"].shape[0]
    u = draw(S.units, label="units")
    case.arrays["weights"] = S.grid(rng, (case.arrays["x"].shape[0], t, u), case.dtype)
    return case


def pruned_statistics_op(a, s):
    return tree_ops.pruned_leaf_statistics(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["is_split"],
                                           a["weights"], **_pruned_kwargs(a, s))


def pruned_statistics_ref(a, s):
    return tree_ops.pruned_leaf_statistics_reference(a["x"], a["split_weights"], a["split_bias"], a["gamma"],
                                                     a["is_split"], a["weights"], **_pruned_kwargs(a, s))


def build_pruned_em(draw, rng, nonempty):
    case = build_pruned(draw, rng, nonempty, experts=False)
    t, internal = case.arrays["split_weights"].shape[:2]
    k = draw(S.classes, label="classes")
    b = case.arrays["x"].shape[0]
    a = case.arrays
    a["leaf_values"] = rng.dirichlet(np.ones(k), size=(t, 2 * internal + 1)).astype(case.dtype)
    label_dtype = draw(st.sampled_from(["int32", "int64", "float32"]), label="labels dtype")
    a["labels"] = rng.integers(0, k, size=b).astype(label_dtype)  # whole-number float labels are valid
    if draw(st.booleans(), label="sample_weight"):
        a["sample_weight"] = S.grid(rng, (b,), case.dtype, low=0)
    return case


def pruned_em_op(a, s):
    return tree_ops.pruned_em_statistics(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["is_split"],
                                         a["leaf_values"], a["labels"], a.get("sample_weight"),
                                         prune_threshold=s["prune_threshold"])


def pruned_em_ref(a, s):
    return tree_ops.pruned_em_statistics_reference(a["x"], a["split_weights"], a["split_bias"], a["gamma"],
                                                   a["is_split"], a["leaf_values"], a["labels"], a.get("sample_weight"),
                                                   prune_threshold=s["prune_threshold"])


PRUNED_CORRUPTIONS = {
    **X_CORRUPTIONS,
    "split_weights_nonfinite": c_nonfinite("split_weights"),
    "split_bias_nonfinite": c_nonfinite("split_bias"),
    "gamma_nonfinite": c_nonfinite("gamma"),
    "expert_weights_nonfinite": c_nonfinite("expert_weights"),
    "expert_weights_negative": c_negative("expert_weights"),
    "rate0_nonfinite": c_nonfinite("rate0"),
    "is_split_shape": c_shape("is_split"),
    "prune_threshold_out_of_range": c_static("prune_threshold", 1.5, -0.1, float("nan")),
    "prune_threshold_string": c_static("prune_threshold", "0.1"),
}
PRUNED_ROUTE_CORRUPTIONS = {**PRUNED_CORRUPTIONS, "leaf_values_nonfinite": c_nonfinite("leaf_values")}
PRUNED_STATISTICS_CORRUPTIONS = {**PRUNED_CORRUPTIONS, "weights_nonfinite": c_nonfinite("weights")}


def num_classes_em(case):
    return case.arrays["leaf_values"].shape[-1]


PRUNED_EM_CORRUPTIONS = {
    **{k: v for k, v in PRUNED_CORRUPTIONS.items() if "expert" not in k and "rate0" not in k},
    "leaf_values_nonfinite": c_nonfinite("leaf_values"),
    "leaf_values_negative": c_negative("leaf_values"),
    **{f"labels_{how}": c_indices("labels", num_classes_em, how) for how in INDEX_KINDS},
    "labels_string": lambda case, rng: (case.replace(labels=case.arrays["labels"].astype(str)), ["labels"], None),
    "sample_weight_nonfinite": c_nonfinite("sample_weight"),
    "sample_weight_negative": c_negative("sample_weight"),
}


# ---------------------------------------------------------------- loss-augmented inference


def build_loss_augmented(draw, rng, nonempty):
    dtype = draw(S.float_dtypes, label="dtype")
    depth = draw_depth(draw, 1, 8)
    d, k = draw(S.features, label="features"), draw(S.classes, label="classes")
    loss = draw(st.sampled_from(["log", "squared"]), label="loss")
    x = draw_x(draw, rng, d, dtype, nonempty)
    b = x.shape[0]
    arrays = dict(
        x=x,
        split_weights=S.grid(rng, (2**depth - 1, d), dtype),
        split_bias=S.grid(rng, (2**depth - 1,), dtype),
        # Continuous leaf values: distinct losses, so the maximizing leaf is unique.
        leaf_values=rng.normal(size=(2**depth, k)).astype(dtype),
    )
    if loss == "log":
        label_dtype = draw(st.sampled_from(["int32", "int64", "float32"]), label="labels dtype")
        arrays["labels"] = rng.integers(0, k, size=b).astype(label_dtype)
    else:
        arrays["labels"] = rng.normal(size=(b, k)).astype(dtype)
    return Case(arrays, dict(loss=loss, fast=draw(st.booleans(), label="fast")), dtype)


def lai_op(a, s):
    return tree_ops.loss_augmented_inference(a["x"], a["split_weights"], a["split_bias"], a["leaf_values"],
                                             a["labels"], s["loss"], s["fast"])


def lai_ref(a, s):
    return tree_ops.loss_augmented_inference_reference(a["x"], a["split_weights"], a["split_bias"], a["leaf_values"],
                                                       a["labels"], s["loss"], s["fast"])


def num_classes_lai(case):
    return case.arrays["leaf_values"].shape[-1]


def c_lai_labels(how):
    inner = c_indices("labels", num_classes_lai, how)

    def corrupt(case, rng):
        if case.static["loss"] != "log":
            return None
        return inner(case, rng)

    return corrupt


def c_lai_targets_nonfinite(case, rng):
    if case.static["loss"] != "squared" or not case.arrays["labels"].size:
        return None
    return case.replace(labels=S.with_nan(rng, case.arrays["labels"])), ["labels", "targets"], None


LAI_CORRUPTIONS = {
    **X_CORRUPTIONS,
    "split_weights_nonfinite": c_nonfinite("split_weights"),
    "split_bias_nonfinite": c_nonfinite("split_bias"),
    "leaf_values_nonfinite": c_nonfinite("leaf_values"),
    **{f"labels_{how}": c_lai_labels(how) for how in INDEX_KINDS},
    "labels_string": lambda case, rng: (case.replace(labels=case.arrays["labels"].astype(str)), ["labels"], None),
    "targets_nonfinite": c_lai_targets_nonfinite,
    "loss_unknown": c_static("loss", "hinge"),
}


def build_surrogate(draw, rng, nonempty):
    case = build_loss_augmented(draw, rng, nonempty)
    a, s = case.arrays, case.static
    g, _, _ = lai_op(a, s)  # the compiled op (its reference raised on empty batches)
    a["g_leaf"] = np.asarray(g).astype("int32")
    return case


def surrogate_op(a, s):
    return tree_ops.surrogate(a["x"], a["split_weights"], a["split_bias"], a["leaf_values"], a["labels"], a["g_leaf"],
                              s["loss"])


def surrogate_bound(a, s):
    """The surrogate at the loss-augmented leaf is the bound loss-augmented inference returns."""
    return lai_ref(a, s)[2]


SURROGATE_CORRUPTIONS = {
    **{k: v for k, v in LAI_CORRUPTIONS.items() if k != "loss_unknown"},
    **{f"g_leaf_{how}": c_indices("g_leaf", lambda case: case.arrays["leaf_values"].shape[0], how)
       for how in ("out_of_range",)},
}


# ---------------------------------------------------------------- path probabilities


def build_path_probabilities(draw, rng, nonempty):
    case, state, _ = draw_oblique(draw, rng, nonempty, max_depth=8, experts=False)
    t, internal = case.arrays["split_weights"].shape[:2]
    case.arrays["gamma"] = S.grid(rng, (t, internal), case.dtype, low=1)
    case.arrays["node_state"] = state
    case.static["prune_threshold"] = draw(S.prune_thresholds, label="prune_threshold")
    return case


def soft_leaf_op(a, s):
    return tree_ops.soft_leaf_log_probabilities(a["x"], a["split_weights"], a["split_bias"], a["gamma"],
                                                a["node_state"], s["prune_threshold"])


def scatter_leaf_probabilities(out, case):
    """``(leaf_ids, log_mu)`` as dense ``(batch, num_trees, positions)`` probabilities."""
    if not isinstance(out, tuple):
        return out
    ids, log_mu = out
    t, positions = case.arrays["node_state"].shape
    dense = np.zeros((log_mu.shape[0], t * positions), dtype=log_mu.dtype)
    dense[:, ids] = np.exp(log_mu)
    return dense.reshape(log_mu.shape[0], t, positions)


def soft_leaf_pruned_ref(a, s):
    mu, _, _, _ = tree_ops.pruned_leaf_probabilities(a["x"], a["split_weights"], a["split_bias"], a["gamma"],
                                                     topology.is_split_mask(np.asarray(a["node_state"]))
                                                     if isinstance(a["node_state"], np.ndarray)
                                                     else a["node_state"][:, : a["split_bias"].shape[1]] == 2,
                                                     prune_threshold=s["prune_threshold"])
    return mu


def heap_op(a, s):
    return tree_ops.heap_leaf_probabilities(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["node_state"])


def heap_soft_leaf_ref(a, s):
    return tree_ops.soft_leaf_log_probabilities(a["x"], a["split_weights"], a["split_bias"], a["gamma"],
                                                a["node_state"], 0.0)


def build_frontier(draw, rng, nonempty):
    case = build_path_probabilities(draw, rng, nonempty)
    t, internal = case.arrays["split_weights"].shape[:2]
    case.arrays["candidate"] = rng.random((t, internal)) < 0.5
    return case


def frontier_op(a, s):
    return tree_ops.frontier(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["node_state"], a["candidate"])


PATH_CORRUPTIONS = {
    **X_CORRUPTIONS,
    "split_weights_nonfinite": c_nonfinite("split_weights"),
    "split_bias_nonfinite": c_nonfinite("split_bias"),
    "gamma_nonfinite": c_nonfinite("gamma"),
    **{f"node_state_{how}": c_topology(how) for how in S.BROKEN_TOPOLOGIES},
}
SOFT_LEAF_CORRUPTIONS = {
    **PATH_CORRUPTIONS,
    "prune_threshold_out_of_range": c_static("prune_threshold", 1.5, -0.1, float("nan")),
    "prune_threshold_string": c_static("prune_threshold", "0.1"),
}
FRONTIER_CORRUPTIONS = {**PATH_CORRUPTIONS, "candidate_shape": c_shape("candidate")}


# ---------------------------------------------------------------- the specs


def _heap_post(out, case):
    return scatter_leaf_probabilities(out, case) if isinstance(out, tuple) else out


SPECS = [
    Spec("soft_tree_ensemble", build_soft_tree, soft_tree_op, {"soft_tree_ensemble_reference": soft_tree_ref},
         SOFT_TREE_CORRUPTIONS),
    Spec("mean_reachable_leaves", build_soft_tree, mean_reachable_op, {},
         {k: v for k, v in SOFT_TREE_CORRUPTIONS.items() if "leaf_weights" not in k}),
    Spec("hinge_forest", build_hinge, hinge_op,
         {"hinge_forest_reference": hinge_ref, "hinge_forest_dense": hinge_dense}, HINGE_CORRUPTIONS),
    Spec("hinge_forest_traversal", build_hinge, hinge_traversal_op,
         {"hinge_traversal_reference": hinge_traversal_ref}, HINGE_TRAVERSAL_CORRUPTIONS),
    Spec("hard_route", build_hard_route, hard_route_op, {"hard_route_reference": hard_route_ref},
         HARD_ROUTE_CORRUPTIONS),
    Spec("pruned_route", build_pruned_route, pruned_route_op, {"pruned_route_reference": pruned_route_ref},
         PRUNED_ROUTE_CORRUPTIONS),
    Spec("pruned_leaf_statistics", build_pruned_statistics, pruned_statistics_op,
         {"pruned_leaf_statistics_reference": pruned_statistics_ref}, PRUNED_STATISTICS_CORRUPTIONS),
    Spec("pruned_em_statistics", build_pruned_em, pruned_em_op, {"pruned_em_statistics_reference": pruned_em_ref},
         PRUNED_EM_CORRUPTIONS),
    Spec("loss_augmented_inference", build_loss_augmented, lai_op,
         {"loss_augmented_inference_reference": lai_ref}, LAI_CORRUPTIONS),
    Spec("surrogate", build_surrogate, surrogate_op, {"loss_augmented_inference bound": surrogate_bound},
         SURROGATE_CORRUPTIONS, kernels=False, unread={"loss_augmented_inference bound": {"g_leaf"}}),
    Spec("soft_leaf_log_probabilities", build_path_probabilities, soft_leaf_op,
         {"pruned_leaf_probabilities": soft_leaf_pruned_ref}, SOFT_LEAF_CORRUPTIONS, post=_heap_post, kernels=False,
         jax_jit=False),
    Spec("heap_leaf_probabilities", build_path_probabilities, heap_op,
         {"soft_leaf_log_probabilities": heap_soft_leaf_ref}, PATH_CORRUPTIONS, post=_heap_post, kernels=False),
    Spec("frontier", build_frontier, frontier_op, {}, FRONTIER_CORRUPTIONS),
]
SPEC = {spec.name: spec for spec in SPECS}


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("name", sorted(SPEC))
@S.props(VALID_EXAMPLES)
@given(seed=S.seeds, data=st.data())
def test_valid_inputs_agree_on_every_path(name, seed, data):
    """Compiled op == op under reference_only() == *_reference, eager and compiled;
    integer x gives the floating result of x cast to floating (never int outputs)."""
    spec = SPEC[name]
    rng = S.rngs(seed)
    case = spec.build(lambda s, label=None: data.draw(s, label=label), rng, nonempty=False)
    expected = check_valid(spec, case)
    x = case.arrays["x"]
    if x.dtype.kind in "iu":  # contract item 1: cast, same values as the floating x
        as_float = case.replace(x=x.astype(case.dtype))
        post = spec.post or (lambda out, case: out)
        floating = post(run(spec.op, True, as_float, graph=False), as_float)
        for got, want in zip(expected if isinstance(expected, tuple) else (expected,),
                             floating if isinstance(floating, tuple) else (floating,)):
            if np.asarray(want).dtype.kind == "f":
                assert np.asarray(got).dtype.kind == "f", f"integer x gave {np.asarray(got).dtype} outputs"
        S.assert_same(expected, floating, case.dtype, "integer x vs the same x as floats")


def _corruption_params():
    return [pytest.param(spec.name, label, id=f"{spec.name}-{label}")
            for spec in SPECS for label in spec.corruptions]


@pytest.mark.parametrize("name,corruption", _corruption_params())
@S.props(INVALID_EXAMPLES)
@given(seed=S.seeds, data=st.data())
def test_invalid_inputs_are_rejected_naming_the_argument(name, corruption, seed, data):
    """Every path (compiled op, reference_only(), *_reference; eager and compiled)
    raises ValueError/TypeError naming the argument (compiled functions: or the
    backend's runtime error carrying that message)."""
    from hypothesis import assume

    spec = SPEC[name]
    rng = S.rngs(seed)
    case = spec.build(lambda s, label=None: data.draw(s, label=label), rng, nonempty=True)
    made = spec.corruptions[corruption](case, rng)
    assume(made is not None)
    bad, arg_names, also = made
    eager_only = S.BACKEND == "jax" and corruption in EAGER_ONLY_ON_JAX
    check_rejected(spec, bad, arg_names, also=also, eager_only=eager_only)


@pytest.mark.parametrize("name", ["hard_route", "hinge_forest", "soft_tree_ensemble", "loss_augmented_inference"])
@S.props(4)
@given(seed=S.seeds, data=st.data())
def test_mixed_float_dtypes_agree(name, seed, data):
    """float64 x with float32 parameters (and the reverse): the op and its
    references either all accept with the same result or all reject with a
    ValueError/TypeError (contract item 7; hard_route included)."""
    spec = SPEC[name]
    rng = S.rngs(seed)
    case = spec.build(lambda s, label=None: data.draw(s, label=label), rng, nonempty=True)
    other = "float32" if case.dtype == "float64" else "float64"
    case = case.replace(x=case.arrays["x"].astype(other))
    outcomes = {}
    for label, (fn, reference, _) in paths(spec).items():
        try:
            outcomes[label] = run(fn, reference, case, graph=False)
        except (ValueError, TypeError) as exc:
            outcomes[label] = exc
        except Exception as exc:  # noqa: BLE001
            outcomes[label] = AssertionError(f"{type(exc).__name__}: {exc}")
    kinds = {label: isinstance(v, Exception) for label, v in outcomes.items()}
    assert len(set(kinds.values())) == 1, "paths disagree on accepting mixed dtypes: " + ", ".join(
        f"{label}: {'raises ' + type(v).__name__ + ': ' + str(v)[:200] if kinds[label] else 'accepts'}"
        for label, v in outcomes.items())
    if not any(kinds.values()):
        post = spec.post or (lambda out, case: out)
        first = post(outcomes["op"], case)
        for label, v in outcomes.items():
            S.assert_same(post(v, case), first, "float32", label)
    else:
        assert not any(isinstance(v, AssertionError) for v in outcomes.values()), outcomes


# ---------------------------------------------------------------- small math helpers


HELPERS = {
    # name: (call with the argument under test replaced, argument name, NumPy oracle or None)
    "smooth_step": (lambda v: tree_ops.smooth_step(v, 1.0), "t",
                    lambda t: np.clip(np.where(t <= -0.5, 0.0, np.where(t >= 0.5, 1.0, -2 * t**3 + 1.5 * t + 0.5)),
                                      0, 1)),
    "logistic_step": (lambda v: tree_ops.logistic_step(v, 1.0), "t", lambda t: 1 / (1 + np.exp(-6.0 * t))),
    "log1mexp": (lambda v: tree_ops.log1mexp(v), "a", lambda a: np.log(-np.expm1(-np.maximum(np.abs(a), 1e-30)))),
    "noisy_or_probability": (lambda v: tree_ops.noisy_or_probability(v), "rate", lambda r: -np.expm1(-np.abs(r))),
    "noisy_or_log_probabilities": (lambda v: tree_ops.noisy_or_log_probabilities(v), "rate", None),
    "p0_to_rate": (lambda v: tree_ops.p0_to_rate(v), "p0", None),
    "noisy_or_rate": (lambda v: tree_ops.noisy_or_rate(v, np.ones((3,), "float32")), "z",
                      lambda z: np.sum(np.logaddexp(0.0, z), axis=-1)),
    "annealed_log_probabilities": (lambda v: tree_ops.annealed_log_probabilities(v, 0.5, 2.0), "rate", None),
    "leaf_probabilities": (lambda v: tree_ops.leaf_probabilities(v), "left_probs", None),
    "hard_leaf_index": (lambda v: tree_ops.hard_leaf_index(v), "go_left", None),
    "path_lengths": (lambda v: tree_ops.path_lengths(v), "node", None),
    "split_values": (lambda v: tree_ops.split_values(v, np.ones((2, 3, 3), "float32")), "x", None),
    "soft_tree_leaf_probabilities": (
        lambda v: tree_ops.soft_tree_leaf_probabilities(v, np.ones((2, 3, 3), "float32"), None, 1.0), "x", None),
}


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_helpers_reject_strings_naming_the_argument(name):
    """Strings are refused with a TypeError naming the argument, not a backend cast error."""
    call, arg, _ = HELPERS[name]
    exc = S.expect_rejection(lambda: call(np.array([["0.5", "1", "0"]])), arg)
    assert isinstance(exc, TypeError), f"{type(exc).__name__} instead of TypeError: {exc}"


@pytest.mark.parametrize("name", sorted(k for k, v in HELPERS.items() if v[2] is not None))
@S.props(6)
@given(seed=S.seeds, dtype=st.sampled_from(["float32", "float64", "int32"]), batch=S.batches)
def test_helpers_match_numpy_and_return_floats(name, seed, dtype, batch):
    """Helpers agree with their NumPy formula; integer inputs give floating outputs (contract item 1)."""
    call, _, oracle = HELPERS[name]
    rng = S.rngs(seed)
    values = S.grid(rng, (batch, 3), "float64") if "int" not in dtype else rng.integers(-2, 3, (batch, 3))
    if name in ("log1mexp", "noisy_or_probability"):
        values = np.abs(values)
    arg = values.astype(dtype)
    with S.precision(dtype):
        got = S.to_numpy(call(arg))
    assert got.dtype.kind == "f", f"{name} of {dtype} input returned {got.dtype}"
    rtol = 1e-5 if dtype != "float64" else 1e-12
    np.testing.assert_allclose(got.astype("float64"), oracle(values.astype("float64")), rtol=rtol, atol=rtol)
