"""Properties of every public layer (``keras_trees.layers``).

Valid inputs (random sizes, batch 0 and 1, float32/float64/integer features,
random topologies): the layer on the compiled kernels and under
``reference_only()`` gives the same result, eagerly and inside ``tf.function``,
for inference, training calls and the probabilistic methods (``posterior``,
``leaf_probabilities``); integer features give the floating result of the same
features as floats (contract items 1, 7). Inputs of rank 3 follow
``keras.layers.Dense`` (the trees apply to the last axis, the leading
dimensions are kept); NonGreedyTree rejects them (contract item 6).

Invalid inputs (NaN/Inf, strings and complex numbers in the features; NaN/Inf
assigned to a weight, threshold, bias or leaf variable; broken ``node_state``):
every call path rejects them with a ValueError/TypeError naming the argument
or variable; inside ``tf.function`` the runtime error carrying that message is
accepted (contract items 2, 3, 5, 8). TensorFlow only (CI runs this folder on
TensorFlow).
"""

import contextlib

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_trees import layers as L
from keras_trees import ops as tree_ops
from tests.properties import strategies as S

pytestmark = pytest.mark.skipif(S.BACKEND != "tensorflow", reason="layer properties run on TensorFlow")

VALID_EXAMPLES = 3
INVALID_EXAMPLES = 2


# ---------------------------------------------------------------- families


def _tree_ensemble(draw, rng, d):
    depth = draw(st.integers(1, 6), label="max_depth")
    return L.TreeEnsembleLayer(draw(S.trees, label="num_trees"), max_depth=depth, units=draw(S.units, label="units"),
                               activation=draw(st.sampled_from(["smooth_step", "logistic"]), label="activation"))


def _hinge(cls):
    def make(draw, rng, d):
        depth = draw(st.integers(1, 10), label="max_depth")
        t = draw(S.trees, label="num_trees")
        return cls(min(t, 2) if depth > 6 else t, max_depth=depth, units=draw(S.units, label="units"))

    return make


def _end_to_end_tree(draw, rng, d):
    return L.EndToEndTree(max_depth=draw(st.integers(1, 6), label="max_depth"),
                          num_classes=draw(S.classes, label="num_classes"))


def _end_to_end_forest(draw, rng, d):
    return L.EndToEndForest(draw(S.trees, label="num_trees"), max_depth=draw(st.integers(1, 6), label="max_depth"),
                            num_classes=draw(S.classes, label="num_classes"),
                            prune_threshold=draw(S.prune_thresholds, label="prune_threshold"))


def _polytope(draw, rng, d):
    return L.ConvexPolytopeTree(max_depth=draw(st.integers(1, 5), label="max_depth"),
                                num_experts=draw(st.integers(1, 3), label="num_experts"),
                                num_classes=draw(S.classes, label="num_classes"),
                                prune_threshold=draw(S.prune_thresholds, label="prune_threshold"))


def _non_greedy(draw, rng, d):
    return L.NonGreedyTree(max_depth=draw(st.integers(1, 6), label="max_depth"),
                           num_classes=draw(S.classes, label="num_classes"))


def _batch_norm(draw, rng, d):
    return L.HingeBatchNormalization()


# name -> (constructor, variables whose NaN/Inf must be rejected at call time,
#          extra deterministic calls, has a topology, its training call is a pure function)
FAMILIES = {
    "TreeEnsembleLayer": (_tree_ensemble, ["node_weights", "node_bias", "leaf_weights"],
                          ["leaf_probabilities"], False, True),
    "HingeForest": (_hinge(L.HingeForest), ["thresholds", "leaf_weights"], [], False, True),
    "HingeFern": (_hinge(L.HingeFern), ["thresholds", "leaf_weights"], [], False, True),
    "EndToEndTree": (_end_to_end_tree, ["split_kernel", "split_bias"], ["posterior"], True, True),
    "EndToEndForest": (_end_to_end_forest, ["split_kernel", "split_bias"], ["posterior"], True, True),
    "ConvexPolytopeTree": (_polytope, ["expert_kernel", "expert_bias", "log_expert_weight"], [], True, True),
    "NonGreedyTree": (_non_greedy, ["split_weights", "leaf_values"], [], True, False),
    "HingeBatchNormalization": (_batch_norm, [], [], False, False),
}


def make_layer(name, draw, rng, d):
    make, _, _, has_topology, _ = FAMILIES[name]
    layer = make(draw, rng, d)
    layer.build((None, d))
    if has_topology and name != "NonGreedyTree":  # NonGreedyTree's trees are perfect
        layer.node_state.assign(S.random_node_state(rng, layer.node_state.shape[0],
                                                    _max_depth(layer.node_state.shape[1])))
    for v in layer.non_trainable_variables:
        if v.path.endswith("/gamma") and len(v.shape) == 2:  # steepness of every split
            v.assign(rng.uniform(0.5, 4.0, size=v.shape).astype(v.dtype))
    return layer


def _max_depth(positions):
    return int(np.log2(positions + 1)) - 1


