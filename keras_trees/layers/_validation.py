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


def sample_weights(y, sample_weight=None, class_weight=None, num_classes=None, where="fit"):
    """Per-sample weights ``(n,)`` (float64) as ``keras.Model.fit`` forms them.

    ``class_weight`` maps a class id to a weight (classes not in the dict weigh
    1) and multiplies ``sample_weight`` (default: ones). Only classification
    takes ``class_weight``; ``y`` holds class ids then.
    """
    n = len(y)
    if sample_weight is None:
        w = np.ones(n)
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.ndim > 1 and w.size == n:
            w = w.reshape(n)
        if w.shape != (n,):
            raise ValueError(f"{where}: sample_weight must have shape ({n},) (one weight per sample), "
                             f"got {np.shape(sample_weight)}")
    if class_weight is not None:
        if num_classes is None:
            raise ValueError(f"{where}: class_weight needs a classification tree (num_classes)")
        if not isinstance(class_weight, dict):
            raise TypeError(f"{where}: class_weight must be a dict {{class: weight}}, got {type(class_weight).__name__}")
        table = np.ones(num_classes)
        for k, v in class_weight.items():
            if not 0 <= int(k) < num_classes:
                raise ValueError(f"{where}: class_weight has class {k!r} outside [0, {num_classes})")
            table[int(k)] = float(v)
        w = w * table[np.asarray(y, dtype=np.int64).reshape(n)]
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"{where}: sample weights (sample_weight times class_weight) must be finite and >= 0")
    if n and not w.sum() > 0:
        raise ValueError(f"{where}: all sample weights (sample_weight times class_weight) are 0")
    return w
