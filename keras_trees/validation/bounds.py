"""Checks of Python arguments that may be zero (``>= 0``): an annealing
increment, a patience threshold, a number of extra epochs. The ``> 0``
checks are in `keras_trees.validation.arguments`."""

import math
import numbers


def nonnegative_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def nonnegative_float(name, value):
    if isinstance(value, (bool, str)) or value is None or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return value
