"""A plain NumPy oracle of pruned probabilistic routing (float64, one
recursive depth-first walk per sample and tree), independent of the kernel and
of the keras.ops reference. Shared by the op, layer and backend tests."""

import numpy as np


def split_probabilities(x, split_weights, split_bias, gamma, expert_weights=None, rate0=None, annealed=True):
    """``(right, favours_right)``, ``(batch, trees, internal)``, float64."""
    x = np.asarray(x, np.float64)
    w = np.asarray(split_weights, np.float64)
    b = np.asarray(split_bias, np.float64)
    if expert_weights is None:
        u = np.asarray(gamma, np.float64)[None] * (np.einsum("bp,tip->bti", x, w) + b[None])
        return 1.0 / (1.0 + np.exp(-u)), u > 0
    z = np.einsum("bp,tikp->btik", x, w) + b[None]
    rate = (np.asarray(expert_weights, np.float64)[None] * np.logaddexp(0.0, z)).sum(-1)
    if not annealed:
        return -np.expm1(-rate), rate > np.log(2.0)
    u = np.asarray(gamma, np.float64)[None] * (rate - np.asarray(rate0, np.float64)[None])
    return 1.0 / (1.0 + np.exp(-u)), u > 0


def pruned_walk(right, favours_right, is_split, threshold):
    """``(mu, kept, evaluations, dropped)``: ``mu`` ``(batch, trees, positions)``."""
    batch, trees, internal = right.shape
    mu = np.zeros((batch, trees, 2 * internal + 1))
    kept = np.zeros((batch, trees), np.int64)
    evaluations = np.zeros((batch, trees), np.int64)
    dropped = np.zeros((batch, trees))
    for b in range(batch):
        for t in range(trees):
            stack = [(0, 1.0)]
            while stack:
                n, m = stack.pop()
                if n >= internal or not is_split[t, n]:
                    mu[b, t, n] = m
                    kept[b, t] += 1
                    continue
                evaluations[b, t] += 1
                fav = bool(favours_right[b, t, n])
                r = right[b, t, n]
                for child, mc, favoured in ((2 * n + 1, m * (1.0 - r), not fav), (2 * n + 2, m * r, fav)):
                    if mc >= threshold or favoured:
                        stack.append((child, mc))
                    else:
                        dropped[b, t] += mc
    return mu, kept, evaluations, dropped


def pruned_outputs(x, split_weights, split_bias, gamma, is_split, leaf_values, threshold, **experts):
    """``(output (batch, trees, units), kept, evaluations, dropped)``."""
    right, fav = split_probabilities(x, split_weights, split_bias, gamma, **experts)
    mu, kept, evaluations, dropped = pruned_walk(right, fav, np.asarray(is_split, bool), threshold)
    return np.einsum("btn,tnu->btu", mu, np.asarray(leaf_values, np.float64)), kept, evaluations, dropped
