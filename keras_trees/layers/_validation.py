"""Argument checks shared by the tree layers: clear errors before any C++ runs."""

import os

import numpy as np

from keras_trees.forest import class_ids
from keras_trees.validation.arguments import positive_float, positive_int, task  # noqa: F401 (re-exported)


def available_memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 64 * 2**30


def check_parameter_memory(num_values, itemsize, what, hint):
    """Raises MemoryError-like ValueError when parameters could not be held in memory.

    Training keeps about four copies of each weight (value, gradient, two Adam
    moments), so the limit is a quarter of physical memory.
    """
    needed = num_values * itemsize * 4
    limit = available_memory_bytes()
    if needed > limit:
        raise ValueError(
            f"{what} would need about {needed / 2**30:.1f} GiB to train "
            f"(this machine has {limit / 2**30:.1f} GiB); {hint}"
        )


def class_labels(y, num_classes, where):
    """Integer class ids of shape ``(n,)`` in ``[0, num_classes)``, or a clear error."""
    return class_ids(y, num_classes, where).astype("int32")


def class_weight_table(class_weight, num_classes, where):
    """``(num_classes,)`` float64 weight of every class from a ``class_weight``
    dict (classes not in it weigh 1): a sample of class ``k`` weighs
    ``table[k]`` (times its ``sample_weight``)."""
    if num_classes is None:
        raise ValueError(f"{where}: class_weight needs a classification tree (num_classes)")
    if not isinstance(class_weight, dict):
        raise TypeError(f"{where}: class_weight must be a dict {{class: weight}}, got {type(class_weight).__name__}")
    outside = sorted(int(k) for k in class_weight if not 0 <= int(k) < num_classes)
    if outside:
        raise ValueError(f"{where}: class_weight has class ids {outside} outside [0, {num_classes})")
    table = np.ones(num_classes)
    for k, v in class_weight.items():
        table[int(k)] = float(v)
    return table


def batch_weights(y, sample_weight, table, where):
    """Weights ``(n,)`` (float64) of one batch of labels ``y``: ``sample_weight``
    (ones when None) times ``table[y]`` (`class_weight_table`; None for
    none), checked finite and >= 0."""
    n = len(y)
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, np.float64).reshape(n)
    if table is not None:
        w = w * table[np.asarray(y, dtype=np.int64).reshape(n)]
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"{where}: sample weights (sample_weight times class_weight) must be finite and >= 0")
    return w


def sample_weights(y, sample_weight=None, class_weight=None, num_classes=None, where="fit"):
    """Per-sample weights ``(n,)`` (float64) as ``keras.Model.fit`` forms them.

    ``class_weight`` maps a class id to a weight (classes not in the dict weigh
    1) and multiplies ``sample_weight`` (default: ones). Only classification
    takes ``class_weight``; ``y`` holds class ids then.
    """
    n = len(y)
    if sample_weight is not None:
        shape = np.shape(sample_weight)
        if not (shape == (n,) or (len(shape) > 1 and int(np.prod(shape)) == n)):
            raise ValueError(f"{where}: sample_weight must have shape ({n},) (one weight per sample), got {shape}")
    table = None if class_weight is None else class_weight_table(class_weight, num_classes, where)
    w = batch_weights(y, sample_weight, table, where)
    if n and not w.sum() > 0:
        raise ValueError(f"{where}: all sample weights (sample_weight times class_weight) are 0")
    return w
