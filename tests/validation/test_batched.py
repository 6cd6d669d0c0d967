"""keras_trees/validation/batched.py: the checks of one call issued as one.

Inside ``tf.function`` on the compiled kernels the checks are one op
(``KerasTrees>Check``); its decisions must be those of the ``keras.ops``
conditions it replaces (the oracle, which runs under ``reference_only()``,
``jax.jit`` and eagerly), with the same messages, on random valid and invalid
values; the value passes through with its gradient.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_trees import topology
from keras_trees.ops import _library
from keras_trees.validation import batched, tensors
from keras_trees.validation import topology as topology_checks
from tests.test_topology import random_tree

pytestmark = pytest.mark.skipif(not _library.load(), reason="the compiled kernels are not loaded")


def damaged_topologies(rng):
    """Random topologies, about half of them broken in one of the ways the
    rules name."""
    for case in range(40):
        depth = int(rng.integers(1, 5))
        state = random_tree(rng, depth, num_trees=int(rng.integers(1, 4)))
        kind = case % 6
        t = int(rng.integers(state.shape[0]))
        if kind == 1:
            state[t, int(rng.integers(state.shape[1]))] = rng.choice([-1, 3, 7])
        elif kind == 2:
            state[t, -1] = topology.SPLIT  # a split on the last level
        elif kind == 3:
            state[t, 0] = topology.ABSENT  # no root
        elif kind == 4:
            absent = np.flatnonzero(state[t] == topology.ABSENT)
            if len(absent):
                state[t, absent[0]] = topology.LEAF  # present below a non-split
        elif kind == 5:
            leaves = np.flatnonzero(state[t][1:] == topology.LEAF) + 1
            if len(leaves):
                state[t, leaves[0]] = topology.ABSENT  # a split with a missing child
        yield state


def _run(graph_fn, *args):
    try:
        return graph_fn(*args), None
    except tf.errors.InvalidArgumentError as e:
        return None, e.message


def _checked_value(checks):
    """A tf.function running ``checks(value, *tensors)`` through
    require_all on the kernels or, with ``reference``, the keras.ops path."""

    def make(reference):
        @tf.function
        def fn(value, *args):
            with _library.reference_only(reference):
                pending = checks(*args)
                return batched.require_all(pending, output=value)

        return fn

    return make(False), make(True)


def test_one_op_replaces_the_assertions():
    value = tf.ones((3,))
    fn, _ = _checked_value(lambda w, s: [tensors.finite_check(w, "w bad")]
                           + [topology_checks.TopologyCheck(s, "s bad")])
    graph = fn.get_concrete_function(value, tf.ones((4,)), tf.constant(topology.perfect(1, 1, 2))).graph
    kinds = [op.type for op in graph.get_operations()]
    assert kinds.count("KerasTrees>Check") == 1 and "Assert" not in kinds


@pytest.mark.slow
def test_topology_decisions_and_messages_match_the_reference(rng):
    fn, ref = _checked_value(lambda s: [topology_checks.TopologyCheck(s, "node_state is broken")])
    value = tf.constant([1.0, 2.0])
    seen = {True: 0, False: 0}
    for state in damaged_topologies(rng):
        try:
            topology.validate(state)
            valid = True
        except ValueError:
            valid = False
        seen[valid] += 1
        for f in (fn, ref):
            out, message = _run(f, value, tf.constant(state, tf.int32))
            if valid:
                np.testing.assert_array_equal(out, value)
            else:
                assert "node_state is broken" in message, message
    assert seen[True] >= 5 and seen[False] >= 10  # both kinds were exercised


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_finiteness_and_conditions_match_the_reference(rng, dtype):
    fn, ref = _checked_value(lambda a, b, c: [tensors.finite_check(a, "a has NaN"), tensors.finite_check(b, "b has NaN"),
                                              (c > 0, "c must be > 0")])
    value = tf.constant([3.0])
    for _ in range(30):
        a = rng.normal(size=(int(rng.integers(0, 5)), 3)).astype(dtype)
        b = rng.normal(size=(7,)).astype(dtype)
        c = np.asarray(rng.choice([-1.0, 1.0]), dtype)
        if rng.random() < 0.4 and a.size:
            a.flat[int(rng.integers(a.size))] = rng.choice([np.nan, np.inf, -np.inf])
        if rng.random() < 0.3:
            b[int(rng.integers(b.size))] = np.nan
        expected = ("a has NaN" if not np.isfinite(a).all() else "b has NaN" if not np.isfinite(b).all()
                    else "c must be > 0" if c <= 0 else None)
        for f in (fn, ref):
            out, message = _run(f, value, a, b, c)
            if expected is None:
                np.testing.assert_array_equal(out, value)
            elif f is fn:  # the op reports the first failed check, in order
                assert expected in message, message
            else:  # the assertions run in any order: one of the failed checks
                assert message is not None and any(m in message for m in ("a has NaN", "b has NaN", "c must be > 0"))


def test_python_bool_conditions_are_decided_at_trace_time():
    fn, _ = _checked_value(lambda a: [tensors.finite_check(a, "a has NaN"), (False, "never valid")])
    with pytest.raises(ValueError, match="never valid"):
        fn(tf.ones(2), tf.ones(2))


def test_the_value_passes_through_with_its_gradient(rng):
    w = tf.Variable(rng.normal(size=(4,)).astype("float32"))
    x = tf.constant(rng.normal(size=(4,)).astype("float32"))

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            out = batched.require_all([tensors.finite_check(w, "w has NaN")], output=x * w)
            loss = tf.reduce_sum(out ** 2)
        return tape.gradient(loss, w)

    np.testing.assert_allclose(grads(), 2 * x * x * w, rtol=1e-6)
    # finite differences of the same function, through the op
    eps, base = 1e-3, w.numpy()
    numeric = []
    for i in range(4):
        for sign in (1, -1):
            w.assign(base + sign * eps * np.eye(4, dtype="float32")[i])
            numeric.append(float(tf.reduce_sum(batched.require_all(
                [tensors.finite_check(w, "w has NaN")], output=x * w) ** 2)))
    w.assign(base)
    fd = (np.array(numeric[0::2]) - np.array(numeric[1::2])) / (2 * eps)
    np.testing.assert_allclose(grads(), fd, rtol=1e-2, atol=1e-3)
