"""Pruned probabilistic routing: the compiled op against the keras.ops
reference, a NumPy depth-first oracle and the dense path; gradients, the error
bound, determinism and input checks."""

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees import topology
from keras_trees.ops import _library, path_probabilities
from keras_trees.ops import pruned_routing as pr
from keras_trees.validation.arguments import prune_threshold
from tests.conftest import finite_difference_check, run_python
from tests.ops import pruned_oracle
from tests.ops.pruned_oracle import pruned_outputs
from tests.ops.random_inputs import pruned_inputs as make

pytestmark = pytest.mark.skipif(
    not tree_ops.custom_ops_available(), reason=f"custom ops not loaded: {tree_ops.load_error()}"
)

FORMS = ("oblique", "experts", "experts_raw")


def run(fn, args, threshold, **kwargs):
    return fn(args["x"], args["split_weights"], args["split_bias"], args["gamma"], args["is_split"],
              args["leaf_values"], threshold, expert_weights=args.get("expert_weights"), rate0=args.get("rate0"),
              annealed=args.get("annealed", True), **kwargs)


def oracle(args, threshold):
    experts = {k: args[k] for k in ("expert_weights", "rate0", "annealed") if k in args}
    return pruned_outputs(args["x"], args["split_weights"], args["split_bias"], args["gamma"], args["is_split"],
                          args["leaf_values"], threshold, **experts)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("threshold", [0.0, 1e-3, 0.05])
def test_op_matches_reference_and_oracle(rng, dtype, form, threshold):
    args, _ = make(rng, form, dtype=dtype)
    out, kept, evals, dropped = (np.asarray(v) for v in run(pr.pruned_route, args, threshold, with_statistics=True))
    assert out.dtype == np.dtype(dtype) and kept.dtype == np.int32 and dropped.dtype == np.dtype(dtype)
    ref = [np.asarray(v) for v in run(pr.pruned_route_reference, args, threshold, with_statistics=True)]
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out, ref[0], rtol=tol, atol=tol)
    np.testing.assert_array_equal(kept, ref[1])
    np.testing.assert_array_equal(evals, ref[2])
    np.testing.assert_allclose(dropped, ref[3], rtol=tol, atol=tol)
    o_out, o_kept, o_evals, o_dropped = oracle(args, prune_threshold(threshold))
    np.testing.assert_allclose(out, o_out, rtol=tol, atol=tol)
    np.testing.assert_array_equal(kept, o_kept)
    np.testing.assert_array_equal(evals, o_evals)
    np.testing.assert_allclose(dropped, o_dropped, rtol=tol, atol=tol)
    if threshold > 0:
        assert (dropped > 0).any() and (kept < np.asarray(ref[1]).max()).any()  # something was pruned


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_threshold_zero_is_the_dense_path(rng, dtype):
    args, state = make(rng, dtype=dtype, depth=6)
    out, kept, evals, dropped = (np.asarray(v) for v in run(pr.pruned_route, args, 0.0, with_statistics=True))
    dense = np.asarray(path_probabilities.heap_leaf_probabilities(
        args["x"], args["split_weights"], args["split_bias"], args["gamma"], state))
    tol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(out, np.einsum("btn,tnu->btu", dense, args["leaf_values"]), rtol=tol, atol=tol)
    np.testing.assert_array_equal(kept, np.broadcast_to(topology.num_leaves(state), kept.shape))
    np.testing.assert_array_equal(evals, np.broadcast_to((state == topology.SPLIT).sum(1), evals.shape))
    assert (dropped == 0).all()


@pytest.mark.parametrize("form", FORMS)
def test_dropped_mass_bound(rng, form):
    # Soft splits (small weights) visit many nodes; sharp ones (large) few.
    for scale, threshold in ((0.3, 0.02), (1.0, 1e-3), (5.0, 1e-4), (0.3, 0.3)):
        args, _ = make(rng, form, batch=200, depth=7, scale=scale)
        args["leaf_values"] = np.ones_like(args["leaf_values"])
        out, kept, evals, dropped = (np.asarray(v) for v in run(pr.pruned_route, args, threshold,
                                                                    with_statistics=True))
        # Every walk keeps a leaf; at most one dropped subtree per visited split,
        # each below the threshold; the kept mass is 1 - dropped.
        assert (kept >= 1).all() and (kept <= evals + 1).all()
        subtrees = evals + 1 - kept
        assert (dropped <= threshold * subtrees * (1 + 1e-9)).all()
        assert (dropped[subtrees == 0] == 0).all()
        np.testing.assert_allclose(out[..., 0], 1.0 - dropped, atol=1e-12)
        # |pruned - exact| <= dropped * max |leaf value| for any leaf values.
        args["leaf_values"] = rng.uniform(-2, 2, size=args["leaf_values"].shape)
        exact = np.asarray(run(pr.pruned_route, args, 0.0))
        pruned = np.asarray(run(pr.pruned_route, args, threshold))
        assert (np.abs(pruned - exact) <= dropped[..., None] * 2.0 + 1e-12).all()


