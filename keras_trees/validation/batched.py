"""Several runtime checks of one call issued as one, that the call's work depends on.

`keras_trees.validation.tensors.require` makes one check. A layer call
makes a dozen (``x`` and every variable finite, a valid topology): issued one
by one they would cost a dispatch each under ``jax.jit``. `checked` runs
any checks of `keras_trees.validation`, gathers those that can only be
decided when a compiled graph runs (`collected`)
and hands them to `require_all`, which returns the tensor the caller goes
on with computed after them:

- eager values (TensorFlow, JAX, PyTorch, NumPy): each check raised at once;
- ``tf.function``: ``tf.debugging.Assert`` ops and control dependencies;
- ``jax.jit``: one XLA custom call of the compiled library (``KerasTreesCheck``,
  a few microseconds) that the tensor depends on; the failure arrives as a
  ``JaxRuntimeError`` carrying the message when the call's results are read;
- ``torch.compile``: one op of the compiled library (``keras_trees::check``)
  that the tensor depends on, raising ``ValueError`` with the message.

The messages are the same on every path. `finite_variables` is
`keras_trees.validation.variables.finite` for several variables of one
layer, with the same message.
"""

from keras_trees.validation import tensors, variables


def require_all(checks, error=ValueError, output=None):
    """``checks``: ``[(ok, message), ...]`` or ``[(ok, message, error), ...]``
    with ``ok`` a scalar boolean (tensor or Python bool), and
    `keras_trees.validation.tensors.KernelCheck` entries (tensors that
    must be finite, topologies). Fails with the message of the first failed check.

    Inside ``tf.function`` on the compiled kernels, with ``output`` and at
    least one tensor to scan, all of them are one ``KerasTrees>Check`` op that
    ``output`` passes through (its message without the ``assertion failed``
    prefix of ``tf.debugging.Assert``).

    Given ``output`` (the tensor the caller goes on with), returns it computed
    after the checks inside compiled graphs (``tf.function``: control
    dependencies on the assertions; ``jax.jit``: a data dependency on one
    check call, see `keras_trees.validation.tensors.jax_check`): the
    checks' message is the one users see (a kernel reading the same bad value
    does not fail first in its own words), nothing computed from a rejected
    value runs, and under JAX the checks cost microseconds. Without it they
    are side effects."""
    pending = [c for c in checks if isinstance(c, tensors.KernelCheck)]
    checks = [(c[0], c[1], c[2] if len(c) > 2 else error) for c in checks
              if not isinstance(c, tensors.KernelCheck)]
    if pending and output is not None and kernels_check(output):
        return _one_op(output, pending, checks)
    checks = [c.condition() for c in pending] + checks
    if not checks:
        return output
    if any(tensors._jax_traced(ok) for ok, _, _ in checks):
        return tensors.jax_check([ok for ok, _, _ in checks], [m for _, m, _ in checks], checks[0][2],
                                 output=output)
    if any(tensors._torch_compiling(ok) for ok, _, _ in checks):
        return tensors.torch_check([ok for ok, _, _ in checks], [m for _, m, _ in checks], checks[0][2],
                                   output=output)
    asserts = [tensors.require(ok, message, err) for ok, message, err in checks]
    asserts = [a for a in asserts if a is not None]
    if output is None or not asserts:
        return output
    import tensorflow as tf

    with tf.control_dependencies(asserts):
        return tf.identity(output)


def _one_op(output, pending, checks):
    """The checks of `require_all` as one op of the compiled library
    (``KerasTrees>Check``) that ``output`` passes through: it scans the
    tensors of ``pending`` (finite float32/float64 values, valid topologies;
    other dtypes become conditions) and tests the scalar conditions of
    ``checks``, failing with the first failed check's message. As a reduction
    and an assertion per tensor, the checks of a heap layer's inference call
    cost about 5-8% of it (``benchmarks/check_cost.py --graph-checks``)."""
    from keras_trees.ops import _tf_check

    finite = [c for c in pending if c.kind == "finite" and tensors.dtype_name(c.x) in ("float32", "float64")]
    states = [c for c in pending if c.kind == "topology"]
    checks = [c.condition() for c in pending if c not in finite and c not in states] + checks
    oks, messages = [], []
    for ok, message, err in checks:
        if isinstance(ok, bool) or not hasattr(ok, "dtype"):
            tensors.require(ok, message, err)  # a Python bool: decided now
            continue
        oks.append(ok)
        messages.append(message)
    return _tf_check.check(output, [c.x for c in finite], oks, [c.x for c in states],
                           [c.message for c in finite] + messages + [c.message for c in states])


def checked(checks, output):
    """Runs ``checks()`` (any checks of `keras_trees.validation`) and
    returns ``output`` computed after them: the checks traced into a compiled
    graph are gathered (`keras_trees.validation.tensors.collected`) and
    issued as one by `require_all`."""
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
    """``[(ok, message), ...]`` for `require_all`: each floating variable
    in ``variables_to_check`` is finite; the message names the layer and the
    variable, as `keras_trees.validation.variables.finite`."""
    checks = []
    for v in variables_to_check:
        value = v.value if hasattr(v, "value") else v
        if tensors.is_keras_symbolic(value) or not tensors._is_floating(value):
            continue
        name = variables._short_name(v)
        checks.append(tensors.finite_check(
            value,
            f"{variables.label(layer, name)} contains NaN or Inf; did training diverge, or was a NaN "
            "assigned or loaded?",
        ))
    return checks


def finite_variables(layer, variables_to_check, more=(), output=None):
    """Fails (every path, one check under ``jax.jit``) unless every floating
    variable in ``variables_to_check`` is finite (`variable_checks`).
    ``more``: further ``(ok, message)`` checks made at the same time;
    ``output``: see `require_all`."""
    return require_all(variable_checks(layer, variables_to_check) + list(more), output=output)
