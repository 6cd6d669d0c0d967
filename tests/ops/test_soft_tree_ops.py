"""The compiled soft-tree-ensemble op against the keras.ops reference and finite differences."""

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees.ops import _tf_soft_tree
from tests.conftest import finite_difference_check, run_python

pytestmark = pytest.mark.skipif(
    not tree_ops.custom_ops_available(),
    reason=f"custom ops not loaded: {tree_ops.load_error()}",
)


def make_params(rng, batch, dim, trees, depth, units, dtype, scale=1.0):
    n = 2**depth - 1
    x = rng.normal(size=(batch, dim)).astype(dtype)
    w = (rng.normal(size=(trees, n, dim)) * scale / np.sqrt(dim)).astype(dtype)
    b = (rng.normal(size=(trees, n)) * 0.3).astype(dtype)
    o = rng.normal(size=(trees, n + 1, units)).astype(dtype)
    return x, w, b, o


def both_paths(x, w, b, o, gamma, probe):
    """Outputs and gradients (x, w, b, o) of sum(y * probe) by the op and by the reference."""
    results = []
    for fn in (tree_ops.soft_tree_ensemble, tree_ops.soft_tree_ensemble_reference):
        tensors = [tf.constant(v) for v in (x, w, b, o)]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            y = fn(*tensors, gamma)
            loss = tf.reduce_sum(y * probe)
        grads = tape.gradient(loss, tensors)
        results.append((y.numpy(), [g.numpy() for g in grads]))
    return results