@pytest.mark.parametrize("form", FORMS)
def test_gradients_match_reference_autodiff(rng, form):
    args, _ = make(rng, form, batch=15, depth=4)
    names = ["x", "split_weights", "split_bias", "leaf_values", "gamma"]
    if form != "oblique":
        names += ["expert_weights", "rate0"]
    probe = rng.normal(size=(15, 3, 3))
    for threshold in (0.0, 0.03):
        grads = []
        for reference in (False, True):
            variables = {k: tf.Variable(args[k]) for k in names}
            call = {**args, **variables}
            with tf.GradientTape() as tape, _library.reference_only(reference):
                loss = tf.reduce_sum(run(pr.pruned_route, call, threshold) * probe)
            grads.append(tape.gradient(loss, [variables[k] for k in names]))
        for name, g, r in zip(names, *grads):
            g = np.asarray(g)
            r = np.zeros_like(g) if r is None else np.asarray(r)  # unused by 1 - exp(-S)
            np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12, err_msg=f"{form} {name} {threshold}")
            if name in ("x", "split_weights", "leaf_values"):
                assert np.abs(g).max() > 0


def test_weight_gradients_without_the_input_gradient(rng):
    # x is data (not watched): the tape skips dL/dx and the op does not compute it.
    args, _ = make(rng, batch=30, depth=5)
    grads = []
    for reference in (False, True):
        w = tf.Variable(args["split_weights"])
        with tf.GradientTape() as tape, _library.reference_only(reference):
            loss = tf.reduce_sum(run(pr.pruned_route, {**args, "split_weights": w}, 0.01) ** 2)
        grads.append(np.asarray(tape.gradient(loss, w)))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-12)
    raw = [args[k] for k in ("x", "split_weights", "split_bias", "gamma", "is_split", "leaf_values")]
    gx, gw = _library.module().keras_trees_pruned_routing_grad(np.ones((30, 3, 3)), *raw, threshold=0.01,
                                                               x_grad=False)[:2]
    assert not np.asarray(gx).any() and np.asarray(gw).any()


@pytest.mark.parametrize("form", FORMS)
def test_gradients_match_finite_differences(rng, form):
    args, _ = make(rng, form, batch=6, depth=3, trees=2)
    names = ["x", "split_weights", "split_bias", "leaf_values", "gamma"]
    if form != "oblique":
        names += ["expert_weights", "rate0"]
    probe = rng.normal(size=(6, 2, 3))

    def loss(*values):
        call = {**args, **dict(zip(names, values))}
        return tf.reduce_sum(run(pr.pruned_route, call, 0.02) * probe)

    for i, analytic, numeric in finite_difference_check(loss, [args[k] for k in names], eps=1e-6, rng=rng):
        assert abs(analytic - numeric) <= 1e-6 + 1e-5 * abs(numeric), (form, names[i], analytic, numeric)


@pytest.mark.parametrize("form", ["oblique", "experts"])
def test_leaf_statistics_are_the_leaf_value_gradient(rng, form):
    args, _ = make(rng, form, batch=30, depth=4)
    weights = rng.normal(size=(30, 3, 2))
    call = lambda fn, a, w: fn(a["x"], a["split_weights"], a["split_bias"], a["gamma"], a["is_split"], w,  # noqa: E731
                               0.02, expert_weights=a.get("expert_weights"), rate0=a.get("rate0"))
    stats = np.asarray(call(pr.pruned_leaf_statistics, args, weights))
    v = tf.Variable(np.zeros((3, 31, 2)))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(run(pr.pruned_route, {**args, "leaf_values": v}, 0.02) * weights)
    np.testing.assert_allclose(stats, np.asarray(tape.gradient(loss, v)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats, np.asarray(call(pr.pruned_leaf_statistics_reference, args, weights)),
                               rtol=1e-10, atol=1e-12)
    # Differentiable (the soft counts of the polytope refinement): vs the reference.
    names = ["x", "split_weights", "split_bias"] + (["expert_weights"] if form != "oblique" else [])
    q = rng.normal(size=stats.shape)
    grads = []
    for fn in (pr.pruned_leaf_statistics, pr.pruned_leaf_statistics_reference):
        variables = [tf.Variable(args[k]) for k in names] + [tf.Variable(weights)]
        with tf.GradientTape() as tape:
            out = call(fn, {**args, **dict(zip(names, variables))}, variables[-1])
            loss = tf.reduce_sum(out * q)
        grads.append(tape.gradient(loss, variables))
    for g, r in zip(*grads):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-9, atol=1e-12)


