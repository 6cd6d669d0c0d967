"""Spatial Laplacian penalty on image-shaped split weights (Hehn et al. 2019, Eq. 15)."""

import math

import keras
from keras import ops

from keras_trees.api_export import keras_trees_export


@keras_trees_export("keras_trees.regularizers")
class SpatialLaplacian(keras.regularizers.Regularizer):
    """``strength * sum_i beta_i^T M beta_i`` with ``M`` the grid-graph Laplacian.

    Every weight vector (the last axis of the regularized tensor, e.g. each
    split's kernel) is read as an image of ``image_shape`` = ``(height, width)``
    or ``(height, width, channels)``. ``beta^T M beta`` equals the sum of squared
    differences between 4-neighbouring pixels (per channel), so the penalty
    favours smooth, interpretable split weights (Eilers & Marx 1996). The paper
    subtracts it from the log-likelihood it maximizes; as a loss term it is added.

    Args:
        strength: lambda >= 0.
        image_shape: ``(height, width)`` or ``(height, width, channels)``.

    Example:

    >>> import numpy as np
    >>> reg = SpatialLaplacian(1.0, (2, 2))
    >>> float(reg(np.array([[1.0, 0.0, 0.0, 0.0]], "float32")))  # 2 edges touch the 1
    2.0
    """

    def __init__(self, strength, image_shape):
        strength = float(strength)
        if not (math.isfinite(strength) and strength >= 0):
            raise ValueError(f"strength must be a finite number >= 0, got {strength}")
        image_shape = tuple(int(d) for d in image_shape)
        if len(image_shape) not in (2, 3) or min(image_shape) < 1:
            raise ValueError(f"image_shape must be (height, width[, channels]) of positive sizes, got {image_shape}")
        self.strength = strength
        self.image_shape = image_shape

    def __call__(self, weights):
        weights = ops.convert_to_tensor(weights)
        size = math.prod(self.image_shape)
        if weights.shape[-1] != size:
            raise ValueError(
                f"the last axis of the weights ({weights.shape[-1]}) must equal the image size "
                f"{self.image_shape} = {size}"
            )
        shape = self.image_shape if len(self.image_shape) == 3 else (*self.image_shape, 1)
        img = ops.reshape(weights, (-1, *shape))
        dy = img[:, 1:] - img[:, :-1]
        dx = img[:, :, 1:] - img[:, :, :-1]
        return self.strength * (ops.sum(dy * dy) + ops.sum(dx * dx))

    def get_config(self):
        return {"strength": self.strength, "image_shape": list(self.image_shape)}
