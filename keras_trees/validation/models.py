"""Checks of a whole model's weights before it is written out (``export_portable``):
every layer's own floating variables finite and every ``node_state`` a valid
topology, with errors naming the layer and the variable. NumPy, run once.
"""

import numpy as np

from keras_trees.validation import topology as topology_checks
from keras_trees.validation import variables
from keras_trees._arrays import to_numpy


# Growth bookkeeping that holds -inf by design ("no candidate") and is never
# read by the forward pass: infinities allowed, NaN still refused.
SENTINEL_VARIABLES = ("candidate_gain",)


def check_weights(model, context):
    """Raises ``ValueError`` naming layer and variable unless every weight of
    ``model`` (its layers, recursively) is finite and every ``node_state`` valid;
    ``context`` ends the message (why the check runs)."""
    for layer in model._flatten_layers(include_self=True, recursive=True):
        for v in variables.own_variables(layer):
            name = variables._short_name(v)
            value = np.asarray(to_numpy(v.value))
            if value.dtype.kind == "f":
                bad = np.isnan(value) if name in SENTINEL_VARIABLES else ~np.isfinite(value)
                if bad.any():
                    raise ValueError(f"{variables.label(layer, name)} contains NaN or Inf; {context}")
            if name in variables.TOPOLOGY_VARIABLES:
                topology_checks.node_state(value, f"{variables.label(layer, name)}")
    return model
