"""Several runtime checks of one layer call as one check where that is cheaper.

:func:`keras_trees.validation.tensors.require` makes one check. Inside
``jax.jit`` each check is a ``jax.debug.callback``, a trip to the host that
costs about 0.1-0.2 ms of CPU per call: several of them per layer call made
the fast layers (hinge forests, a tree ensemble of depth 6) 20-80% slower
under JAX. :func:`require_all` makes a list of checks with at most one such
trip, taken only when a check fails (the callback sits in the false branch of
a ``lax.cond``); everywhere else it is :func:`~keras_trees.validation.tensors.require`
once per check (eager values, ``tf.debugging.Assert`` in TensorFlow graphs,
which costs microseconds). The messages are the same on every path.

:func:`finite_variables` is :func:`keras_trees.validation.variables.finite`
for several variables of one layer, with the same message.
"""

import numpy as np
from keras import ops

from keras_trees.validation import tensors, variables


def _raise_first(oks, messages, error):
    for ok, message in zip(np.asarray(oks).reshape(-1), messages):
        if not bool(ok):
            raise error(message)


def require_all(checks, error=ValueError):
    """``checks``: ``[(ok, message), ...]`` with ``ok`` a scalar boolean (tensor
    or Python bool). Fails with the message of the first failed check."""
    checks = list(checks)
    if not checks:
        return
    traced = [ok for ok, _ in checks if tensors._jax_traced(ok)]
    if not traced:
        for ok, message in checks:
            tensors.require(ok, message, error)
        return
    import jax
    import jax.numpy as jnp

    oks = jnp.stack([jnp.asarray(ok, dtype=bool).reshape(()) for ok, _ in checks])
    messages = tuple(message for _, message in checks)

    def fail(oks):
        jax.debug.callback(_raise_first, oks, messages, error)

    jax.lax.cond(jnp.all(oks), lambda oks: None, fail, oks)


def reached_leaves(layer, variable, output):
    """``(ok, message)`` for :func:`require_all`: the layer's ``output`` is finite.

    A tree layer's output is a sum of the leaf values its samples reach; x and
    the splits having passed their checks, a NaN or Inf there comes from a
    reached leaf of ``variable``. This costs one pass over the output instead of
    one over every leaf (for a hinge forest of depth 10 the leaves are 10x the
    work of the kernel itself). A leaf that no sample of the batch reaches
    does not change the output; it is rejected when the file is loaded.
    """
    return (
        ops.all(ops.isfinite(output)),
        f"{variables.label(layer, variable)} contains NaN or Inf (a leaf this batch reaches; "
        "the output is NaN or Inf), or x does, or the output overflowed",
    )


def finite_variables(layer, variables_to_check, more=()):
    """Fails (every path, at most one host trip under ``jax.jit``) unless every
    floating variable in ``variables_to_check`` is finite; the message names the
    layer and the variable, as :func:`keras_trees.validation.variables.finite`.
    ``more``: further ``(ok, message)`` checks made in the same trip."""
    checks = []
    for v in variables_to_check:
        value = v.value if hasattr(v, "value") else v
        if tensors.is_keras_symbolic(value) or not tensors._is_floating(value):
            continue
        name = variables._short_name(v)
        checks.append((
            ops.all(ops.isfinite(value)),
            f"{variables.label(layer, name)} contains NaN or Inf; did training diverge, or was a NaN "
            "assigned or loaded?",
        ))
    require_all(checks + list(more))
