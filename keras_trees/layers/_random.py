"""Reproducible NumPy random generators for layers that draw structure on the host.

Feature subsets, initial splits and growth proposals are drawn with NumPy. A
layer built with ``seed=None`` must still follow ``keras.utils.set_random_seed``
(which seeds NumPy's global generator, among others), so its generator is
seeded from NumPy's global state instead of from the operating system.
"""

import numbers

import numpy as np


def check_seed(seed, name="seed"):
    """``seed`` as a Python int (or None); a ``TypeError``/``ValueError`` naming
    it for anything else (bools, floats, strings, negative integers), which
    NumPy would reject later with a message that does not say which argument."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an integer or None, got {seed!r}")
    if seed < 0:
        raise ValueError(f"{name} must be >= 0, got {seed}")
    return int(seed)


def numpy_generator(seed=None):
    """``np.random.Generator`` seeded by ``seed``, or, when ``seed`` is None, by
    one draw from NumPy's global generator (reproducible after
    ``keras.utils.set_random_seed``)."""
    seed = check_seed(seed)
    if seed is None:
        seed = int(np.random.randint(0, 2**31 - 1))
    return np.random.default_rng(seed)
