"""Generators and runners shared by the property tests (written once).

* ``props(n)``: the hypothesis settings of every property: a fixed number of
  examples, derandomized (the same examples on every run and machine), no
  deadline (first calls compile or trace) and no example database.
* Strategies for the shapes and dtypes every op and layer accepts: batches
  (0, 1 and more), float dtypes, feature dtypes (ints included), depths,
  topologies (``node_state``), and a NumPy generator per example (``rngs``),
  so arrays are drawn from one integer seed that hypothesis prints.
* Values on a dyadic grid (``grid``): sums of products of such numbers are
  exact in float32 and float64 whatever the order, so the compiled kernels and
  the ``keras.ops`` references see the same split values (ties at 0 included,
  which checks the shared rule "right iff > 0") instead of differing by one ulp.
* Corruptions (``with_nan``, ``BAD_INDEX_VALUES``, ``broken_node_state``): the
  invalid inputs every op and layer must reject naming the argument.
* Paths: ``compiled(fn)`` (``tf.function`` / ``jax.jit``), ``precision`` (JAX
  x64 for float64), ``expect_rejection`` (the error kinds of contract item 8:
  ValueError/TypeError eagerly and at trace time, the backend's runtime error
  carrying the message inside a compiled function).
"""

import os
import re

import keras
import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from keras_trees import topology

from tests._backend import BACKEND, compiled, precision, runtime_errors  # noqa: F401 (used as S.*)


FAST = os.environ.get("KERAS_TREES_TEST_TIER") == "fast"


