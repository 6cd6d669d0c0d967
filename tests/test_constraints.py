"""RowNorm: the projection of Algorithm 1, line 8."""

import keras
import numpy as np
import pytest

from keras_trees.constraints import RowNorm


def test_projection_keeps_norms_and_inner_rows(rng):
    w = rng.normal(size=(50, 7)) * rng.uniform(0.1, 5, size=(50, 1))
    out = np.asarray(RowNorm(2.0)(w))
    norms = np.linalg.norm(w, axis=1)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), np.minimum(norms, 2.0), rtol=1e-12)
    np.testing.assert_array_equal(out[norms <= 2.0], w[norms <= 2.0])  # untouched
    # same direction
    np.testing.assert_allclose(out / np.linalg.norm(out, axis=1, keepdims=True),
                               w / norms[:, None], rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(RowNorm(1.0)(np.zeros((3, 2)))), 0.0)


def test_config_and_bad_values():
    c = keras.constraints.deserialize(keras.constraints.serialize(RowNorm(3.5, axis=0)))
    assert isinstance(c, RowNorm) and c.max_norm == 3.5 and c.axis == 0
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="max_norm"):
            RowNorm(bad)
