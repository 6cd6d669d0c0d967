"""Spatial Laplacian penalty (Eq. 15) against the explicit grid-graph Laplacian."""

import numpy as np
import pytest

from keras_trees.regularizers import SpatialLaplacian


def laplacian(h, w):
    m = np.zeros((h * w, h * w))
    for r in range(h):
        for c in range(w):
            for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)):
                if 0 <= r + dr < h and 0 <= c + dc < w:
                    m[r * w + c, (r + dr) * w + c + dc] = -1
                    m[r * w + c, r * w + c] += 1
    return m


def test_matches_beta_m_beta(rng):
    beta = rng.normal(size=(2, 5, 12))
    m = laplacian(3, 4)
    expected = 0.3 * sum(b @ m @ b for b in beta.reshape(-1, 12))
    assert float(SpatialLaplacian(0.3, (3, 4))(beta)) == pytest.approx(expected, rel=1e-6)


def test_config_and_errors():
    reg = SpatialLaplacian(0.5, (8, 8))
    assert SpatialLaplacian(**reg.get_config()).image_shape == (8, 8)
    with pytest.raises(ValueError, match="strength"):
        SpatialLaplacian(-1, (2, 2))
    with pytest.raises(ValueError, match="image size"):
        reg(np.zeros((3, 10), "float32"))