def call_kinds(name):
    """label -> f(layer, x): the deterministic calls of the family."""
    _, _, extras, _, pure_training = FAMILIES[name]
    kinds = {"call": lambda layer, x: layer(x)}
    if pure_training:
        kinds["call(training=True)"] = lambda layer, x: layer(x, training=True)
    for method in extras:
        kinds[method] = lambda layer, x, m=method: getattr(layer, m)(x)
    return kinds


def run(layer, call, x, reference, graph, traced=None):
    """``call(layer, x)`` eagerly or in a ``tf.function``; ``traced``: a dict
    keeping that function by ``(call, reference)``, so later calls on the same
    layer (other bad values of its variables) run in the same trace."""
    context = tree_ops.reference_only() if reference else contextlib.nullcontext()
    with context:
        if graph:
            import tensorflow as tf

            if traced is None:
                return S.to_numpy(tf.function(lambda v: call(layer, v))(x))
            key = (call, reference)
            if key not in traced:
                traced[key] = tf.function(lambda v: call(layer, v))
            return S.to_numpy(traced[key](x))
        return S.to_numpy(call(layer, x))


PATHS = {"kernels": (False, False), "reference": (True, False),
         "kernels in tf.function": (False, True), "reference in tf.function": (True, True)}


def draw_features(draw, rng, d, nonempty=False):
    batch = draw(S.nonempty_batches if nonempty else S.batches, label="batch")
    dtype = draw(S.x_dtypes, label="x_dtype")
    return S.features_array(rng, batch, d, dtype) if "int" in dtype else rng.normal(size=(batch, d)).astype(dtype)


# ---------------------------------------------------------------- valid inputs


@pytest.mark.parametrize("name", sorted(FAMILIES))
@S.props(VALID_EXAMPLES)
@given(seed=S.seeds, data=st.data())
def test_valid_inputs_agree_on_every_path(name, seed, data):
    """Kernels == reference, eager == tf.function, for every deterministic call;
    integer features give the floating result of the same values as floats."""
    draw = lambda s, label=None: data.draw(s, label=label)  # noqa: E731
    rng = S.rngs(seed)
    d = draw(S.features, label="features")
    layer = make_layer(name, draw, rng, d)
    x = draw_features(draw, rng, d)
    failures = []
    for kind, call in call_kinds(name).items():
        try:
            expected = run(layer, call, x, reference=False, graph=False)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{kind}: rejects a valid input: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        for path, (reference, graph) in PATHS.items():
            try:
                S.assert_same(run(layer, call, x, reference, graph), expected, "float32", f"{kind} {path}")
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{kind} {path}: {type(exc).__name__}: {str(exc)[:300]}")
        if x.dtype.kind in "iu":
            as_float = run(layer, call, x.astype("float32"), reference=False, graph=False)
            for got, want in zip(expected if isinstance(expected, tuple) else (expected,),
                                 as_float if isinstance(as_float, tuple) else (as_float,)):
                if want.dtype.kind == "f" and got.dtype.kind != "f":
                    failures.append(f"{kind}: integer features gave {got.dtype} outputs")
            try:
                S.assert_same(expected, as_float, "float32", f"{kind} integer x vs float x")
            except AssertionError as exc:
                failures.append(str(exc)[:300])
    assert not failures, f"{name}:\n" + "\n".join(failures)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@S.props(VALID_EXAMPLES)
@given(seed=S.seeds, data=st.data())
def test_rank3_inputs_follow_dense(name, seed, data):
    """(a, b, features) -> (a, b, ...) equal to the rows one by one (never
    extra samples); NonGreedyTree rejects rank != 2 naming the input."""
    draw = lambda s, label=None: data.draw(s, label=label)  # noqa: E731
    rng = S.rngs(seed)
    d = draw(S.features, label="features")
    layer = make_layer(name, draw, rng, d)
    a = draw(st.integers(1, 3), label="leading")
    x = rng.normal(size=(a, draw(st.integers(1, 4), label="rows"), d)).astype("float32")
    if name == "NonGreedyTree":
        S.expect_rejection(lambda: layer(x), ["x", "inputs", "rank"])
        return
    rows = S.to_numpy(layer(x.reshape(-1, d)))
    got = S.to_numpy(layer(x))
    assert got.shape == x.shape[:2] + rows.shape[1:], f"rank-3 input {x.shape} gave {got.shape}"
    S.assert_same(got.reshape(rows.shape), rows, "float32", "rank-3 vs rows")


# ---------------------------------------------------------------- invalid inputs


def check_rejected(layer, name, x, arg_names, also=None, kinds=None, traced=None):
    """Every call kind eagerly on both paths; ``call`` also inside
    ``tf.function`` on both paths, the other calls on the kernels (how ``fit``
    runs them). ``kinds``/``traced``: the calls and traces to reuse (see ``run``)."""
    failures = []
    for kind, call in (kinds or call_kinds(name)).items():
        for path, (reference, graph) in PATHS.items():
            if kind != "call" and graph and reference:
                continue
            try:
                S.expect_rejection(lambda: run(layer, call, x, reference, graph, traced), arg_names, graph=graph,
                                   also=also)
            except AssertionError as exc:
                failures.append(f"{kind} {path}: {exc}")
    assert not failures, "invalid input not rejected as the contract says:\n" + "\n".join(failures)