def em_args(rng, batch=40, trees=3, depth=5, classes=4, dtype="float64"):
    """Inputs of pruned_em_statistics: make()'s with class distributions as leaves."""
    args, _ = make(rng, batch=batch, trees=trees, depth=depth, units=classes, dtype=dtype)
    v = rng.uniform(0.01, 1.0, size=args["leaf_values"].shape)
    args["leaf_values"] = (v / v.sum(-1, keepdims=True)).astype(dtype)
    return args, rng.integers(0, classes, batch).astype("int32"), rng.uniform(0, 2, batch).astype(dtype)


def em(fn, args, labels, weights, threshold):
    return np.asarray(fn(args["x"], args["split_weights"], args["split_bias"], args["gamma"], args["is_split"],
                         args["leaf_values"], labels, weights, threshold))


def em_oracle(args, labels, weights, threshold):
    """Eq. 10 from the NumPy depth-first oracle's path probabilities."""
    right, fav = pruned_oracle.split_probabilities(args["x"], args["split_weights"], args["split_bias"],
                                                   args["gamma"])
    mu = pruned_oracle.pruned_walk(right, fav, np.asarray(args["is_split"], bool), threshold)[0]
    pi = np.asarray(args["leaf_values"], np.float64)
    trees, classes = pi.shape[0], pi.shape[2]
    pi_y = np.moveaxis(pi[:, :, labels], -1, 0)  # (batch, trees, positions)
    p_y = (mu * pi_y).sum((1, 2)) / trees
    w = np.ones(len(labels)) if weights is None else np.asarray(weights, np.float64)
    h = mu * pi_y * (w / (trees * np.maximum(p_y, 1e-30)))[:, None, None]
    return np.einsum("btn,bk->tnk", h, np.eye(classes)[labels])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threshold", [0.0, 1e-3, 0.05])
@pytest.mark.parametrize("weighted", [False, True])
def test_em_statistics_match_the_oracle_the_reference_and_the_two_pass_e_step(rng, dtype, threshold, weighted):
    # 700 samples: several sample blocks and groups in the kernel.
    args, labels, weights = em_args(rng, batch=700, dtype=dtype)
    weights = weights if weighted else None
    thr = prune_threshold(threshold)
    tol = 1e-10 if dtype == "float64" else 2e-5
    counts = em(pr.pruned_em_statistics, args, labels, weights, threshold)
    assert counts.shape == (3, 63, 4) and counts.dtype == dtype
    np.testing.assert_allclose(counts, em_oracle(args, labels, weights, thr), rtol=tol * 10, atol=tol)
    np.testing.assert_allclose(counts, em(pr.pruned_em_statistics_reference, args, labels, weights, threshold),
                               rtol=tol * 10, atol=tol)
    # The two walks it replaces: p(y) from pruned_route, then pruned_leaf_statistics times pi.
    out = np.asarray(run(pr.pruned_route, args, threshold), np.float64)
    onehot = np.eye(4)[labels]
    p_y = (out.sum(1) * onehot).sum(1) / 3
    w = np.ones(700) if weights is None else weights
    r = np.broadcast_to((onehot * (w / (3 * p_y))[:, None])[:, None], (700, 3, 4)).astype(dtype)
    stats = np.asarray(pr.pruned_leaf_statistics(args["x"], args["split_weights"], args["split_bias"], args["gamma"],
                                                 args["is_split"], r, threshold))
    np.testing.assert_allclose(counts, stats * args["leaf_values"], rtol=tol * 10, atol=tol)
    # Every sample's responsibilities sum to 1 (its weight) over the kept leaves.
    np.testing.assert_allclose(counts.sum(), w.sum(), rtol=tol * 10)


