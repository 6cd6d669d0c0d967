"""Batch estimate of the conditional entropy H(Y|L) of labels given leaves (Eq. 10-13)."""

import keras
import numpy as np
from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.validation import arguments, tensors

_TINY = 1e-30


def _xlogx_ratio(counts, mass):
    """``counts * log(counts / mass)`` with ``0 log 0 = 0`` and finite gradients."""
    safe_c = ops.maximum(counts, _TINY)
    safe_m = ops.maximum(mass, _TINY)
    return ops.where(counts > 0, counts * (ops.log(safe_c) - ops.log(safe_m)), ops.zeros_like(counts))


@keras_trees_export("keras_trees.losses")
def conditional_entropy_from_counts(counts, total=None):
    """``H(Y|L)`` from soft class counts per leaf.

    Args:
        counts: ``(..., num_leaves, num_classes)``:
            ``counts[l, j] = sum_n 1[y_n = j] P(l | x_n)`` (Eq. 11 numerator).
        total: the number of samples ``N`` (default: ``sum(counts)``).

    Returns:
        ``sum_l p(l) H(Y | L = l)`` with ``p(l) = sum_n P(l | x_n) / N`` (Eq. 10,
        12, 13), in nats.
    """
    counts = ops.convert_to_tensor(counts)
    mass = ops.sum(counts, axis=-1, keepdims=True)
    if total is None:
        total = ops.sum(counts)
    return -ops.sum(_xlogx_ratio(counts, mass)) / ops.maximum(ops.cast(total, counts.dtype), _TINY)


@keras_trees_export("keras_trees.losses")
def conditional_entropy(y_true, leaf_probabilities, num_classes, sample_weight=None):
    """Eq. 13: ``H_hat(Y|L)`` of a batch.

    Args:
        y_true: ``(batch,)`` or ``(batch, 1)`` integer labels in ``[0, num_classes)``
            (checked on every path: negative, too large or fractional labels
            fail, never wrap around or drop out of the counts).
        leaf_probabilities: ``(batch, num_leaves)``, ``P(l | x_n)`` (rows sum to 1).
        num_classes: number of classes ``C``.
        sample_weight: optional ``(batch,)`` weights.

    >>> import numpy as np
    >>> p = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    >>> round(float(conditional_entropy(np.array([0, 1, 1, 1]), p, 2)), 4)  # 0.5 * log 2
    0.3466
    """
    probs = ops.convert_to_tensor(leaf_probabilities)
    if len(probs.shape) != 2:
        raise ValueError(f"leaf_probabilities must have shape (batch, num_leaves), got {tuple(probs.shape)}")
    num_classes = arguments.positive_int("num_classes", num_classes)
    if hasattr(y_true, "dtype") and not isinstance(y_true, (np.ndarray, np.generic)):
        y = ops.reshape(y_true, (-1,))
    else:  # NumPy or Python labels: checked before any conversion could wrap them
        y = np.reshape(np.asarray(y_true), (-1,))
    y = tensors.indices(y, "y_true", num_classes)
    if y.shape[0] is not None and probs.shape[0] is not None and y.shape[0] != probs.shape[0]:
        raise ValueError(f"y_true has {y.shape[0]} labels but leaf_probabilities has {probs.shape[0]} rows")
    onehot = ops.one_hot(y, num_classes, dtype=probs.dtype)
    if sample_weight is not None:
        onehot = onehot * ops.cast(ops.reshape(sample_weight, (-1, 1)), probs.dtype)
    counts = ops.matmul(ops.transpose(probs), onehot)  # (L, C)
    return conditional_entropy_from_counts(counts)


@keras_trees_export("keras_trees.losses")
class ConditionalEntropy(keras.losses.Loss):
    """Keras loss ``H_hat(Y|L)`` (Eq. 13) for ``y_pred`` = leaf probabilities.

    Minimizing it maximizes the mutual information between labels and leaves
    (Eq. 9). The estimate is defined on a whole batch (leaf class
    distributions are batch statistics, Eq. 11), so it returns one scalar per
    batch and ignores Keras' per-sample reduction.

    Args:
        num_classes: number of classes.

    >>> import numpy as np
    >>> loss = ConditionalEntropy(num_classes=2)
    >>> abs(round(float(loss(np.array([0, 0, 1, 1]), np.array([[1.0, 0], [1, 0], [0, 1], [0, 1]]))), 6))
    0.0
    """

    def __init__(self, num_classes, name="conditional_entropy", **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="none", **kwargs)
        self.num_classes = arguments.positive_int("num_classes", num_classes)
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")

    def call(self, y_true, y_pred):
        return conditional_entropy(y_true, y_pred, self.num_classes)

    def get_config(self):
        return {"num_classes": self.num_classes, "name": self.name}