@pytest.mark.parametrize("depth", list(range(1, 11)))
@pytest.mark.parametrize("gamma", [1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_and_gradients_match_reference(rng, depth, gamma, dtype):
    batch, dim, trees, units = 9, 6, 3, 4
    x, w, b, o = make_params(rng, batch, dim, trees, depth, units, dtype)
    probe = rng.normal(size=(batch, units)).astype(dtype)
    (y_op, g_op), (y_ref, g_ref) = both_paths(x, w, b, o, gamma, probe)
    assert y_op.dtype == np.dtype(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-9, atol=1e-9)
    if dtype == "float32" and gamma < 0.01:
        # 1/gamma amplifies float32 round-off in the split values.
        tol = dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(y_op, y_ref, **tol)
    for name, a, r in zip(("x", "node_weights", "node_bias", "leaf_weights"), g_op, g_ref):
        scale = max(1.0, np.abs(r).max())
        np.testing.assert_allclose(a / scale, r / scale, **tol, err_msg=f"gradient to {name}")


@pytest.mark.parametrize("depth", [1, 2, 4, 7, 10])
@pytest.mark.parametrize("gamma", [1e-3, 1.0, 10.0])
def test_gradients_match_finite_differences(rng, depth, gamma):
    batch, dim, trees, units = 5, 4, 2, 3
    x, w, b, o = make_params(rng, batch, dim, trees, depth, units, "float64")
    probe = tf.constant(rng.normal(size=(batch, units)))

    def loss(x_, w_, b_, o_):
        return tf.reduce_sum(tree_ops.soft_tree_ensemble(x_, w_, b_, o_, gamma) * probe)

    eps = min(1e-6, gamma * 1e-4)
    for i, analytic, numeric in finite_difference_check(loss, [x, w, b, o], eps=eps, rng=rng):
        assert analytic == pytest.approx(numeric, rel=1e-4, abs=1e-6 / gamma), (
            f"param {i}: autodiff {analytic} vs finite difference {numeric}"
        )


@pytest.mark.parametrize("batch", [0, 1, 2, 257])
def test_batch_sizes(rng, batch):
    x, w, b, o = make_params(rng, batch, 5, 4, 5, 3, "float64")
    probe = rng.normal(size=(batch, 3))
    (y_op, g_op), (y_ref, g_ref) = both_paths(x, w, b, o, 1.0, probe)
    assert y_op.shape == (batch, 3)
    np.testing.assert_allclose(y_op, y_ref, atol=1e-10)
    for a, r in zip(g_op, g_ref):
        assert a.shape == r.shape
        np.testing.assert_allclose(a, r, atol=1e-9)


def test_trace_records_the_fractional_tree(rng):
    """The trace holds exactly the reachable leaves and |F| = U - 1 fractional nodes."""
    x, w, b, o = make_params(rng, 20, 6, 3, 6, 2, "float64", scale=3.0)
    _, offsets, index, value = _tf_soft_tree.soft_tree_ensemble_trace(x, w, b, o, 0.5)
    offsets, index, value = offsets.numpy(), index.numpy(), value.numpy()
    probs = tree_ops.soft_tree_leaf_probabilities(x, w, b, 0.5).numpy()
    for s in range(20):
        for m in range(3):
            rec = slice(offsets[s * 3 + m], offsets[s * 3 + m + 1])
            leaves = -index[rec][index[rec] < 0] - 1
            np.testing.assert_array_equal(np.sort(leaves), np.flatnonzero(probs[s, m] > 0))
            np.testing.assert_allclose(value[rec][index[rec] < 0, 0], probs[s, m, leaves], atol=1e-12)
            assert (index[rec] >= 0).sum() == len(leaves) - 1
    # Conditional computation actually happens here: far fewer than 64 leaves.
    assert (index < 0).sum() / 60 < 16


def test_gradients_are_zero_outside_the_fractional_tree(rng):
    x, w, b, o = make_params(rng, 1, 6, 1, 6, 2, "float64", scale=3.0)
    _, _, index, _ = _tf_soft_tree.soft_tree_ensemble_trace(x, w, b, o, 0.5)
    fractional = set(index.numpy()[index.numpy() >= 0].tolist())
    tensors = [tf.constant(v) for v in (x, w, b, o)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        loss = tf.reduce_sum(tree_ops.soft_tree_ensemble(*tensors, 0.5))
    gw = tape.gradient(loss, tensors[1]).numpy()[0]
    nonzero = set(np.flatnonzero(np.abs(gw).sum(1) > 0).tolist())
    assert nonzero <= fractional


def test_inference_mode_gradient_recomputes_trace(rng):
    x, w, b, o = (tf.constant(v) for v in make_params(rng, 8, 5, 2, 4, 3, "float64"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y_train = tree_ops.soft_tree_ensemble(x, w, b, o, 1.0, training=True)
        y_infer = tree_ops.soft_tree_ensemble(x, w, b, o, 1.0, training=False)
    np.testing.assert_array_equal(y_train.numpy(), y_infer.numpy())
    np.testing.assert_allclose(tape.gradient(y_train, x).numpy(), tape.gradient(y_infer, x).numpy())


def test_results_are_deterministic(rng):
    x, w, b, o = (tf.constant(v) for v in make_params(rng, 512, 16, 10, 8, 5, "float32"))
    runs = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch([x, w, b, o])
            y = tree_ops.soft_tree_ensemble(x, w, b, o, 1.0)
        runs.append([y.numpy()] + [g.numpy() for g in tape.gradient(y, [x, w, b, o])])
    for other in runs[1:]:
        for a, c in zip(runs[0], other):
            np.testing.assert_array_equal(a, c)


def test_mean_reachable_leaves_matches_reference(rng):
    x, w, b, o = make_params(rng, 50, 8, 4, 7, 1, "float32", scale=2.0)
    op = float(tree_ops.mean_reachable_leaves(x, w, b, 0.7))
    with tree_ops.reference_only():
        ref = float(tree_ops.mean_reachable_leaves(x, w, b, 0.7))
    assert op == pytest.approx(ref)
    assert 1.0 <= op < 128


def test_smooth_step_values():
    t = np.array([-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0])
    s = np.asarray(tree_ops.smooth_step(t, 1.0))
    np.testing.assert_allclose(s, [0, 0, 0.15625, 0.5, 0.84375, 1, 1])


def test_leaf_probabilities_sum_to_one(rng):
    s = rng.uniform(size=(4, 3, 31))
    p = np.asarray(tree_ops.leaf_probabilities(s))
    assert p.shape == (4, 3, 32)
    np.testing.assert_allclose(p.sum(-1), 1.0)
    # Leaf 0 is the all-left path through nodes 0, 1, 3, 7, 15.
    np.testing.assert_allclose(p[..., 0], np.prod(s[..., [0, 1, 3, 7, 15]], axis=-1))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(x=np.ones((2, 3, 4))), "rank 2"),
        (dict(w=np.ones((2, 6, 4))), "2\\*\\*depth - 1"),
        (dict(x=np.ones((5, 7))), "input dimension|input_dim"),
        (dict(o=np.ones((2, 7, 3))), "leaf_weights"),
        (dict(gamma=0.0), "gamma"),
        (dict(gamma=-1.0), "gamma"),
        (dict(gamma=float("nan")), "gamma"),
        (dict(x=np.full((5, 4), np.nan)), "NaN or Inf"),
        (dict(x=np.array([[0, 0, np.inf, 0]] * 5)), "NaN or Inf"),
    ],
)
def test_raw_op_rejects_bad_input(change, message):
    args = dict(x=np.ones((5, 4)), w=np.ones((2, 7, 4)), b=np.zeros((2, 7)), o=np.ones((2, 8, 3)), gamma=1.0)
    args.update(change)
    module = tree_ops._library.module()
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        module.keras_trees_soft_tree_ensemble(
            args["x"], args["w"], args["b"], args["o"], np.float64(args["gamma"])
        )


def test_grad_op_rejects_a_foreign_trace(rng):
    x, w, b, o = make_params(rng, 4, 3, 2, 3, 2, "float64")
    module = tree_ops._library.module()
    with pytest.raises(tf.errors.InvalidArgumentError, match="trace"):
        module.keras_trees_soft_tree_ensemble_grad(
            np.ones((4, 2)), x, w, o, np.array([0, 1, 2], dtype=np.int64),
            np.array([5, -1], dtype=np.int32), np.zeros((2, 2)),
        )


_OUT_OF_MEMORY = """
import resource
import numpy as np
from keras_trees.ops import soft_tree_ensemble
rng = np.random.default_rng(0)
w = (rng.normal(size=(64, 4095, 4)) * 1e-3).astype("float32")  # 64 trees of depth 12, all reachable
leaf = rng.normal(size=(64, 4096, 1)).astype("float32")
x = rng.normal(size=(4096, 4)).astype("float32")
np.asarray(soft_tree_ensemble(x[:2], w, None, leaf, 1.0))  # thread pools started
vm = int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize")][0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), resource.RLIM_INFINITY))
try:
    np.asarray(soft_tree_ensemble(x, w, None, leaf, 1000.0))  # its trace needs about 50 GB
    print("NO ERROR")
except Exception as e:
    print("RAISED", type(e).__name__, e)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("resource"), "RLIMIT_AS"), reason="needs RLIMIT_AS")
def test_out_of_memory_raises_instead_of_aborting(tmp_path):
    # The kernel's trace lives in std::vector: a failed allocation (here under
    # an address-space limit) raises ResourceExhaustedError, it does not abort.
    out = run_python(_OUT_OF_MEMORY, cwd=tmp_path)
    assert "RAISED ResourceExhaustedError" in out and "out of memory" in out, out


def test_raw_backward_op_refuses_a_trace_of_other_node_weights(rng):
    """The traced backward op reads the trace of a forward call: node weights
    of another depth (same trees and features) do not fit it, and it says so."""
    from keras_trees.ops import _library

    lib = _library.module()
    x = tf.constant(rng.normal(size=(6, 3)), tf.float64)
    w3 = tf.constant(rng.normal(size=(2, 7, 3)), tf.float64)
    o3 = tf.constant(rng.normal(size=(2, 8, 1)), tf.float64)
    out, offsets, index, value = lib.keras_trees_soft_tree_ensemble(x, w3, tf.zeros((2, 7), tf.float64), o3,
                                                                    tf.constant(4.0, tf.float64), with_trace=True)
    grad = tf.ones_like(out)
    gx, _, _, _ = lib.keras_trees_soft_tree_ensemble_grad(grad, x, w3, o3, offsets, index, value)
    assert np.all(np.isfinite(gx.numpy()))
    assert int(tf.reduce_sum(tf.cast(index >= 0, tf.int32))) > 0, "no fractional node: the check is not exercised"
    w4 = tf.constant(rng.normal(size=(2, 15, 3)), tf.float64)
    o4 = tf.constant(rng.normal(size=(2, 16, 1)), tf.float64)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"trace_index is not a trace of trees of depth 4"):
        lib.keras_trees_soft_tree_ensemble_grad(grad, x, w4, o4, offsets, index, value)
