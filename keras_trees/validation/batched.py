"""Several runtime checks of one call issued as one, that the call's work depends on.

:func:`keras_trees.validation.tensors.require` makes one check. A layer call
makes a dozen (``x`` and every variable finite, a valid topology): issued one
by one they would cost a dispatch each under ``jax.jit``. :func:`checked` runs
any checks of :mod:`keras_trees.validation`, gathers those that can only be
decided when a compiled graph runs (:func:`~keras_trees.validation.tensors.collected`)
and hands them to :func:`require_all`, which returns the tensor the caller goes
on with computed after them:

- eager values (TensorFlow, JAX, PyTorch, NumPy): each check raised at once;
- ``tf.function``: ``tf.debugging.Assert`` ops and control dependencies;
- ``jax.jit``: one XLA custom call of the compiled library (``KerasTreesCheck``,
  a few microseconds) that the tensor depends on; the failure arrives as a
  ``JaxRuntimeError`` carrying the message when the call's results are read.

The messages are the same on every path. :func:`finite_variables` is
:func:`keras_trees.validation.variables.finite` for several variables of one
layer, with the same message.
"""

from keras import ops

from keras_trees.validation import tensors, variables


def require_all(checks, error=ValueError, output=None):
    """``checks``: ``[(ok, message), ...]`` or ``[(ok, message, error), ...]``
    with ``ok`` a scalar boolean (tensor or Python bool). Fails with the
    message of the first failed check.

    Given ``output`` (the tensor the caller goes on with), returns it computed
    after the checks inside compiled graphs (``tf.function``: control
    dependencies on the assertions; ``jax.jit``: a data dependency on one
    check call, see :func:`keras_trees.validation.tensors.jax_check`): the
    checks' message is the one users see (a kernel reading the same bad value
    does not fail first in its own words), nothing computed from a rejected
    value runs, and under JAX the checks cost microseconds. Without it they
    are side effects."""
    checks = [(c[0], c[1], c[2] if len(c) > 2 else error) for c in checks]
    if not checks:
        return output
    if any(tensors._jax_traced(ok) for ok, _, _ in checks):
        return tensors.jax_check([ok for ok, _, _ in checks], [m for _, m, _ in checks], checks[0][2],
                                 output=output)
    asserts = [tensors.require(ok, message, err) for ok, message, err in checks]
    asserts = [a for a in asserts if a is not None]
    if output is None or not asserts:
        return output
    import tensorflow as tf

    with tf.control_dependencies(asserts):
        return tf.identity(output)


def checked(checks, output):
    """Runs ``checks()`` (any checks of :mod:`keras_trees.validation`) and
    returns ``output`` computed after them: the checks traced into a compiled
    graph are gathered (:func:`keras_trees.validation.tensors.collected`) and
    issued as one by :func:`require_all`."""
    with tensors.collected() as pending:
        checks()
    return require_all(pending, output=output)


def kernels_check(x):
    """True when ``x`` is traced into a TensorFlow graph and the op about to read
    it runs a compiled kernel: the kernels check every input they read (``x``
    and every parameter finite, ids in range) in C++ at no measurable cost,
    with messages naming the argument, while each graph assertion costs tens
    of microseconds per call. Layers whose kernels read every variable they
    would check skip their own checks then (their messages add the layer's
    name; eagerly and under ``jax.jit``, where a check costs microseconds,
    they still run)."""
    if not tensors._tf_graph(x):
        return False
    from keras_trees.ops import _library  # it imports this package

    return _library.custom_ops_available()


def variable_checks(layer, variables_to_check):
    """``[(ok, message), ...]`` for :func:`require_all`: each floating variable
    in ``variables_to_check`` is finite; the message names the layer and the
    variable, as :func:`keras_trees.validation.variables.finite`."""
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
    return checks


def finite_variables(layer, variables_to_check, more=(), output=None):
    """Fails (every path, one check under ``jax.jit``) unless every floating
    variable in ``variables_to_check`` is finite (:func:`variable_checks`).
    ``more``: further ``(ok, message)`` checks made at the same time;
    ``output``: see :func:`require_all`."""
    return require_all(variable_checks(layer, variables_to_check) + list(more), output=output)
