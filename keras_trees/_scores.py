"""Validation scores shared by the layers' depth cuts and the estimators' model
choices (NumPy, float64, lower is better)."""

import math

import numpy as np


def normalized_weights(w, n):
    """Sample weights ``w`` (None: equal) scaled to sum to 1."""
    w = np.ones(n) if w is None else np.asarray(w, dtype=np.float64)
    return w / max(float(w.sum()), 1e-300)


def error_and_log_loss(proba, y, w=None):
    """``(error rate, log loss)`` of class probabilities ``proba`` for class
    ids ``y``, weighted by ``w``. The error rate is summed exactly
    (``math.fsum``): the same misclassified weights give the same error
    wherever they are (a dot product's rounding depends on their positions),
    so equal error rates tie exactly and the log loss decides, e.g. on
    imbalanced data, where every depth of a tree may predict the majority
    class and accuracy alone cannot tell a constant from a tree."""
    proba = np.asarray(proba, dtype=np.float64)
    y = np.asarray(y).astype(np.int64).ravel()
    w = normalized_weights(w, len(y))
    error = math.fsum(w[proba.argmax(axis=1) != y])
    loss = float(w @ -np.log(np.clip(proba[np.arange(len(y)), y], 1e-12, None)))
    return error, loss


def mean_squared_error(pred, y, w=None):
    """Weighted mean (over samples and outputs) squared error."""
    pred = np.asarray(pred, dtype=np.float64)
    pred = pred.reshape(len(pred), -1)
    w = normalized_weights(w, len(pred))
    return float(w @ ((pred - np.asarray(y, dtype=np.float64).reshape(len(pred), -1)) ** 2).mean(axis=1))
