"""The compiled hinge-forest op against the keras.ops reference, a brute-force
evaluation of Eq. 10 and finite differences."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees.ops import _tf_hinge
from tests.conftest import finite_difference_check

pytestmark = pytest.mark.skipif(
    not tree_ops.custom_ops_available(),
    reason=f"custom ops not loaded: {tree_ops.load_error()}",
)

KINDS = [False, True]  # fern?


def num_vertices(depth, fern):
    return depth if fern else 2**depth - 1


def make_params(rng, batch, features, trees, depth, units, fern, dtype="float64"):
    n = num_vertices(depth, fern)
    x = rng.normal(size=(batch, features)).astype(dtype)
    t = rng.uniform(-1.5, 1.5, size=(trees, n)).astype(dtype)
    f = rng.integers(0, features, size=(trees, n)).astype(np.int32)
    w = rng.normal(size=(trees, 2**depth, units)).astype(dtype)
    return x, t, f, w


def leaf_paths(depth, fern):
    """For every leaf (left to right): its path as [(vertex, direction)], direction
    -1 for a left turn and +1 for a right turn (Eq. 2)."""
    paths = []
    for bits in itertools.product((0, 1), repeat=depth):
        path, v = [], 0
        for level, bit in enumerate(bits):
            vertex = level if fern else v
            path.append((vertex, 1 if bit else -1))
            v = 2 * v + 1 + bit
        paths.append(path)
    return paths


def brute_force_eq10(x, t, f, w, fern):
    """h_m(x) = sum_l w_l min_{(d, v) in l} ReLU(d (x[f_v] - t_v)), looping over
    every sample, tree and leaf in plain numpy."""
    batch, trees, units = x.shape[0], t.shape[0], w.shape[2]
    depth = t.shape[1] if fern else int(np.log2(t.shape[1] + 1))
    out = np.zeros((batch, trees, units))
    for b in range(batch):
        for m in range(trees):
            for leaf, path in enumerate(leaf_paths(depth, fern)):
                membership = min(max(d * (x[b, f[m, v]] - t[m, v]), 0.0) for v, d in path)
                out[b, m] += w[m, leaf] * membership
    return out


def op_and_reference(x, t, f, w, fern, probe, probe_margin):
    """Outputs, traversal and gradients (x, t, w) of sum(y * probe) + sum(r* * probe_margin)."""
    results = []
    for use_op in (True, False):
        tensors = [tf.constant(v) for v in (x, t, w)]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            if use_op:
                y, leaf, margin, vertex = _tf_hinge.hinge_forest_traversal(
                    tensors[0], tensors[1], f, tensors[2], fern
                )
            else:
                y = tree_ops.hinge_forest_reference(tensors[0], tensors[1], f, tensors[2], fern)
                leaf, margin, vertex = tree_ops.hinge_traversal_reference(
                    tensors[0], tensors[1], f, fern
                )
            loss = tf.reduce_sum(y * probe) + tf.reduce_sum(margin * probe_margin)
        grads = tape.gradient(loss, tensors)
        results.append(
            dict(y=y.numpy(), leaf=np.asarray(leaf), margin=np.asarray(margin),
                 vertex=np.asarray(vertex), grads=[g.numpy() for g in grads])
        )
    return results


@pytest.mark.parametrize("fern", KINDS)
@pytest.mark.parametrize("depth", [1, 2, 3, 5, 8, 10])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_op_matches_reference(rng, fern, depth, dtype):
    batch, features, trees, units = 13, 7, 5, 3
    x, t, f, w = make_params(rng, batch, features, trees, depth, units, fern, dtype)
    probe = rng.normal(size=(batch, trees, units)).astype(dtype)
    probe_margin = rng.normal(size=(batch, trees)).astype(dtype)
    op, ref = op_and_reference(x, t, f, w, fern, probe, probe_margin)
    assert op["y"].dtype == np.dtype(dtype) and op["y"].shape == (batch, trees, units)
    np.testing.assert_array_equal(op["leaf"], ref["leaf"])
    np.testing.assert_array_equal(op["vertex"], ref["vertex"])
    np.testing.assert_array_equal(op["margin"], ref["margin"])
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(op["y"], ref["y"], **tol)
    for name, a, r in zip(("x", "thresholds", "leaf_weights"), op["grads"], ref["grads"]):
        np.testing.assert_allclose(a, r, **tol, err_msg=f"gradient to {name}")


@pytest.mark.parametrize("fern", KINDS)
@pytest.mark.parametrize("depth", [1, 2, 4, 6])
def test_op_matches_brute_force_eq10(rng, fern, depth):
    x, t, f, w = make_params(rng, 9, 6, 4, depth, 2, fern)
    expected = brute_force_eq10(x, t, f, w, fern)
    np.testing.assert_allclose(tree_ops.hinge_forest(x, t, f, w, fern=fern).numpy(), expected,
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(tree_ops.hinge_forest_dense(x, t, f, w, fern=fern)),
                               expected, rtol=1e-13, atol=1e-13)
    # Exactly one leaf term is non-zero: w_leaf * |r*| with the traversal's leaf and margin.
    leaf, margin, _ = (np.asarray(a) for a in tree_ops.hinge_forest_traversal(x, t, f, fern=fern))
    picked = w[np.arange(4)[None, :], leaf] * np.abs(margin)[..., None]
    np.testing.assert_allclose(picked, expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("fern", KINDS)
def test_dense_eq10_gradients_match_the_sparse_op(rng, fern):
    """Autodiff through the dense Eq. 10 (min/ReLU over every path) gives Eq. 11-12."""
    x, t, f, w = make_params(rng, 8, 6, 3, 5, 4, fern)
    probe = tf.constant(rng.normal(size=(8, 3, 4)))
    grads = []
    for fn in (tree_ops.hinge_forest, tree_ops.hinge_forest_dense):
        tensors = [tf.constant(v) for v in (x, t, w)]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            loss = tf.reduce_sum(fn(tensors[0], tensors[1], f, tensors[2], fern=fern) * probe)
        grads.append([g.numpy() for g in tape.gradient(loss, tensors)])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fern", KINDS)
@pytest.mark.parametrize("depth", [1, 3, 7])
def test_gradients_match_finite_differences(rng, fern, depth):
    x, t, f, w = make_params(rng, 6, 5, 3, depth, 2, fern)
    probe = tf.constant(rng.normal(size=(6, 3, 2)))
    probe_margin = tf.constant(rng.normal(size=(6, 3)))

    def loss(x_, t_, w_):
        y, _, margin, _ = _tf_hinge.hinge_forest_traversal(x_, t_, f, w_, fern)
        return tf.reduce_sum(y * probe) + tf.reduce_sum(margin * probe_margin)

    checked = finite_difference_check(loss, [x, t, w], num_coords=20, eps=1e-6, rng=rng)
    nonzero = 0
    for i, analytic, numeric in checked:
        assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-8), (
            f"param {i}: autodiff {analytic} vs finite difference {numeric}"
        )
        nonzero += analytic != 0
    assert nonzero > 0


@pytest.mark.parametrize("fern", KINDS)
def test_gradients_are_sparse(rng, fern):
    """One sample: per tree, one threshold (at v*), one leaf row and one input feature."""
    x, t, f, w = make_params(rng, 1, 12, 6, 6, 3, fern)
    tensors = [tf.constant(v) for v in (x, t, w)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        y, leaf, _, vertex = _tf_hinge.hinge_forest_traversal(tensors[0], tensors[1], f, tensors[2], fern)
        loss = tf.reduce_sum(y)
    gx, gt, gw = (g.numpy() for g in tape.gradient(loss, tensors))
    leaf, vertex = leaf.numpy()[0], vertex.numpy()[0]
    for m in range(6):
        assert set(np.flatnonzero(gt[m])) <= {vertex[m]}
        assert set(np.flatnonzero(np.abs(gw[m]).sum(1))) <= {leaf[m]}
    assert set(np.flatnonzero(gx[0])) <= set(f[np.arange(6), vertex].tolist())


@pytest.mark.parametrize("fern", KINDS)
def test_ties_and_zero_margins(fern):
    """r = 0 goes left; equal |r| keeps the vertex nearest the root; |r*| = 0 gives 0."""
    depth = 3
    n = num_vertices(depth, fern)
    x = np.array([[0.0, 1.0, -1.0, 0.5]])
    f = np.zeros((1, n), dtype=np.int32)
    t = np.zeros((1, n))
    # Root compares x0 = 0 with 0: r = 0, goes left; every later vertex also has r = 0.
    w = np.arange(2**depth, dtype=float).reshape(1, 2**depth, 1) + 1.0
    y, leaf, margin, vertex = (a.numpy() for a in _tf_hinge.hinge_forest_traversal(x, t, f, w, fern))
    assert leaf[0, 0] == 0 and vertex[0, 0] == 0 and margin[0, 0] == 0.0 and y[0, 0, 0] == 0.0
    # Margins +1, -1, +0.5 ... : |r| ties between feature 1 and 2 keep the first.
    f = np.array([[1, 2, 2, 3, 3, 3, 3]] if not fern else [[1, 2, 3]], dtype=np.int32)
    y, leaf, margin, vertex = (a.numpy() for a in _tf_hinge.hinge_forest_traversal(x, t, f, w, fern))
    ref_leaf, ref_margin, ref_vertex = (
        np.asarray(a) for a in tree_ops.hinge_traversal_reference(x, t, f, fern)
    )
    assert (leaf[0, 0], margin[0, 0]) == (ref_leaf[0, 0], ref_margin[0, 0])
    assert vertex[0, 0] == ref_vertex[0, 0]
    # Path: right (x1 = 1 > 0), left (x2 = -1), right (x3 = 0.5): leaf 0b101 = 5; r* = 0.5.
    assert leaf[0, 0] == 5 and margin[0, 0] == 0.5
    assert vertex[0, 0] == (2 if fern else 5)
    np.testing.assert_allclose(y[0, 0], w[0, 5] * 0.5)
    np.testing.assert_allclose(y, np.asarray(tree_ops.hinge_forest_dense(x, t, f, w, fern=fern)))


@pytest.mark.parametrize("batch", [0, 1, 2, 300])
def test_batch_sizes(rng, batch):
    x, t, f, w = make_params(rng, batch, 4, 3, 4, 2, False)
    probe = rng.normal(size=(batch, 3, 2))
    op, ref = op_and_reference(x, t, f, w, False, probe, np.zeros((batch, 3)))
    assert op["y"].shape == (batch, 3, 2)
    np.testing.assert_allclose(op["y"], ref["y"], atol=1e-12)
    for a, r in zip(op["grads"], ref["grads"]):
        assert a.shape == r.shape
        np.testing.assert_allclose(a, r, atol=1e-12)


@pytest.mark.parametrize("fern", KINDS)
def test_results_are_deterministic(rng, fern):
    x, t, f, w = (v for v in make_params(rng, 500, 30, 40, 8, 5, fern, "float32"))
    x, t, w = tf.constant(x), tf.constant(t), tf.constant(w)
    runs = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch([x, t, w])
            y = tree_ops.hinge_forest(x, t, f, w, fern=fern)
            loss = tf.reduce_sum(y * y)
        runs.append([y.numpy()] + [g.numpy() for g in tape.gradient(loss, [x, t, w])])
    for other in runs[1:]:
        for a, c in zip(runs[0], other):
            np.testing.assert_array_equal(a, c)


def test_reference_only_context_and_float16(rng):
    x, t, f, w = make_params(rng, 10, 5, 3, 4, 2, False, "float32")
    y_op = tree_ops.hinge_forest(x, t, f, w).numpy()
    with tree_ops.reference_only():
        assert not tree_ops.custom_ops_available()
        y_ref = np.asarray(tree_ops.hinge_forest(x, t, f, w))
    np.testing.assert_allclose(y_op, y_ref, rtol=1e-6)
    y16 = tree_ops.hinge_forest(x.astype("float16"), t.astype("float16"), f, w.astype("float16"))
    assert y16.dtype == tf.float16


RAW_ARGS = dict(
    x=np.ones((5, 4)), t=np.zeros((2, 7)), f=np.zeros((2, 7), np.int32), w=np.ones((2, 8, 3)),
    fern=False,
)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(x=np.ones((2, 5, 4))), "x must have rank 2"),
        (dict(t=np.zeros((2, 6)), f=np.zeros((2, 6), np.int32)), "2\\*\\*depth - 1"),
        (dict(t=np.zeros((2, 0)), f=np.zeros((2, 0), np.int32)), "2\\*\\*depth - 1"),
        (dict(fern=True, t=np.zeros((2, 0)), f=np.zeros((2, 0), np.int32)), "must be in \\[1, 24\\]"),
        (dict(fern=True, t=np.zeros((2, 25)), f=np.zeros((2, 25), np.int32)), "must be in \\[1, 24\\]"),
        (dict(fern=True), "leaf_weights must have shape \\[2, 128, units\\] for 2 ferns of depth 7"),
        (dict(w=np.ones((2, 7, 3))), "leaf_weights must have shape \\[2, 8, units\\]"),
        (dict(w=np.ones((3, 8, 3))), "leaf_weights must have shape"),
        (dict(t=np.zeros((2, 3))), "same shape"),
        (dict(f=np.full((2, 7), 4, np.int32)), "feature_indices\\[0, 0\\] = 4 is out of range: x has 4"),
        (dict(f=np.full((2, 7), -1, np.int32)), "out of range"),
        (dict(x=np.full((5, 4), np.nan)), "NaN or Inf"),
        (dict(x=np.array([[0, 0, np.inf, 0]] * 5)), "NaN or Inf"),
        (dict(t=np.full((2, 7), np.nan)), "thresholds contain NaN"),
    ],
)
def test_raw_op_rejects_bad_input(change, message):
    args = dict(RAW_ARGS)
    args.update(change)
    module = tree_ops._library.module()
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        module.keras_trees_hinge_forest(args["x"], args["t"], args["f"], args["w"], fern=args["fern"])
    # The same call with valid arguments runs.
    assert module.keras_trees_hinge_forest(
        RAW_ARGS["x"], RAW_ARGS["t"], RAW_ARGS["f"], RAW_ARGS["w"]
    )[0].shape == (5, 2, 3)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(x=np.ones((2, 5, 4))), ValueError, "x must have rank 2"),
        (dict(t=np.zeros((2, 6)), f=np.zeros((2, 6), np.int32)), ValueError, "2\\*\\*depth - 1"),
        (dict(t=np.zeros((2, 0)), f=np.zeros((2, 0), np.int32)), ValueError, "depth must be in"),
        (dict(fern=True, t=np.zeros((2, 30)), f=np.zeros((2, 30), np.int32)), ValueError,
         "must be in \\[1, 24\\]"),
        (dict(f=np.zeros((2, 3), np.int32)), ValueError, "feature_indices must have the shape"),
        (dict(w=np.ones((2, 4, 3))), ValueError, "leaf_weights must have shape \\(2, 8, units\\)"),
        (dict(f=np.full((2, 7), 9, np.int32)), (ValueError, tf.errors.InvalidArgumentError),
         "out of range"),
        (dict(x=np.full((5, 4), np.nan)), (ValueError, tf.errors.InvalidArgumentError), "NaN or Inf"),
    ],
)
@pytest.mark.parametrize("reference", [False, True])
def test_python_entry_point_rejects_bad_input(change, error, message, reference):
    args = dict(RAW_ARGS)
    args.update(change)
    with tree_ops.reference_only(reference):
        with pytest.raises(error, match=message):
            tree_ops.hinge_forest(args["x"], args["t"], args["f"], args["w"], fern=args["fern"])


def test_grad_op_rejects_foreign_traversal(rng):
    x, t, f, w = make_params(rng, 4, 3, 2, 3, 2, False)
    module = tree_ops._library.module()
    good = dict(leaf=np.zeros((4, 2), np.int32), vertex=np.zeros((4, 2), np.int32))
    for name, bad in (("leaf", 8), ("vertex", 7), ("leaf", -1)):
        args = dict(good)
        args[name] = np.full((4, 2), bad, np.int32)
        with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
            module.keras_trees_hinge_forest_grad(
                np.ones((4, 2, 2)), np.zeros((4, 2)), x, f, w, args["leaf"], np.ones((4, 2)),
                args["vertex"],
            )
    with pytest.raises(tf.errors.InvalidArgumentError, match="grad_output must have shape"):
        module.keras_trees_hinge_forest_grad(
            np.ones((4, 2, 3)), np.zeros((4, 2)), x, f, w, good["leaf"], np.ones((4, 2)),
            good["vertex"],
        )