def test_em_statistics_edge_cases_and_no_gradient(rng):
    args, labels, weights = em_args(rng, batch=5, trees=2, depth=4)
    args["is_split"][0] = False  # tree 0 is a single leaf
    counts = em(pr.pruned_em_statistics, args, labels, weights, 0.01)
    np.testing.assert_allclose(counts, em_oracle(args, labels, weights, prune_threshold(0.01)), atol=1e-12)
    np.testing.assert_allclose(counts[0, 1:], 0.0)
    for batch in (0, 1):
        c = em(pr.pruned_em_statistics, {**args, "x": args["x"][:batch]}, labels[:batch], weights[:batch], 0.01)
        np.testing.assert_allclose(c, em_oracle({**args, "x": args["x"][:batch]}, labels[:batch], weights[:batch],
                                                prune_threshold(0.01)), atol=1e-12)
    w = tf.Variable(args["split_weights"])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(pr.pruned_em_statistics(args["x"], w, args["split_bias"], args["gamma"],
                                                     args["is_split"], args["leaf_values"], labels))
    assert tape.gradient(loss, w) is None


@pytest.mark.parametrize("reference", [False, True], ids=["compiled", "reference"])
def test_em_statistics_reject_bad_inputs(rng, reference):
    # The compiled op and the keras.ops reference reject the same inputs with the same words.
    args, labels, weights = em_args(rng, batch=6, depth=3)

    def call(labels=labels, weights=weights, **kw):
        with tree_ops.reference_only(reference):
            return em(pr.pruned_em_statistics, {**args, **kw}, labels, weights, 0.01)

    for kw, error, match in (
        ({"labels": np.array([0, 1, 2, 3, 4, 0], "int32")}, ValueError, r"labels must lie in \[0, 4\)"),
        ({"labels": labels.astype("float32") + 0.5}, ValueError, "labels must hold integer ids"),
        ({"labels": labels[:3]}, ValueError, r"labels must have shape \(batch,\)"),
        ({"weights": -weights}, ValueError, r"sample_weight(\[0\] = \S+)? must be finite and >= 0"),
        ({"leaf_values": -args["leaf_values"]}, ValueError, "leaf_values must be finite and >= 0"),
    ):
        with pytest.raises(error, match=match):
            call(**kw)
    experts, _ = make(rng, "experts", depth=3)
    with tree_ops.reference_only(reference), pytest.raises(ValueError, match="oblique splits"):
        pr.pruned_em_statistics(experts["x"], experts["split_weights"], experts["split_bias"], experts["gamma"],
                                experts["is_split"], experts["leaf_values"], np.zeros(23, "int32"))
    if reference:
        return
    # The raw op checks the values too (graph callers bypass the Python checks).
    raw = [args[k] for k in ("x", "split_weights", "split_bias", "gamma", "is_split", "leaf_values")]
    op = _library.module().keras_trees_pruned_em_statistics
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"labels must lie in \[0, 4\).*got labels\[1\] = 9"):
        op(*raw, np.array([0, 9, 0, 0, 0, 0], "int32"), weights, threshold=0.01)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"sample_weight\[0\] = nan"):
        op(*raw, labels, np.full(6, np.nan), threshold=0.01)
    with pytest.raises(tf.errors.InvalidArgumentError, match="leaf_values must be finite"):
        op(*raw[:5], raw[5] * np.nan, labels, weights, threshold=0.01)


@pytest.mark.parametrize("batch", [0, 1])
def test_batch_zero_and_one(rng, batch):
    args, _ = make(rng, batch=batch)
    out, kept, evals, dropped = run(pr.pruned_route, args, 0.01, with_statistics=True)
    assert tuple(out.shape) == (batch, 3, 3) and tuple(kept.shape) == (batch, 3)
    np.testing.assert_allclose(np.asarray(out), oracle(args, prune_threshold(0.01))[0], atol=1e-12)
    x = tf.Variable(args["x"])
    w = tf.Variable(args["split_weights"])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(run(pr.pruned_route, {**args, "x": x, "split_weights": w}, 0.01))
    gx, gw = tape.gradient(loss, [x, w])
    assert tuple(gx.shape) == (batch, 4) and (batch > 0 or np.all(np.asarray(gw) == 0))


def test_root_leaf_and_unbalanced_trees(rng):
    args, _ = make(rng, trees=2, depth=4, p_split=0.5)
    args["is_split"][0] = False  # tree 0 is a single leaf (position 0)
    out, kept, evals, dropped = (np.asarray(v) for v in run(pr.pruned_route, args, 0.01, with_statistics=True))
    np.testing.assert_allclose(out[:, 0], np.broadcast_to(args["leaf_values"][0, 0], out[:, 0].shape))
    assert (kept[:, 0] == 1).all() and (evals[:, 0] == 0).all() and (dropped[:, 0] == 0).all()
    np.testing.assert_allclose(out, oracle(args, prune_threshold(0.01))[0], atol=1e-12)


