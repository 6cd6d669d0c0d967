"""Initializers for tree parameters."""

import math

import keras

from keras_trees.api_export import keras_trees_export, public_api


@keras_trees_export("keras_trees.initializers")
class SplitUniform(keras.initializers.Initializer):
    """Uniform split weights scaled by the number of input features.

    Draws from ``U(-limit, limit)`` with ``limit = sqrt(3 * scale / shape[-1])``,
    so for standardized inputs (e.g. behind ``BatchNormalization``) the split
    values ``<w, x>`` have variance ``scale`` whatever the input width. Keras'
    own fan-in initializers would count the tree and node axes of a
    ``(num_trees, num_nodes, input_dim)`` tensor as fan-in; this one does not.

    Args:
        scale: variance of ``<w, x>`` for unit-variance inputs.
        seed: optional integer seed.

    Example:
    >>> init = SplitUniform(scale=1.0, seed=0)
    >>> tuple(init((10, 15, 64)).shape)
    (10, 15, 64)
    """

    def __init__(self, scale=1.0, seed=None):
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.scale = float(scale)
        self.seed = seed

    def __call__(self, shape, dtype=None):
        limit = math.sqrt(3.0 * self.scale / max(1, int(shape[-1])))
        uniform = keras.initializers.RandomUniform(-limit, limit, seed=self.seed)
        return uniform(shape, dtype=dtype)

    def get_config(self):
        return {"scale": self.scale, "seed": self.seed}


__all__ = public_api(__name__)