X_NAMES = ["x", "inputs"]


@pytest.mark.parametrize("corruption", ["nonfinite", "not_real"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
@S.props(INVALID_EXAMPLES)
@given(seed=S.seeds, data=st.data())
def test_invalid_features_are_rejected(name, corruption, seed, data):
    """NaN/Inf features: ValueError '... contains NaN or Inf' on every call and
    path (the probabilistic ones included); strings and complex: TypeError."""
    draw = lambda s, label=None: data.draw(s, label=label)  # noqa: E731
    rng = S.rngs(seed)
    d = draw(S.features, label="features")
    layer = make_layer(name, draw, rng, d)
    x = draw_features(draw, rng, d, nonempty=True).astype("float32")
    if corruption == "nonfinite":
        check_rejected(layer, name, S.with_nan(rng, x), X_NAMES, also="NaN or Inf")
    else:  # strings or complex numbers
        check_rejected(layer, name, x.astype(str if rng.random() < 0.5 else "complex64"), X_NAMES)


@pytest.mark.parametrize("name", [name for name, spec in FAMILIES.items() if spec[1]])
@S.props(INVALID_EXAMPLES)
@given(seed=S.seeds, data=st.data())
def test_nonfinite_variables_are_rejected_naming_them(name, seed, data):
    """NaN/Inf assigned to each weight, threshold, bias or leaf variable in
    turn (the others sound): every call path raises naming that variable
    (contract item 3). The variables are read at run time, so the
    ``tf.function`` traces of one layer serve all its variables."""
    draw = lambda s, label=None: data.draw(s, label=label)  # noqa: E731
    rng = S.rngs(seed)
    d = draw(S.features, label="features")
    layer = make_layer(name, draw, rng, d)
    x = draw_features(draw, rng, d, nonempty=True)
    kinds, traced = call_kinds(name), {}
    for variable in FAMILIES[name][1]:
        target = next(v for v in layer.variables if v.path.split("/")[-1] == variable)
        sound = S.to_numpy(target)
        target.assign(S.with_nan(rng, sound))
        check_rejected(layer, name, x, [variable], kinds=kinds, traced=traced)
        target.assign(sound)


TOPOLOGY_FAMILIES = [name for name, spec in FAMILIES.items() if spec[3]]


@pytest.mark.parametrize("how", S.BROKEN_TOPOLOGIES)
@pytest.mark.parametrize("name", TOPOLOGY_FAMILIES)
@S.props(INVALID_EXAMPLES)
@given(seed=S.seeds, data=st.data())
def test_broken_topologies_are_rejected(name, how, seed, data):
    """node_state 7 or -1, a split on the last level, no root, an orphan:
    every call path raises naming node_state (contract item 5)."""
    draw = lambda s, label=None: data.draw(s, label=label)  # noqa: E731
    rng = S.rngs(seed)
    d = draw(S.features, label="features")
    layer = make_layer(name, draw, rng, d)
    x = draw_features(draw, rng, d, nonempty=True)
    layer.node_state.assign(S.broken_node_state(rng, S.to_numpy(layer.node_state), how))
    check_rejected(layer, name, x, ["node_state"])


@S.props(2)
@given(seed=S.seeds, data=st.data())
def test_batch_norm_training_with_nonfinite_features_raises_and_keeps_statistics(seed, data):
    """HingeBatchNormalization: a training batch with NaN/Inf is rejected and
    leaves the running statistics unchanged."""
    rng = S.rngs(seed)
    d = data.draw(S.features, label="features")
    layer = L.HingeBatchNormalization()
    x = rng.normal(size=(data.draw(S.nonempty_batches, label="batch"), d)).astype("float32")
    layer(x, training=True)
    before = [S.to_numpy(v) for v in layer.non_trainable_variables]
    S.expect_rejection(lambda: layer(S.with_nan(rng, x), training=True), X_NAMES, also="NaN or Inf")
    for v, b in zip(layer.non_trainable_variables, before):
        np.testing.assert_array_equal(S.to_numpy(v), b, err_msg=v.path)


@pytest.mark.parametrize("builder", ["per_split_features", "split_cnn"])
def test_model_builders_reject_bad_arguments_naming_them(builder):
    """The model builders name the argument they refuse (a string input shape included)."""
    if builder == "per_split_features":
        S.expect_rejection(lambda: L.per_split_features((8, 8, 1), max_depth=0), ["max_depth"])
        S.expect_rejection(lambda: L.per_split_features((8, 8, 1), max_depth=2, num_trees=0), ["num_trees"])
        S.expect_rejection(lambda: L.per_split_features("8", max_depth=2), ["input_shape"])
    else:
        S.expect_rejection(lambda: L.split_cnn((8, 8, 1), kernel_size=0), ["kernel_size"])
        S.expect_rejection(lambda: L.split_cnn("8", kernel_size=3), ["input_shape"])
    keras.backend.clear_session()
