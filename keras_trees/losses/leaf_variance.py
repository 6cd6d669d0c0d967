"""Variance-reduction objective of probabilistic regression trees (Eq. 15-16)."""

import keras
from keras import ops

from keras_trees.api_export import keras_trees_export

_TINY = 1e-30


@keras_trees_export("keras_trees.losses")
def leaf_variance_from_moments(m0, m1, m2, total):
    """``sum_l sum_n P(l|x_n) (y_n - mu_l)^2 / N`` from the soft moments per leaf.

    Args:
        m0: ``(num_leaves,)`` ``sum_n P(l|x_n)``.
        m1, m2: ``(num_leaves, units)`` ``sum_n P(l|x_n) y_n`` and ``... y_n**2``
            (targets centered by the caller for float32 accuracy).
        total: number of samples ``N``.
    """
    m0 = ops.convert_to_tensor(m0)[:, None]
    mu = m1 / ops.maximum(m0, _TINY)  # Eq. 16
    within = m2 - mu * m1  # = sum_n P (y - mu)^2
    return ops.sum(ops.maximum(within, 0.0)) / ops.maximum(ops.cast(total, m0.dtype), _TINY)


@keras_trees_export("keras_trees.losses")
def leaf_variance(y_true, leaf_probabilities, sample_weight=None):
    """Eq. 15 with ``mu_l`` of Eq. 16, averaged over the batch (and summed over outputs).

    Args:
        y_true: ``(batch,)`` or ``(batch, units)`` targets.
        leaf_probabilities: ``(batch, num_leaves)``.

    >>> import numpy as np
    >>> p = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> round(float(leaf_variance(np.array([1.0, 3.0, 5.0]), p)), 4)  # (1 + 1 + 0) / 3
    0.6667
    """
    probs = ops.convert_to_tensor(leaf_probabilities)
    y = ops.cast(ops.convert_to_tensor(y_true), probs.dtype)
    y = ops.reshape(y, (ops.shape(y)[0], -1))
    w = ops.ones_like(y[:, :1]) if sample_weight is None else ops.cast(ops.reshape(sample_weight, (-1, 1)), probs.dtype)
    y = y - ops.sum(w * y, axis=0, keepdims=True) / ops.maximum(ops.sum(w), _TINY)  # shift-invariant
    pw = probs * w
    m0 = ops.sum(pw, axis=0)
    m1 = ops.matmul(ops.transpose(pw), y)
    m2 = ops.matmul(ops.transpose(pw), y * y)
    return leaf_variance_from_moments(m0, m1, m2, ops.sum(w))


@keras_trees_export("keras_trees.losses")
class LeafVariance(keras.losses.Loss):
    """Keras loss: the within-leaf variance of Eq. 15-16 for ``y_pred`` = leaf
    probabilities (one scalar per batch; leaf means are batch statistics)."""

    def __init__(self, name="leaf_variance", **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="none", **kwargs)

    def call(self, y_true, y_pred):
        return leaf_variance(y_true, y_pred)

    def get_config(self):
        return {"name": self.name}
