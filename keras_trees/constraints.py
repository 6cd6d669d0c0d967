"""Keras weight constraints used by the keras-trees families."""

import keras
from keras import ops

from keras_trees.api_export import keras_trees_export, public_api


@keras_trees_export("keras_trees.constraints")
class RowNorm(keras.constraints.Constraint):
    """Projects every row onto the Euclidean ball of radius ``max_norm``.

    ``w_i <- w_i * min(1, max_norm / ||w_i||)`` along ``axis`` (default the
    last): the exact projection of line 8 of Algorithm 1 of Norouzi et al.
    (2015) for the constraint ``||w_i||_2 <= nu`` of Eq. 9. Rows already inside
    the ball are left bit-for-bit unchanged (unlike ``keras.constraints.MaxNorm``,
    which always rescales by ``n / (eps + n)``).

    >>> import numpy as np
    >>> w = np.array([[3.0, 4.0], [0.3, 0.4]], "float32")
    >>> np.asarray(RowNorm(1.0)(w)).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """

    def __init__(self, max_norm=1.0, axis=-1):
        max_norm = float(max_norm)
        if not (max_norm > 0 and max_norm != float("inf")):
            raise ValueError(f"max_norm must be a finite number > 0, got {max_norm}")
        self.max_norm = max_norm
        self.axis = int(axis)

    def __call__(self, w):
        w = ops.convert_to_tensor(w)
        norm = ops.sqrt(ops.sum(ops.square(w), axis=self.axis, keepdims=True))
        scale = ops.where(norm > self.max_norm, self.max_norm / ops.maximum(norm, 1e-30), ops.ones_like(norm))
        return w * ops.cast(scale, w.dtype)

    def get_config(self):
        return {"max_norm": self.max_norm, "axis": self.axis}


@keras_trees_export("keras_trees.constraints")
class ClipValues(keras.constraints.Constraint):
    """Clips a variable into ``[min_value, max_value]`` after each optimizer step."""

    def __init__(self, min_value, max_value):
        self.min_value, self.max_value = float(min_value), float(max_value)

    def __call__(self, w):
        return ops.clip(w, self.min_value, self.max_value)

    def get_config(self):
        return {"min_value": self.min_value, "max_value": self.max_value}


__all__ = public_api(__name__)
