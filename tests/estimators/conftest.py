"""Shared by the estimator tests: shorter epochs.

An estimator's epoch is at least 16 mini-batches (``TreeEstimator._min_epoch_steps``):
a small training set is repeated within it. These tests fit tiny data hundreds of
times to check the scikit-learn side (inputs, frames, pipelines, pickling,
compatibility checks), so here an epoch is at least 2 mini-batches: the tiny data is
still repeated (the same code path), at an eighth of the steps.
``test_estimators.py::test_an_epoch_is_at_least_16_mini_batches`` tests the real
minimum (``REAL_MIN_EPOCH_STEPS``).
"""

import pytest

from keras_trees.estimators._base import TreeEstimator

REAL_MIN_EPOCH_STEPS = TreeEstimator._min_epoch_steps


@pytest.fixture(autouse=True)
def _short_epochs(monkeypatch):
    monkeypatch.setattr(TreeEstimator, "_min_epoch_steps", 2)