_DETERMINISM = """
import sys, hashlib
import numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]) if len(sys.argv) > 1 else {threads})
from keras_trees.ops import pruned_routing as pr
from keras_trees.validation.arguments import prune_threshold
from tests.ops.test_pruned_routing import determinism_digest
print("DIGEST", determinism_digest())
"""


def determinism_digest():
    """Hash of forward and backward results on forests whose backward pass
    splits the samples into blocks (2 trees, 1300 samples) or not (9 trees)."""
    import hashlib

    h = hashlib.sha256()
    rng = np.random.default_rng(7)
    for trees, form in ((2, "oblique"), (9, "oblique"), (2, "experts")):
        args, _ = make(rng, form, batch=1300, trees=trees, depth=6, dtype="float32", dim=9)
        names = ["x", "split_weights", "split_bias", "leaf_values", "gamma"]
        variables = {k: tf.Variable(args[k]) for k in names}
        with tf.GradientTape() as tape:
            out = run(pr.pruned_route, {**args, **variables}, 1e-3, with_statistics=True)
            loss = tf.reduce_sum(out[0] * np.linspace(-1, 1, out[0].shape[-1], dtype="float32"))
        grads = tape.gradient(loss, [variables[k] for k in names])
        for t in list(out) + grads:
            h.update(np.ascontiguousarray(np.asarray(t)).tobytes())
    # The E-step (several sample blocks, their partial counts added in order).
    args, labels, weights = em_args(rng, batch=1300, trees=5, depth=6, dtype="float32")
    h.update(np.ascontiguousarray(em(pr.pruned_em_statistics, args, labels, weights, 1e-3)).tobytes())
    return h.hexdigest()


@pytest.mark.slow
def test_bit_identical_across_runs_and_thread_counts(tmp_path):
    first = determinism_digest()
    assert determinism_digest() == first
    out = run_python(_DETERMINISM.format(threads=1), cwd=tmp_path)
    assert f"DIGEST {first}" in out, out


def test_bad_inputs_are_rejected_with_clear_errors(rng):
    args, _ = make(rng, depth=3)
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="prune_threshold must be in"):
            run(pr.pruned_route, args, bad)
    x = args["x"].copy()
    x[0, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        run(pr.pruned_route, {**args, "x": x}, 0.01)
    for name, value, match in (
        ("gamma", args["gamma"][:, :3], "gamma must have shape"),
        ("split_bias", args["split_bias"][:1], "split_bias must have shape"),
        ("is_split", args["is_split"][:, :3], "is_split must have shape"),
        ("leaf_values", args["leaf_values"][:, :7], "leaf_values must have shape"),
        ("x", args["x"][:, :2], "features"),
        ("split_weights", args["split_weights"][:, :6], "2\\*\\*depth - 1"),
    ):
        with pytest.raises(ValueError, match=match):
            run(pr.pruned_route, {**args, name: value}, 0.01)
    experts, _ = make(rng, "experts", depth=3)
    with pytest.raises(ValueError, match="expert_weights"):
        run(pr.pruned_route, {**experts, "expert_weights": None}, 0.01)
    with pytest.raises(ValueError, match="expert_weights must be finite and >= 0"):
        run(pr.pruned_route, {**experts, "expert_weights": -experts["expert_weights"]}, 0.01)
    with pytest.raises(ValueError, match="weights must have shape"):
        pr.pruned_leaf_statistics(args["x"], args["split_weights"], args["split_bias"], args["gamma"],
                                  args["is_split"], np.ones((23, 2, 1)), 0.01)
    # The raw ops check too (graph callers bypass the Python checks).
    module = _library.module()
    raw = [args[k] for k in ("x", "split_weights", "split_bias", "gamma", "is_split", "leaf_values")]
    with pytest.raises(tf.errors.InvalidArgumentError, match="gamma"):
        module.keras_trees_pruned_routing(*raw[:3], raw[3][:, :2], *raw[4:])
    with pytest.raises(tf.errors.InvalidArgumentError, match="threshold must be in"):
        module.keras_trees_pruned_routing(*raw, threshold=1.5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or Inf"):
        module.keras_trees_pruned_routing(x, *raw[1:])
    with pytest.raises(tf.errors.InvalidArgumentError, match="grad_output"):
        module.keras_trees_pruned_routing_grad(np.ones((23, 3, 1)), *raw)
