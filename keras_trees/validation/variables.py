"""Checks of a layer's own variables: at call time (a weight that became NaN
during training, or was assigned one) and when a file is loaded.

Errors name the layer and the variable, e.g. ``TreeEnsembleLayer 'tel':
variable node_weights contains NaN or Inf``.
"""

import numpy as np

from keras_trees.validation import tensors
from keras_trees.validation import topology as topology_checks
from keras_trees._arrays import to_numpy

TOPOLOGY_VARIABLES = ("node_state",)


def label(layer, variable_name):
    return f"{type(layer).__name__} {layer.name!r}: variable {variable_name}"


def _short_name(variable):
    # Not getattr(variable, "name", str(variable)): the default would be built
    # on every call, and a Keras variable's str() converts its whole value to
    # NumPy (a NumPy 2 copy= DeprecationWarning per call on TensorFlow).
    name = getattr(variable, "name", None)
    return (str(variable) if name is None else name).split("/")[-1].split(":")[0]


def finite(layer, variable, name=None):
    """The variable's value; fails (on every path) unless it is finite."""
    value = variable.value if hasattr(variable, "value") else variable
    return tensors.finite(value, label(layer, name or _short_name(variable)),
                          hint="did training diverge, or was a NaN assigned or loaded?")


def own_variables(layer):
    return list(layer._trainable_variables) + list(layer._non_trainable_variables)


def check_loaded(layer, variables=None):
    """After ``load_own_variables``: every floating variable finite, every
    ``node_state`` a valid topology. NumPy, so it runs once per load.

    A layer may list variables that hold +-inf by design (sentinels such as
    "no gain yet") in a class attribute ``non_finite_variables``: those are
    only checked for NaN."""
    infinite_ok = tuple(getattr(layer, "non_finite_variables", ()))
    for v in own_variables(layer) if variables is None else variables:
        name = _short_name(v)
        value = np.asarray(to_numpy(v.value))
        if value.dtype.kind == "f" and np.any(np.isnan(value) if name in infinite_ok else ~np.isfinite(value)):
            raise ValueError(f"{label(layer, name)} loaded from the file contains NaN or Inf "
                             f"(the file is damaged or the model had diverged when it was saved)")
        if name in TOPOLOGY_VARIABLES:
            topology_checks.node_state(value, f"{label(layer, name)} loaded from the file")


class CheckedLoading:
    """Mixin for tree layers: loading weights from a ``.keras`` file or
    ``load_weights`` validates them (`check_loaded`)."""

    def load_own_variables(self, store):
        super().load_own_variables(store)
        check_loaded(self)