def props(max_examples):
    """Settings of a property: ``max_examples`` fixed examples, same on every run
    (one in the fast tier, ``python -m tests --fast``)."""
    return settings(
        max_examples=1 if FAST else max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        # No shrinking: a failing property reports its first counterexample at
        # once (shrinking a traced op took minutes), so the run stays in budget.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    )


# ---------------------------------------------------------------- shapes and dtypes

seeds = st.integers(0, 2**31 - 1)
batches = st.sampled_from([0, 1, 2, 5, 16])
nonempty_batches = st.sampled_from([1, 3, 16])
float_dtypes = st.sampled_from(["float32", "float64"])
# x may be any real dtype: integers are cast to floating (contract item 1).
x_dtypes = st.sampled_from(["float32", "float64", "int32", "int64"])
features = st.integers(1, 8)
trees = st.integers(1, 4)
units = st.integers(1, 3)
classes = st.integers(2, 4)
prune_thresholds = st.sampled_from([0.0, 1e-4, 0.05])


def rngs(seed):
    return np.random.default_rng(seed)


def grid(rng, shape, dtype="float32", low=-8, high=8, scale=4.0):
    """Values ``k / scale`` with integer ``k`` in ``[low, high]``: exact in any float dtype."""
    return (rng.integers(low, high + 1, size=shape) / scale).astype(dtype)


def features_array(rng, batch, dim, dtype):
    """Feature rows ``(batch, dim)`` of ``dtype`` (integer dtypes: small whole numbers)."""
    if "int" in dtype:
        return rng.integers(-3, 4, size=(batch, dim)).astype(dtype)
    return grid(rng, (batch, dim), dtype)


def random_node_state(rng, num_trees, max_depth, p_split=0.7):
    """A valid random forest topology ``(num_trees, 2**(max_depth + 1) - 1)``:
    every root present, leaves split with probability ``p_split`` down to ``max_depth``."""
    state = topology.root_leaf(num_trees, max_depth)
    for t in range(num_trees):
        todo = [0]
        while todo:
            node = todo.pop()
            if topology.position_depth(node) < max_depth and rng.random() < p_split:
                state = topology.split_leaf(state, t, node)
                todo += [2 * node + 1, 2 * node + 2]
    return state


# ---------------------------------------------------------------- corruptions

NON_FINITE = [np.nan, np.inf, -np.inf]


def with_nan(rng, array, value=None):
    """A copy of the floating ``array`` with one random entry NaN, +Inf or -Inf."""
    out = np.array(array, copy=True)
    assert out.size, "cannot corrupt an empty array"
    value = NON_FINITE[rng.integers(len(NON_FINITE))] if value is None else value
    out.reshape(-1)[rng.integers(out.size)] = value
    return out


def with_entry(rng, array, value, dtype=None):
    """A copy of ``array`` (as ``dtype``) with one random entry set to ``value``."""
    out = np.array(array, dtype=dtype or np.asarray(array).dtype, copy=True)
    out.reshape(-1)[rng.integers(out.size)] = value
    return out


def bad_indices(rng, ids, upper, how):
    """Index-like ``ids`` (feature indices, labels) made invalid (contract item 4):
    negative, ``upper`` (one past the end), int64 ``2**32 + 1`` (wraps to 1 when
    cast to int32) or a fractional float."""
    ids = np.asarray(ids)
    if how == "negative":
        return with_entry(rng, ids, -1)
    if how == "too_large":
        return with_entry(rng, ids, upper)
    if how == "int64_wraps":
        return with_entry(rng, ids, 2**32 + 1, dtype="int64")
    if how == "fractional":
        return with_entry(rng, ids.astype("float32"), 0.5)
    raise ValueError(how)


BAD_INDEX_KINDS = ["negative", "too_large", "int64_wraps", "fractional"]


def broken_node_state(rng, state, how):
    """A copy of a valid topology broken one way (contract item 5)."""
    state = np.array(state, copy=True)
    t = rng.integers(state.shape[0])
    positions = state.shape[1]
    internal = topology.num_internal(topology.max_depth_from_positions(positions))
    if how == "bad_value":  # outside the enum {ABSENT, LEAF, SPLIT}
        state[t, rng.integers(positions)] = (7, -1, 3)[rng.integers(3)]
    elif how == "split_on_last_level":
        state[t, internal + rng.integers(positions - internal)] = topology.SPLIT
    elif how == "no_root" or (how == "inconsistent" and rng.random() < 0.3):
        state[t, :] = topology.ABSENT
    elif how in ("orphan", "inconsistent"):  # a leaf under a position that is not a split
        leaves = np.flatnonzero(state[t] == topology.LEAF)
        leaf = leaves[rng.integers(leaves.size)]
        if 2 * leaf + 1 < positions:
            state[t, 2 * leaf + 1] = topology.LEAF  # a child below a leaf
        else:
            state[t, topology.parent(leaf)] = topology.LEAF  # its parent no longer splits
    else:
        raise ValueError(how)
    return state


# "bad_value": 7, -1 or 3 somewhere; "inconsistent": no root, or a position
# present under a non-split (or a split's child missing).
BROKEN_TOPOLOGIES = ["bad_value", "split_on_last_level", "inconsistent"]


# ---------------------------------------------------------------- paths and errors


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def core_message(message):
    """The error's own words: without terminal colours and without the
    "Arguments received by Layer.call(): inputs=..." epilogue Keras appends
    (which would name ``inputs`` in every error raised inside a layer)."""
    return _ANSI.sub("", message).split("\n\nArguments received by")[0]


def names(message, name):
    """Whether ``message`` names the argument ``name`` (a whole word)."""
    message = core_message(message)
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


class Rejected(AssertionError):
    pass


def expect_rejection(call, arg_names, graph=False, also=None):
    """Runs ``call()`` and checks it is rejected naming one of ``arg_names``.

    Eager (``graph=False``): ``ValueError`` or ``TypeError``. Compiled
    (``graph=True``): also the backend's runtime error (values are unknown at
    trace time; contract item 8). ``also``: a further substring the message
    must contain (e.g. ``"NaN or Inf"``). Returns the exception.
    """
    arg_names = [arg_names] if isinstance(arg_names, str) else list(arg_names)
    kinds = (ValueError, TypeError) + (runtime_errors() if graph else ())
    try:
        result = call()
        _materialize(result)
    except kinds as exc:
        message = str(exc)
        assert any(names(message, n) for n in arg_names), (
            f"{type(exc).__name__} does not name {' or '.join(arg_names)}: {core_message(message)[:400]}")
        if also:
            assert also in core_message(message), (
                f"{type(exc).__name__} does not say {also!r}: {core_message(message)[:400]}")
        return exc
    except Exception as exc:  # noqa: BLE001 - any other kind is a failure of the property
        raise Rejected(f"expected ValueError/TypeError naming {arg_names}, got {type(exc).__name__}: "
                       f"{core_message(str(exc))[:400]}") from exc
    raise Rejected(f"accepted silently (expected a ValueError/TypeError naming {' or '.join(arg_names)})")


def _materialize(result):
    """Forces the values (JAX dispatches asynchronously: errors surface on read)."""
    for leaf in _leaves(result):
        np.asarray(keras.ops.convert_to_numpy(leaf))


def _leaves(result):
    if isinstance(result, (list, tuple)):
        for r in result:
            yield from _leaves(result=r)
    elif isinstance(result, dict):
        for r in result.values():
            yield from _leaves(result=r)
    elif result is not None:
        yield result


def to_numpy(result):
    """Nested outputs as NumPy arrays (tuples stay tuples)."""
    if isinstance(result, (list, tuple)):
        return tuple(to_numpy(r) for r in result)
    return np.asarray(keras.ops.convert_to_numpy(result))


def tolerance(dtype):
    return {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-11)}.get(str(dtype), (1e-4, 1e-5))


def assert_same(actual, expected, dtype, what=""):
    """Nested outputs equal: integer outputs exactly, floating ones to ``dtype``'s tolerance."""
    actual, expected = to_numpy(actual), to_numpy(expected)
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), (what, len(actual), len(expected))
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, dtype, f"{what}[{i}]")
        return
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if expected.dtype.kind in "iub":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        rtol, atol = tolerance(dtype)
        np.testing.assert_allclose(actual.astype("float64"), expected.astype("float64"), rtol=rtol, atol=atol,
                                   err_msg=what)
