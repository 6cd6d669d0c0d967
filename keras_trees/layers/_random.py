"""Reproducible NumPy random generators for layers that draw structure on the host.

Feature subsets, initial splits and growth proposals are drawn with NumPy. A
layer built with ``seed=None`` must still follow ``keras.utils.set_random_seed``
(which seeds NumPy's global generator, among others), so its generator is
seeded from NumPy's global state instead of from the operating system.
"""

import numpy as np


def numpy_generator(seed=None):
    """``np.random.Generator`` seeded by ``seed``, or, when ``seed`` is None, by
    one draw from NumPy's global generator (reproducible after
    ``keras.utils.set_random_seed``)."""
    if seed is None:
        seed = int(np.random.randint(0, 2**31 - 1))
    return np.random.default_rng(seed)
