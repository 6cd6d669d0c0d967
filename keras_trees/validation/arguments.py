"""Checks of Python arguments (constructor and function arguments, not tensors):
done once, when the argument is given, with a ``TypeError``/``ValueError``
naming it."""

import math
import numbers

import numpy as np


def positive_int(name, value, maximum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def positive_float(name, value):
    if isinstance(value, (bool, str)) or value is None:
        raise TypeError(f"{name} must be a number, got {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {value!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


def choice(name, value, options):
    if value not in options:
        raise ValueError(f"{name} must be one of {sorted(options)}, got {value!r}")
    return value


def task(num_classes, units, units_meaning="regression"):
    """``(num_classes, units)`` of a tree layer: exactly one is given.

    ``num_classes`` (>= 2) makes a classifier (probability outputs), ``units``
    (>= 1) raw outputs, described in the error as ``units_meaning``.
    """
    if (num_classes is None) == (units is None):
        raise ValueError(
            f"pass exactly one of num_classes (class probabilities) or units ({units_meaning}), "
            f"got num_classes={num_classes!r}, units={units!r}"
        )
    if num_classes is not None:
        num_classes = positive_int("num_classes", num_classes)
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        return num_classes, None
    return None, positive_int("units", units)


def prune_threshold(value, name="prune_threshold"):
    """``value`` as a float in ``[0, 1)`` (rounded to float32, the precision
    of the ops' attribute, so every path compares masses with the same number)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number in [0, 1), got the string {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number in [0, 1), got {value!r}") from None
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(np.float32(value))
