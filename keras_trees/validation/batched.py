"""Several runtime checks of one layer call as one check where that is cheaper.

:func:`keras_trees.validation.tensors.require` makes one check. Inside
``jax.jit`` each check is one XLA custom call (or, without the compiled
kernels, a host callback that costs about 0.1-0.2 ms): :func:`require_all`
makes a list of checks in one such call
(:func:`keras_trees.validation.tensors.jax_check`); everywhere else it is
:func:`~keras_trees.validation.tensors.require` once per check (eager values,
``tf.debugging.Assert`` in TensorFlow graphs, which costs microseconds). The
messages are the same on every path.

:func:`finite_variables` is :func:`keras_trees.validation.variables.finite`
for several variables of one layer, with the same message.
"""

import numpy as np
from keras import ops

from keras_trees.validation import tensors, variables


def require_all(checks, error=ValueError, output=None):
    """``checks``: ``[(ok, message), ...]`` with ``ok`` a scalar boolean (tensor
    or Python bool). Fails with the message of the first failed check.

    Given ``output`` (the tensor the caller returns), returns it computed after
    the checks inside compiled graphs (``tf.function``: control dependencies
    on the assertions; ``jax.jit``: a data dependency on the check's result,
    see :func:`keras_trees.validation.tensors.jax_check`), so the checks run
    and cost no extra dispatch. Without it, the checks are side effects."""
    checks = list(checks)
    if not checks:
        return output
    if any(tensors._jax_traced(ok) for ok, _ in checks):
        return tensors.jax_check([ok for ok, _ in checks], [message for _, message in checks], error,
                                 output=output)
    asserts = [tensors.require(ok, message, error) for ok, message in checks]
    asserts = [a for a in asserts if a is not None]
    if output is None or not asserts:
        return output
    import tensorflow as tf

    with tf.control_dependencies(asserts):
        return tf.identity(output)


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
