"""Training of convex polytope trees (Armandpour & Zhou 2021, Section 3.3, Algorithm 1).

Not public: use [`ConvexPolytopeTree.fit_greedy`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.fit_greedy] and
[`ConvexPolytopeTree.refine`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.refine].

* Greedy topology learning (Section 3.3.2): level by level, every leaf that may
  still split holds a stump; all stumps of a level train at the same time, each
  on the samples routed (deterministically, through the committed splits) to
  its node, with the information objective of its two leaves (Eq. 13; Eq. 15-16
  for regression) plus the prior of Eq. 14. A stump only depends on its own
  parameters and samples, so this equals training them one by one. Then the
  threshold on the stump's split function with the largest information gain
  (variance reduction) on the node's samples becomes the deterministic split.
* Depth selection on validation data: the tree is grown to ``max_depth`` and
  cut back to the depth with the best validation score.
* Joint refinement (Section 3.3.1): all splits of the fixed topology train
  together with the probabilistic tree; thresholds then become ``S0`` (the
  threshold 0.5 on the annealed ``f_lambda``).

Streams: both accept a stream of ``(x, y[, sample_weight])`` batches instead
of arrays; every statistic (node sums, the stumps' initial ``S0``, the
threshold search, the leaves) is then accumulated batch by batch and summed
across workers, with histograms where arrays use sorted values (see
`fit_greedy`).

Everything here is ``keras.ops`` and NumPy, so it runs on every Keras backend;
the optimizer steps come from `keras_trees.layers._gradient_step.make_train_step`
(under ``tf.distribute`` every replica computes the step on the full batch).

Sample weights (``sample_weight``, and ``class_weight`` multiplied into them as
in ``keras.Model.fit``) weight every statistic: the soft counts (moments) of
the information objective and its normalization, the prior's ``1 / N`` (``N``
becomes the total weight), the threshold gains and the leaf values. An integer
weight is the same as repeating the sample (up to the mini-batch order);
samples of weight 0 are ignored. Sample counts (``min_samples_split``,
``min_samples_leaf``) count samples of positive weight, like scikit-learn.
"""

import math
import sys

import keras
import numpy as np
from keras import ops

from keras_trees import _scores as validation_scores, streaming, topology
from keras_trees.forest import node_sums
from keras_trees.layers._gradient_step import make_train_step
from keras_trees.layers._level_growth import LevelGrowth
from keras_trees.layers._random import numpy_generator
from keras_trees.layers._validation import batch_weights, class_weight_table, sample_weights
from keras_trees.losses.conditional_entropy import conditional_entropy_from_counts
from keras_trees.losses.leaf_variance import leaf_variance_from_moments
from keras_trees.ops import polytope as poly
from keras_trees.validation import batched
from keras_trees._arrays import to_numpy


def softplus_inverse(y):
    y = np.maximum(np.asarray(y, dtype=np.float64), 1e-12)
    return np.where(y > 30, y, np.log(np.expm1(np.minimum(y, 30.0))))


def print_msg(message):
    """One line of progress the Keras way: stdout, or absl logging when
    ``keras.config.disable_interactive_logging()`` was called."""
    if keras.config.is_interactive_logging_enabled():
        sys.stdout.write(f"{message}\n")
        sys.stdout.flush()
    else:
        from absl import logging

        logging.info(message)


# --------------------------------------------------------------- thresholds
def best_threshold(rate, y, num_classes=None, min_samples_leaf=1, sample_weight=None):
    """Threshold on a node's split function with the largest information gain.

    Samples with ``rate <= threshold`` go left. Classification (``num_classes``
    given, integer ``y``) minimizes ``n0/N H(left) + (N-n0)/N H(right)``
    (Section 3.3.2); regression (``num_classes=None``, ``y`` of shape ``(n,)``
    or ``(n, units)``) minimizes the summed within-child squared error. With
    ``sample_weight`` the class counts, the squared errors and ``N`` are
    weighted (an integer weight equals repeating the sample); both children
    need a positive weight, and ``min_samples_leaf`` counts samples.

    Returns:
        ``(threshold, gain, n_left)``; ``(None, 0.0, 0)`` when no cut leaves at
        least ``min_samples_leaf`` samples on each side (e.g. all rates equal).
        ``gain`` is in nats (classification) or squared units per unit of
        weight (per sample without weights).

    >>> import numpy as np
    >>> t, gain, n0 = best_threshold(np.array([0.1, 0.2, 0.9, 1.0]), np.array([0, 0, 1, 1]), 2)
    >>> round(t, 3), round(gain, 4), n0
    (0.55, 0.6931, 2)
    """
    rate = np.asarray(rate, dtype=np.float64).ravel()
    n = len(rate)
    if n < 2 * min_samples_leaf or n < 2:
        return None, 0.0, 0
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).ravel()
    order = np.argsort(rate, kind="stable")
    s, w = rate[order], w[order]
    i = np.arange(1, n)  # left = first i samples
    cw = np.cumsum(w)
    wl, W = cw[:-1], cw[-1]
    valid = (s[1:] > s[:-1]) & (i >= min_samples_leaf) & (n - i >= min_samples_leaf) & (wl > 0) & (W - wl > 0)
    if not valid.any() or not W > 0:
        return None, 0.0, 0
    if num_classes is not None:
        yy = np.asarray(y).ravel()[order].astype(np.int64)
        onehot = np.zeros((n, num_classes))
        onehot[np.arange(n), yy] = w
        cum = np.cumsum(onehot, axis=0)
        left, total = cum[:-1], cum[-1]
        right = total - left

        def hsum(c):
            m = c.sum(-1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(c > 0, c * np.log(np.where(c > 0, c, 1.0) / np.maximum(m, 1e-300)), 0.0)
            return -t.sum(-1)

        parent = hsum(total[None])[0]
        child = hsum(left) + hsum(right)
    else:
        yy = np.asarray(y, dtype=np.float64).reshape(n, -1)[order]
        yy = yy - (w[:, None] * yy).sum(0) / W
        c1, c2 = np.cumsum(w[:, None] * yy, 0), np.cumsum(w[:, None] * yy * yy, 0)
        nl = np.maximum(wl, 1e-300)[:, None]
        nr = np.maximum(W - wl, 1e-300)[:, None]
        sse_l = c2[:-1] - c1[:-1] ** 2 / nl
        r1, r2 = c1[-1] - c1[:-1], c2[-1] - c2[:-1]
        sse_r = r2 - r1**2 / nr
        parent = float((c2[-1] - c1[-1] ** 2 / W).sum())
        child = (sse_l + sse_r).sum(-1)
    gain = (parent - child) / W
    gain = np.where(valid, gain, -np.inf)
    k = int(np.argmax(gain))
    return float(0.5 * (s[k] + s[k + 1])), float(gain[k]), k + 1


# --------------------------------------------------------------- streams
# On a stream (data that is not held in memory) a node's values are only seen
# batch by batch, so statistics that need all of them (a median, the sorted
# values of the threshold search) come from histograms, summed over batches
# and workers. The split value S >= 0 spans orders of magnitude: bins are
# spaced in log S on [LOG_LOW, LOG_HIGH] (values outside fall in the end bins).
LOG_LOW, LOG_HIGH = -50.0, 50.0
MEDIAN_BINS = 4096  # log-spaced bins of the rate median of a new stump
COARSE_BINS = 256  # first pass of the threshold search: where a node's values lie
THRESHOLD_BINS = 1024  # second pass: candidate thresholds between these bins


def _log_values(v):
    return np.log(np.maximum(np.asarray(v, np.float64), 1e-300))


def _bin_index(log_v, low, high, bins):
    """Bin ``i`` holds ``edges[i] < log_v <= edges[i + 1]`` (clipped to the end
    bins), so a cut at an edge sends each bin wholly to one side of
    ``S <= threshold``."""
    inner = np.linspace(low, high, bins + 1)[1:-1]
    return np.searchsorted(inner, log_v, side="left")


def stream_finish_stumps(layer, growth, a, stumps):
    """Expert weights and ``S0`` of new stumps on a stream: ``r_k`` scaled by
    the inverse standard deviation of the drawn split's rate on the node's
    samples (weighted moments) and ``S0`` at its weighted median (from a
    histogram of ``MEDIAN_BINS`` log-spaced bins: within about 2.5% of the
    exact median), as `ConvexPolytopeTree._init_stump` does on arrays.
    One pass over the data, one all-reduce."""
    m, bins = len(stumps), MEDIAN_BINS
    kernels = [np.asarray(a["kernel"][t, n], np.float64) for t, n, _ in stumps]
    biases = [np.asarray(a["bias"][t, n], np.float64) for t, n, _ in stumps]

    def fn(feats, targets, w, stops):
        moments, hist = np.zeros((m, 3)), np.zeros((m, bins))
        for i, (t, _, nodes) in enumerate(stumps):
            at = np.isin(stops[:, t], nodes) & (w > 0)
            if not at.any():
                continue
            wc = w[at]
            rate = np.logaddexp(0.0, feats[at] @ kernels[i].T + biases[i]).mean(-1)
            moments[i] = [wc.sum(), (wc * rate).sum(), (wc * rate * rate).sum()]
            hist[i] = np.bincount(_bin_index(_log_values(rate), LOG_LOW, LOG_HIGH, bins), wc, bins)
        return [moments, hist]

    moments, hist = growth.accumulate(fn)
    edges = np.linspace(LOG_LOW, LOG_HIGH, bins + 1)
    for i, (t, n, _) in enumerate(stumps):
        total, s1, s2 = moments[i]
        if not total > 0:
            continue
        mean = s1 / total
        rate_std = math.sqrt(max(s2 / total - mean * mean, 0.0))
        log_scale = float(np.clip(np.log(1.0 / max(rate_std, 1e-6)), -9.0, 9.0))
        a["log_r"][t, n] = log_scale - math.log(layer.num_experts)
        cum = np.cumsum(hist[i])
        j = min(int(np.searchsorted(cum, 0.5 * cum[-1])), bins - 1)
        below = cum[j - 1] if j else 0.0
        frac = (0.5 * cum[-1] - below) / max(hist[i][j], 1e-300)  # linear inside the bin
        median = math.exp(edges[j] + min(max(frac, 0.0), 1.0) * (edges[j + 1] - edges[j]))
        a["p0"][t, n] = softplus_inverse(median * math.exp(log_scale))


def _stump_rows(layer, stumps, feats, w, stops):
    """Rows (positive weight) that reach a stump's children under the
    growth routing, their stump index and the stump's split value."""
    index = {n: i for i, (_, n) in enumerate(stumps)}
    stop = stops[:, 0]
    parent = np.where(stop > 0, (stop - 1) // 2, -1)
    at = np.flatnonzero(np.isin(parent, list(index)) & (w > 0))
    if not at.size:
        return at, at, np.zeros(0)
    rate = layer._split_values_numpy(feats[at].astype(np.float32))
    which = np.array([index[p] for p in parent[at]], np.int64)
    return at, which, rate[np.arange(len(at)), parent[at]]


def stream_thresholds(layer, growth, stumps):
    """``{(t, n): (threshold or None, gain)}``: the cut of each stump's split
    value ``S`` with the largest information gain (variance reduction) on a
    stream, from two passes (two all-reduces): where the node's values lie
    (``COARSE_BINS`` log-spaced bins on ``[LOG_LOW, LOG_HIGH]``), then
    ``THRESHOLD_BINS`` equal bins in ``log S`` over that range holding the
    samples, the class weights (target moments) and the weight. Candidate
    thresholds are the bin edges (a cut falls in the middle, in ``log S``,
    of the empty bins between two filled ones); the exact search on arrays
    (`best_threshold`) cuts between any two distinct values, so the
    two differ only when distinct values share a bin (a cut between them is
    missed) and in where the chosen gap is cut."""
    m = len(stumps)
    classifier = layer.is_classifier
    k = layer.num_classes if classifier else 1 + 2 * layer.units

    def coarse(feats, targets, w, stops):
        at, which, rate = _stump_rows(layer, stumps, feats, w, stops)
        out = np.zeros((m, COARSE_BINS))
        if at.size:
            np.add.at(out, (which, _bin_index(_log_values(rate), LOG_LOW, LOG_HIGH, COARSE_BINS)), 1.0)
        return [out]

    (where,) = growth.accumulate(coarse)
    edges = np.linspace(LOG_LOW, LOG_HIGH, COARSE_BINS + 1)
    ranges = np.zeros((m, 2))
    for i in range(m):
        filled = np.flatnonzero(where[i] > 0)
        if filled.size:
            ranges[i] = edges[filled[0]], edges[filled[-1] + 1]
    B = THRESHOLD_BINS

    def fine(feats, targets, w, stops):
        at, which, rate = _stump_rows(layer, stumps, feats, w, stops)
        samples, stats = np.zeros((m, B)), np.zeros((m, B, k))
        if at.size:
            log_v = _log_values(rate)
            inner = np.linspace(0.0, 1.0, B + 1)[1:-1]
            lo, hi = ranges[which, 0], ranges[which, 1]
            b = np.searchsorted(inner, (log_v - lo) / np.maximum(hi - lo, 1e-300), side="left")
            wa = w[at]
            if classifier:
                values = np.zeros((len(at), k))
                values[np.arange(len(at)), np.asarray(targets, np.int64)[at]] = wa
            else:
                y = np.asarray(targets, np.float64).reshape(len(feats), -1)[at]
                values = np.concatenate([wa[:, None], wa[:, None] * y, wa[:, None] * y * y], 1)
            np.add.at(samples, (which, b), 1.0)
            np.add.at(stats, (which, b), values)
        return [samples, stats]

    samples, stats = growth.accumulate(fine)
    msl = growth.options["min_samples_leaf"]
    out = {}
    for i, (t, n) in enumerate(stumps):
        cut, gain = _best_bin_cut(samples[i], stats[i], classifier, msl)
        if cut is None:
            out[(t, n)] = (None, 0.0)
            continue
        lo, hi = ranges[i]
        filled = np.flatnonzero(samples[i] > 0)
        nxt = filled[filled > cut][0]  # first filled bin right of the cut
        pos = lo + (hi - lo) * (cut + 1 + nxt) / (2.0 * B)  # middle of the empty bins between
        out[(t, n)] = (math.exp(pos), gain)
    return out


def _best_bin_cut(samples, stats, classifier, min_samples_leaf):
    """``(bin, gain)``: cut after ``bin`` (bins in increasing order of the
    split value) with the largest gain, as `best_threshold` on groups of
    samples; ``(None, 0.0)`` without a valid cut."""
    cs = np.cumsum(samples)[:-1]
    n = samples.sum()
    cum = np.cumsum(stats, 0)
    left, total = cum[:-1], cum[-1]
    if classifier:
        wl, W = left.sum(-1), total.sum()
    else:
        wl, W = left[:, 0], total[0]
    valid = (samples[:-1] > 0) & (cs >= min_samples_leaf) & (n - cs >= min_samples_leaf) & (wl > 0) & (W - wl > 0)
    if not valid.any() or not W > 0:
        return None, 0.0
    right = total[None] - left
    if classifier:
        def hsum(c):
            m = c.sum(-1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(c > 0, c * np.log(np.where(c > 0, c, 1.0) / np.maximum(m, 1e-300)), 0.0)
            return -t.sum(-1)

        parent, child = hsum(total[None])[0], hsum(left) + hsum(right)
    else:
        u = (stats.shape[1] - 1) // 2

        def sse(c):
            c0 = np.maximum(c[..., :1], 1e-300)
            return (c[..., 1 + u:] - c[..., 1:1 + u] ** 2 / c0).sum(-1)

        parent, child = float(sse(total[None])[0]), sse(left) + sse(right)
    gain = np.where(valid, (parent - child) / W, -np.inf)
    k = int(np.argmax(gain))
    return k, float(gain[k])


def stream_judge_stumps(layer, growth, a, stumps):
    """`ConvexPolytopeTree._judge_stumps` on a stream (histogram search)."""
    results = {}
    for (t, n), (threshold, gain) in stream_thresholds(layer, growth, stumps).items():
        ok = threshold is not None and gain > growth.options["min_gain"]
        if ok:
            a["threshold"][t, n] = threshold
        results[(t, n)] = gain if ok else None
    return results


def stream_set_leaves(layer, growth):
    """Every position's value from the samples routed through it by the
    committed splits (subtree totals at internal positions), as
    [`ConvexPolytopeTree.set_leaves_from_data`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.set_leaves_from_data] on arrays: one pass, one
    all-reduce. Positions no sample of positive weight reaches keep their value."""
    state = np.asarray(to_numpy(layer.node_state))
    N = layer.num_positions

    def fn(feats, targets, w, stops):
        if layer.is_classifier:
            values = np.eye(layer.num_classes)[np.asarray(targets, np.int64)]
        else:
            y = np.asarray(targets, np.float64).reshape(len(feats), -1)
            values = np.concatenate([np.ones((len(y), 1)), y], 1)
        return [node_sums(stops[:, 0], values, N, w, subtrees=True)]

    (stats,) = growth.accumulate(fn, is_split=topology.is_split_mask(state))
    old = np.asarray(to_numpy(layer.leaf_values))[0].astype(np.float64)
    if layer.is_classifier:
        total = stats.sum(-1, keepdims=True)
        new = np.where(total > 0, stats / np.maximum(total, 1e-300), old)
    else:
        mass = stats[:, :1]
        new = np.where(mass > 0, stats[:, 1:] / np.maximum(mass, 1e-300), old)
    layer.leaf_values.assign(new[None].astype(np.float32))


# --------------------------------------------------------------- objectives
def _stump_objective(layer, x, y, w, node, inverse_weight):
    """Weighted information objective of the stumps at ``node`` (one per sample)
    + prior / total weight of the training set (``inverse_weight`` is
    ``1 / total``: an argument, not a constant, so one compiled step serves
    every call). A parameter that became NaN or Inf (a diverged step) stops
    the training with an error naming it, as in every call of the layer."""
    # Everything below waits for the checks (inside tf.function too).
    x = batched.checked(layer._check_parameters, ops.cast(x, layer.variable_dtype))
    w = ops.cast(w, x.dtype)[:, None]
    kernel = ops.take(layer.expert_kernel[0], node, axis=0)
    bias = ops.take(layer.expert_bias[0], node, axis=0)
    r = ops.take(layer.expert_weights()[0], node, axis=0)
    s0 = ops.take(layer.rate0()[0], node)
    lam = ops.take(layer.steepness[0], node)
    _, log_r, log_l = poly.stump_log_probabilities(x, kernel, bias, r, s0, lam, layer.annealing)
    pr, pl = ops.exp(log_r)[:, None] * w, ops.exp(log_l)[:, None] * w
    ids = ops.concatenate([2 * node + 1, 2 * node + 2], axis=0)
    positions = layer.num_positions
    batch = ops.sum(w)
    if layer.is_classifier:
        onehot = ops.one_hot(ops.cast(y, "int32"), layer.num_classes, dtype=x.dtype)
        counts = ops.segment_sum(ops.concatenate([pl * onehot, pr * onehot], 0), ids, num_segments=positions)
        loss = conditional_entropy_from_counts(counts, total=batch)
    else:
        y = ops.cast(y, x.dtype)
        p = ops.concatenate([pl, pr], 0)
        yy = ops.concatenate([y, y], 0)
        m = ops.segment_sum(ops.concatenate([p, p * yy, p * yy * yy], 1), ids, num_segments=positions)
        u = layer.units
        loss = leaf_variance_from_moments(m[:, 0], m[:, 1: 1 + u], m[:, 1 + u:], batch)
    return loss + _prior(layer, inverse_weight)


def _tree_objective(layer, x, y, w, inverse_weight):
    """Weighted joint objective of the probabilistic tree (Algorithm 1) + prior."""
    x = ops.cast(x, layer.variable_dtype)
    w = ops.cast(w, x.dtype)[:, None]
    batch = ops.sum(w)
    # Soft (weighted) counts sum_b w_b mu_l(x_b) [...] per position (pruned routing).
    if layer.is_classifier:
        onehot = ops.one_hot(ops.cast(y, "int32"), layer.num_classes, dtype=x.dtype)
        loss = conditional_entropy_from_counts(layer.leaf_statistics(x, onehot * w), total=batch)
    else:
        y = ops.cast(y, x.dtype)
        u = layer.units
        m = layer.leaf_statistics(x, ops.concatenate([w, w * y, w * y * y], axis=1))
        loss = leaf_variance_from_moments(m[:, 0], m[:, 1: 1 + u], m[:, 1 + u:], batch)
    return loss + _prior(layer, inverse_weight)


def _prior(layer, inverse_weight):
    if layer.prior is None:
        return 0.0
    penalty = layer.prior(layer.log_expert_weight[0], layer.expert_kernel[0], layer.trained_splits[0])
    return penalty * ops.cast(inverse_weight, penalty.dtype)


def _train_step(layer, kind, learning_rate):
    """``(optimizer, step)`` for ``kind`` ("stump" or "tree") of ``layer``.

    One Adam and one compiled step per layer and kind, kept on the layer and
    reused by later calls with a fresh optimizer state and the new learning
    rate (as a new Adam would be), so growing a tree again does not compile
    again. The objective reads the layer's variables at every call.
    """
    cache = layer.__dict__.setdefault("_polytope_train_steps", {})
    if kind not in cache:
        objective = {"stump": _stump_objective, "tree": _tree_objective}[kind]
        optimizer = keras.optimizers.Adam(learning_rate)
        step = make_train_step(lambda *args: objective(layer, *args), layer.trainable_variables, optimizer,
                               state_variables=layer.variables)
        cache[kind] = (optimizer, step)
        return cache[kind]
    optimizer, step = cache[kind]
    _reset_optimizer(optimizer)
    optimizer.learning_rate.assign(float(learning_rate))
    return optimizer, step


def _reset_optimizer(optimizer):
    """Fresh optimizer state (step count and moments), keeping the learning rate:
    a new Adam per level without building (and compiling) a new step."""
    lr = optimizer.learning_rate
    for v in optimizer.variables:
        if v is lr or v.path.endswith("learning_rate"):
            continue
        v.assign(np.zeros(v.shape, dtype=v.dtype))


def _epoch(step, rng, idx, batch_size, capacity, arrays, weights32, shared, after=()):
    """One epoch of shuffled mini-batches of ``idx`` (`_batches`, the
    same draws of ``rng``) in one call of ``step.many``: each step's
    arguments are the batch's rows of each array of ``arrays``, the batch
    weights (0 for the filler rows), the batch's rows of each array of
    ``after``, then ``shared``; stacked to ``capacity`` batches (filler
    batches past the epoch's, never stepped on), so every epoch of a fit
    runs one compiled program. Returns (loss sum weighted by batch weight,
    weight sum)."""
    chunks = list(_batches(rng, idx, batch_size))
    count = len(chunks)
    sel = np.stack([part for part, _ in chunks] + [chunks[0][0]] * (capacity - count))
    keep = np.stack([k for _, k in chunks] + [np.zeros_like(chunks[0][1])] * (capacity - count))
    wb = np.where(keep, weights32[sel], np.float32(0))
    losses = step.many([a[sel] for a in arrays] + [wb] + [a[sel] for a in after], shared, count)
    total, mass = 0.0, 0.0
    for loss, w in zip(losses, wb[:count].sum(axis=1, dtype=np.float64)):
        total += float(loss) * float(w)
        mass += float(w)
    return total, mass


def _batches(rng, idx, batch_size):
    """Shuffled mini-batches of ``idx``, all of ``batch_size`` rows: the last one
    is filled up with copies of its first sample, flagged by ``keep`` (their
    weight is set to 0, so they change nothing). One batch shape means one
    compiled step (``jax.jit`` and ``tf.function`` specialize on shapes)."""
    return _padded_chunks(rng.permutation(idx), batch_size)


def anneal(layer, epoch, increment, mask=None, max_steepness=None):
    """``lambda = steepness0 + increment * epoch`` at the splits in ``mask``
    (default: the layer's ``trained_splits``); shared with the callback."""
    lam = np.array(to_numpy(layer.steepness))
    mask = np.asarray(to_numpy(layer.trained_splits) if mask is None else mask).astype(bool)
    value = layer.initial_steepness + increment * epoch
    if max_steepness is not None:
        value = min(value, max_steepness)
    lam[mask] = value
    layer.steepness.assign(lam)


# --------------------------------------------------------------- arguments
def _check_training_args(epochs, batch_size, learning_rate, increment):
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"epochs must be an integer >= 0, got {epochs!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not (math.isfinite(float(learning_rate)) and float(learning_rate) > 0):
        raise ValueError(f"learning_rate must be a finite number > 0, got {learning_rate!r}")
    if not (math.isfinite(float(increment)) and float(increment) >= 0):
        raise ValueError(f"annealing_increment must be a finite number >= 0, got {increment!r}")


def _check_verbose(verbose):
    """Keras convention: ``"auto"`` (= 1), 0 (silent), 1 or 2 (one line per level / epoch)."""
    if isinstance(verbose, str) and verbose == "auto":
        return 1
    if isinstance(verbose, bool) or not isinstance(verbose, (int, np.integer)) or verbose not in (0, 1, 2):
        raise ValueError(f'verbose must be "auto", 0, 1 or 2, got {verbose!r}')
    return int(verbose)


def _targets(layer, y, w):
    """Training targets as float32 (classes as ids; regression standardized with the weights)."""
    if layer.is_classifier:
        return y.astype(np.float32), None
    mean = np.average(y, axis=0, weights=w)
    std = np.sqrt(np.average((y - mean) ** 2, axis=0, weights=w))
    std = np.where(std > 0, std, 1.0)
    return ((y - mean) / std).astype(np.float32), (mean, std)


def _validation(layer, validation_data, where):
    """``(x_val, y_val, w_val)`` from ``(x, y)`` or ``(x, y, sample_weight)``."""
    if validation_data is None:
        return None
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
        raise ValueError(f"{where}: validation_data must be (x_val, y_val) or (x_val, y_val, sample_weight_val)")
    x_val, y_val = layer._check_xy(validation_data[0], validation_data[1], f"{where} validation_data")
    w = validation_data[2] if len(validation_data) == 3 else None
    return x_val, y_val, sample_weights(y_val, w, None, layer.num_classes, f"{where} validation_data")


def _scores(layer, pred, y, w):
    """Weighted accuracy (classification) or negative MSE of predictions."""
    pred = np.asarray(pred, dtype=np.float64)
    if layer.is_classifier:
        return float(np.average(pred.argmax(1) == y, weights=w))
    return -float(np.average(((pred - y) ** 2).mean(-1), weights=w))


def _score(layer, x, y, w=None):
    """Score of the deterministic tree (accuracy or negative MSE)."""
    node = layer._route_numpy(x)
    values = np.asarray(to_numpy(layer.leaf_values))[0]
    return _scores(layer, values[node], y, w)


def _score_name(layer):
    return "val_accuracy" if layer.is_classifier else "val_mse"


def _shown_score(layer, score):
    return score if layer.is_classifier else -score


# --------------------------------------------------------------- stream data
def _in_memory(x, y):
    """Arrays (with ``y``) or a stream of batches (``y=None``)."""
    if y is not None:
        return True
    if streaming._is_array_like(x):
        raise ValueError("x is an array, so y (the labels) is needed as well; pass y=None only with a dataset "
                         "of (x, y[, sample_weight]) batches")
    return False


def _stream_source(layer, x, sample_weight, class_weight, where):
    """``(data, source)``: the stream (this worker's part) and a function
    returning its checked batches ``(x float32, y, weights float64)``."""
    if sample_weight is not None:
        raise ValueError(f"{where}: with a dataset, give the sample weights inside its batches (x, y, sample_weight)")
    data = streaming.stream(x, name=where)
    table = None
    if class_weight is not None:
        if not layer.is_classifier:
            raise ValueError(f"{where}: class_weight needs a classification tree (num_classes)")
        table = class_weight_table(class_weight, layer.num_classes, where)

    def source():
        for xb, yb, wb in data:
            if len(yb) == 0:
                continue
            xb, yb = layer._check_xy(xb, yb, where)
            yield xb, yb, batch_weights(yb, wb, table, where)

    return data, source


def _stream_totals(growth, layer):
    """Total weight, samples of positive weight and (regression) the weighted
    mean and standard deviation of the targets: one pass."""
    u = 1 if layer.is_classifier else layer.units

    def fn(feats, targets, w, stops):
        y = np.zeros((len(w), u)) if layer.is_classifier else np.asarray(targets, np.float64).reshape(len(w), u)
        return [np.array([w.sum(), float((w > 0).sum())]), (w[:, None] * y).sum(0), (w[:, None] * y * y).sum(0)]

    head, s1, s2 = growth.accumulate(fn, is_split=None)
    total, count = float(head[0]), int(round(head[1]))
    if not total > 0:
        raise ValueError(f"{growth.layer.name}: all sample weights (sample_weight times class_weight) are 0")
    mean = s1 / total
    std = np.sqrt(np.maximum(s2 / total - mean * mean, 0.0))
    return total, count, (mean, np.where(std > 0, std, 1.0))


def _stream_targets(layer, y, scaling):
    if layer.is_classifier:
        return y.astype(np.float32)
    mean, std = scaling
    return ((y - mean) / std).astype(np.float32)


def _padded_chunks(sel, size):
    """Chunks of ``size`` row indices, the last one filled up with copies of
    its first row, flagged by ``keep`` (their weight is set to 0)."""
    for start in range(0, len(sel), size):
        part = sel[start: start + size]
        keep = np.ones(size, bool)
        if len(part) < size:
            keep[len(part):] = False
            part = np.concatenate([part, np.full(size - len(part), part[0])])
        yield part, keep


def _worker_steps(growth, data, size, rows, is_split=None):
    """``(mine, most)``: this worker's optimizer steps per epoch (chunks of
    ``size`` of the rows ``rows(stops, weights)`` picks in each batch) and the
    most any worker makes (one pass, one all-reduce). Synchronous
    ``tf.distribute`` steps are collectives: a worker with fewer makes
    zero-weight steps until every worker made ``most``."""
    num, index = data.num_workers, data.worker_index

    def fn(feats, targets, w, stops):
        out = np.zeros(num)
        out[index] = -(-int(rows(stops, w).size) // size)
        return [out]

    (steps,) = growth.accumulate(fn, is_split=is_split)
    return int(round(steps[index])), int(round(steps.max()))


def _idle_steps(count, step, size, dim, node, inverse_weight, classifier, units):
    """``count`` steps on rows of weight 0 (the data terms vanish), so that
    this worker takes part in every synchronized step of the others."""
    x = np.zeros((size, dim), np.float32)
    y = np.zeros(size, np.float32) if classifier else np.zeros((size, units), np.float32)
    w = np.zeros(size, np.float32)
    for _ in range(count):
        if node is None:
            step(x, y, w, inverse_weight)
        else:
            step(x, y, w, np.full(size, node, np.int32), inverse_weight)


def _fit_greedy_stream(layer, x, validation_data, depth_limit, epochs, batch_size, learning_rate,
                       annealing_increment, min_samples_split, min_samples_leaf, min_gain, refine_epochs,
                       refine_learning_rate, verbose, sample_weight, class_weight):
    """`fit_greedy` on a stream of batches (see its docstring)."""
    data, source = _stream_source(layer, x, sample_weight, class_weight, "fit_greedy")
    layer._ensure_built(data.sample())
    val = _validation(layer, validation_data, "fit_greedy")
    growth = LevelGrowth.streamed(
        layer, source, min_samples_split=max(int(min_samples_split), 2 * int(min_samples_leaf)),
        count_samples=True, max_depth=depth_limit, feature_moments=2,
        options={"min_samples_leaf": int(min_samples_leaf), "min_gain": min_gain},
    )
    total_weight, count, scaling = _stream_totals(growth, layer)
    growth.start()
    history = {"levels": [], "validation": {}}
    size = min(int(batch_size), count)
    inverse_weight = np.asarray(1.0 / total_weight, np.float32)
    leaves_set = False
    for level in range(depth_limit):
        mask = np.asarray(to_numpy(layer.trained_splits)) > 0  # this level's stumps
        candidates = np.flatnonzero(mask[0])
        if not candidates.size:
            break
        routing = topology.is_split_mask(np.asarray(to_numpy(layer.node_state)))
        _, step = _train_step(layer, "stump", learning_rate)  # fresh Adam state per level
        idle = 0
        if data.num_workers > 1 and epochs:
            mine, most = _worker_steps(growth, data, size, lambda stops, w: np.flatnonzero(
                np.isin(stops[:, 0], candidates) & (w > 0)), routing)
            idle = most - mine
        losses = []
        for epoch in range(epochs):
            anneal(layer, epoch, annealing_increment, mask)
            total, mass = 0.0, 0.0
            for xb, yb, wb in source():
                node = layer.route_rows(xb, routing)[:, 0]
                sel = np.flatnonzero(np.isin(node, candidates) & (wb > 0))
                if not sel.size:
                    continue
                targets, w32 = _stream_targets(layer, yb, scaling), wb.astype(np.float32)
                for part, keep in _padded_chunks(sel, size):
                    w_part = np.where(keep, w32[part], np.float32(0))
                    wsum = float(w_part.sum(dtype=np.float64))
                    loss = step(xb[part], targets[part], w_part, node[part].astype(np.int32), inverse_weight)
                    total += float(loss) * wsum
                    mass += wsum
            _idle_steps(idle, step, size, layer.feature_dim, int(candidates[0]), inverse_weight,
                        layer.is_classifier, getattr(layer, "units", 1))
            losses.append(total / max(mass, 1e-300))
        # Deterministic splits: the best threshold on each stump's split function (histogram search).
        stumps, committed = growth.end_round()
        stream_set_leaves(layer, growth)
        leaves_set = True
        _record_level(layer, history, level, stumps, committed, losses, val, verbose, depth_limit)
    if not leaves_set:
        stream_set_leaves(layer, growth)
    if val is not None:
        history["validation"] = select_depth(layer, *val)
    if refine_epochs:
        history["refine"] = refine(
            layer, x, validation_data=validation_data, epochs=refine_epochs, batch_size=batch_size,
            learning_rate=refine_learning_rate or learning_rate * 0.1, annealing_increment=annealing_increment,
            verbose=verbose, class_weight=class_weight,
        )
    history["depth"] = layer.depth()
    history["leaves"] = layer.num_leaves()
    return history


def _record_level(layer, history, level, stumps, committed, losses, val, verbose, depth_limit):
    """Appends one grown level's record to ``history["levels"]`` (and prints it)."""
    record = {"level": level, "candidates": len(stumps), "splits": len(committed),
              "depth": layer.depth(), "leaves": layer.num_leaves(),
              "loss": losses[-1] if losses else None}
    if val is not None:
        record["val_score"] = _score(layer, *val)
    history["levels"].append(record)
    if not verbose:
        return
    line = (f"Level {level + 1}/{depth_limit} - depth: {record['depth']} - leaves: {record['leaves']}"
            f" - splits: {record['splits']}/{record['candidates']}")
    if record["loss"] is not None:
        line += f" - objective: {record['loss']:.4f}"
    if val is not None:
        line += f" - {_score_name(layer)}: {_shown_score(layer, record['val_score']):.4f}"
    print_msg(line)


def _refine_start(layer, is_split, start_steepness):
    """Starts `refine`: each split's ``S0`` at its threshold (so the
    probabilistic tree starts at the deterministic one) and its splits
    trainable. Returns the start steepness (default: the largest current one)."""
    thr = np.asarray(to_numpy(layer.threshold), dtype=np.float64)
    p0 = np.array(to_numpy(layer.p0_logit))
    p0[is_split] = softplus_inverse(thr[is_split])
    layer.p0_logit.assign(p0)
    layer.trained_splits.assign(is_split.astype(np.float32))
    if start_steepness is not None:
        return float(start_steepness)
    return float(np.asarray(to_numpy(layer.steepness))[is_split].max())


def _refine_steepness(layer, is_split, steepness):
    """The splits' steepness for one refinement epoch."""
    anneal(layer, 0, 0.0, is_split)  # reset to steepness0, then offset
    lam = np.array(to_numpy(layer.steepness))
    lam[is_split] = steepness
    layer.steepness.assign(lam)


def _refine_finish(layer, is_split, set_leaves, losses, val, before, backup, verbose):
    """Ends `refine`: thresholds become ``S0`` (``f_lambda = 0.5``),
    ``set_leaves()`` resets the leaves from the training data, and with
    validation data the refinement is undone when it lowers the score."""
    thr = np.array(to_numpy(layer.threshold))
    thr[is_split] = np.asarray(to_numpy(layer.rate0()))[is_split]
    layer.threshold.assign(thr)
    layer.trained_splits.assign(np.zeros_like(is_split, dtype=np.float32))
    set_leaves()
    result = {"losses": losses, "kept": True}
    if before is not None:
        after = _score(layer, *val)
        result.update(before=before, after=after)
        if after < before:
            for v, value in zip(layer.weights, backup):
                v.assign(value)
            result["kept"] = False
        if verbose:
            print_msg(f"Refinement {'kept' if result['kept'] else 'undone'} - {_score_name(layer)}: "
                      f"{_shown_score(layer, before):.4f} -> {_shown_score(layer, after):.4f}")
    return result


def _refine_stream(layer, x, validation_data, epochs, batch_size, learning_rate, annealing_increment,
                   start_steepness, verbose, sample_weight, class_weight):
    """`refine` on a stream of batches."""
    data, source = _stream_source(layer, x, sample_weight, class_weight, "refine")
    layer._ensure_built(data.sample())
    val = _validation(layer, validation_data, "refine")
    state = np.asarray(to_numpy(layer.node_state))
    is_split = topology.is_split_mask(state)
    if not is_split.any() or epochs == 0:
        return {"losses": [], "kept": False}
    growth = LevelGrowth.streamed(layer, source, feature_moments=0)
    total_weight, count, scaling = _stream_totals(growth, layer)
    backup = [np.array(to_numpy(v)) for v in layer.weights]
    before = _score(layer, *val) if val is not None else None
    lam0 = _refine_start(layer, is_split, start_steepness)
    _, step = _train_step(layer, "tree", learning_rate)
    inverse_weight = np.asarray(1.0 / total_weight, np.float32)
    size = min(int(batch_size), count)
    idle = 0
    if data.num_workers > 1:
        mine, most = _worker_steps(growth, data, size, lambda stops, w: np.flatnonzero(w > 0))
        idle = most - mine
    losses = []
    for epoch in range(epochs):
        _refine_steepness(layer, is_split, lam0 + annealing_increment * epoch)
        total, mass = 0.0, 0.0
        for xb, yb, wb in source():
            sel = np.flatnonzero(wb > 0)
            if not sel.size:
                continue
            targets, w32 = _stream_targets(layer, yb, scaling), wb.astype(np.float32)
            if not layer.is_classifier:
                targets = targets.reshape(len(targets), -1)
            for part, keep in _padded_chunks(sel, size):
                w_part = np.where(keep, w32[part], np.float32(0))
                wsum = float(w_part.sum(dtype=np.float64))
                total += float(step(xb[part], targets[part], w_part, inverse_weight)) * wsum
                mass += wsum
        _idle_steps(idle, step, size, layer.feature_dim, None, inverse_weight, layer.is_classifier,
                    getattr(layer, "units", 1))
        losses.append(total / max(mass, 1e-300))
        if verbose:
            print_msg(f"Refine epoch {epoch + 1}/{epochs} - objective: {losses[-1]:.4f}")
    return _refine_finish(layer, is_split, lambda: stream_set_leaves(layer, growth), losses, val, before, backup, verbose)


# --------------------------------------------------------------- greedy
def fit_greedy(layer, x, y=None, validation_data=None, max_depth=None, epochs=20, batch_size=512,
               learning_rate=0.01, annealing_increment=0.1, min_samples_split=10, min_samples_leaf=1,
               min_gain=1e-6, refine_epochs=0, refine_learning_rate=None, verbose="auto",
               sample_weight=None, class_weight=None):
    """Grows the tree from a root stump (Section 3.3.2) and sets its leaves.

    Args:
        x, y: training data (integer classes or float targets), or a stream
            of batches as ``x`` and ``y=None`` (see "Streams" below).
        validation_data: optional ``(x_val, y_val)`` or
            ``(x_val, y_val, sample_weight_val)``: the tree is cut back to the
            depth with the best (weighted) validation score (the lowest
            error rate, ties broken by the log loss, then the shallowest
            depth; the lowest MSE for regression: `depth_score`), and a
            refinement is kept only if it does not lower the validation
            accuracy (raise the MSE).
        max_depth: growth limit (default: the layer's ``max_depth``).
        epochs: training epochs of each level's stumps (on their samples).
        batch_size, learning_rate: Adam mini-batches (fresh Adam per level).
        annealing_increment: ``lambda`` grows by this per epoch from the
            layer's ``steepness`` (Appendix B).
        min_samples_split: nodes with fewer samples stay leaves.
        min_samples_leaf: thresholds leave at least this many samples per side.
        min_gain: smallest information gain (variance reduction per unit of
            weight of the node) that makes a split.
        refine_epochs: optional joint refinement afterwards (`refine`).
        verbose: ``"auto"`` (1), 0 (silent), 1 or 2: one line per level with
            its depth, the number of leaves, the stumps' objective (last
            epoch) and, with validation data, the validation score.
        sample_weight: optional ``(n,)`` weights of the training samples.
        class_weight: optional ``{class: weight}`` multiplied into
            ``sample_weight`` (classification).

    Returns:
        A dict with per-level ``levels`` records, the validation score per
        depth (``validation``: ``{depth: [error, log loss]}``, for regression
        ``{depth: [mse]}``), ``depth`` and ``leaves``.

    Streams: ``x`` may also be a batched ``tf.data.Dataset``, a
    ``keras.utils.PyDataset`` or a re-iterable of ``(x, y)`` /
    ``(x, y, sample_weight)`` batches (``y=None``, weights inside the
    batches; [`keras_trees.streaming.stream`][keras_trees.streaming.stream]). Every statistic is then
    summed batch by batch (and across workers), no row is kept: stumps train
    each epoch on the stream's batches in its own order (the rows of each
    batch at this level's stumps, in mini-batches of ``batch_size``), new
    stumps' ``S0`` is a histogram median (`stream_finish_stumps`) and
    thresholds come from a histogram search (`stream_thresholds`)
    instead of the exact search over sorted values used for arrays, so the
    thresholds (and possibly the splits) can differ slightly from the
    arrays'. Several workers (a multi-worker ``tf.distribute`` strategy) each
    step on their own shard, and the strategy's gradient all-reduce keeps
    the replicas equal; a worker with fewer mini-batches makes steps on
    rows of weight 0 (only the prior's gradient) so that every worker takes
    part in every synchronized step. JAX and PyTorch steps are not
    synchronized across processes: there only the statistics are summed.
    """
    _check_training_args(epochs, batch_size, learning_rate, annealing_increment)
    verbose = _check_verbose(verbose)
    depth_limit = layer.max_depth if max_depth is None else int(max_depth)
    if not 1 <= depth_limit <= layer.max_depth:
        raise ValueError(f"max_depth must be in [1, {layer.max_depth}] (the layer's max_depth), got {max_depth}")
    if isinstance(min_samples_split, bool) or int(min_samples_split) < 2:
        raise ValueError(f"min_samples_split must be an integer >= 2, got {min_samples_split!r}")
    if int(min_samples_leaf) < 1:
        raise ValueError(f"min_samples_leaf must be an integer >= 1, got {min_samples_leaf!r}")
    if not _in_memory(x, y):
        return _fit_greedy_stream(
            layer, x, validation_data, depth_limit, epochs, batch_size, learning_rate, annealing_increment,
            min_samples_split, min_samples_leaf, min_gain, refine_epochs, refine_learning_rate, verbose,
            sample_weight, class_weight)
    layer._ensure_built(x)
    x, y = layer._check_xy(x, y, "fit_greedy")
    w = sample_weights(y, sample_weight, class_weight, layer.num_classes, "fit_greedy")
    val = _validation(layer, validation_data, "fit_greedy")
    total_weight = float(w.sum())
    targets, _ = _targets(layer, y, w)
    weights32 = w.astype(np.float32)
    positive = w > 0
    # Level growth (keras_trees.layers._level_growth): the engine routes,
    # counts, commits and puts fresh stumps (the layer's _init_stump) on the
    # leaves that may split; the thresholds come from the layer's _judge_stumps.
    growth = LevelGrowth(
        layer, x, y, w, min_samples_split=max(int(min_samples_split), 2 * int(min_samples_leaf)),
        count_samples=True, max_depth=depth_limit,
        options={"min_samples_leaf": int(min_samples_leaf), "min_gain": min_gain},
    )
    growth.start()
    history = {"levels": [], "validation": {}}
    rng = numpy_generator(layer.seed)
    batch = capacity = None
    inverse_weight = np.asarray(1.0 / total_weight, np.float32)
    for level in range(depth_limit):
        mask = np.asarray(to_numpy(layer.trained_splits)) > 0  # this level's stumps
        candidates = np.flatnonzero(mask[0])
        if not candidates.size:
            break
        node = growth.stops[:, 0]  # each sample's leaf: its stump
        idx = np.flatnonzero(np.isin(node, candidates) & positive)
        if batch is None:  # the root's samples: every level's batches have this size, and the most of them
            batch = min(int(batch_size), len(idx))
            capacity = -(-len(idx) // batch)
        _, step = _train_step(layer, "stump", learning_rate)  # fresh Adam state per level
        node32 = node.astype(np.int32)
        losses = []
        for epoch in range(epochs):
            anneal(layer, epoch, annealing_increment, mask)
            # The arguments of every step: x, targets, weights, node, inverse weight.
            total, mass = _epoch(step, rng, idx, batch, capacity, [x, targets], weights32, [inverse_weight],
                                 after=[node32])
            losses.append(total / max(mass, 1e-300))
        # Deterministic splits: the best threshold on each stump's split function.
        stumps, committed = growth.end_round()
        layer.set_leaves_from_data(x, y, sample_weight=w)
        _record_level(layer, history, level, stumps, committed, losses, val, verbose, depth_limit)
    layer.set_leaves_from_data(x, y, sample_weight=w)
    if val is not None:
        history["validation"] = select_depth(layer, *val)
    if refine_epochs:
        history["refine"] = refine(
            layer, x, y, validation_data=validation_data, epochs=refine_epochs, batch_size=batch_size,
            learning_rate=refine_learning_rate or learning_rate * 0.1, annealing_increment=annealing_increment,
            verbose=verbose, sample_weight=w,
        )
    history["depth"] = layer.depth()
    history["leaves"] = layer.num_leaves()
    return history


def weighted_median(values, weights):
    if np.all(weights == weights[0]):
        return float(np.median(values))
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][min(int(np.searchsorted(cum, 0.5 * cum[-1])), len(values) - 1)])


def depth_score(layer, pred, y, w=None):
    """Validation score of predictions ``pred`` (leaf values), lower is
    better: ``[error rate, log loss]`` of a classifier (its leaves hold class
    distributions; `keras_trees._scores.error_and_log_loss`, whose
    exactly summed error rates tie and leave the choice to the log loss),
    ``[mean squared error]`` of a regressor; weighted by ``w``."""
    pred = np.asarray(pred, dtype=np.float64)
    if not layer.is_classifier:
        return [validation_scores.mean_squared_error(pred, y, w)]
    proba = pred / np.maximum(pred.sum(axis=1, keepdims=True), 1e-300)
    return list(validation_scores.error_and_log_loss(proba, y, w))


def select_depth(layer, x_val, y_val, w_val=None, min_depth=0):
    """Cuts the tree back to the depth with the best (weighted) validation
    score (`depth_score`: the error rate, then the log loss, of a
    classifier; the squared error of a regressor; ties: the shallowest),
    among the depths from ``min_depth`` (or the tree's depth, if smaller) to
    the tree's depth. Needs values at internal positions (set by
    `set_leaves_from_data`). Returns ``{depth: score}`` (every depth,
    those below ``min_depth`` included)."""
    state = np.asarray(to_numpy(layer.node_state))
    full = layer._route_numpy(x_val)
    values = np.asarray(to_numpy(layer.leaf_values))[0]
    depth = topology.tree_depth(state, 0)
    scores = {d: depth_score(layer, values[topology.ancestor_at_depth(full, d)], y_val, w_val)
              for d in range(0, depth + 1)}
    best = min(range(min(min_depth, depth), depth + 1), key=lambda d: (scores[d], d))
    layer.node_state.assign(topology.cut_at_depth(state, 0, best))
    return scores


# --------------------------------------------------------------- refinement
def refine(layer, x, y=None, validation_data=None, epochs=10, batch_size=512, learning_rate=1e-3,
           annealing_increment=0.1, start_steepness=None, verbose=0, sample_weight=None, class_weight=None):
    """Joint refinement of all splits of the current topology (Algorithm 1).

    Each node's ``S0`` starts at its threshold (so the probabilistic tree
    starts at the deterministic one), all splits train with the (weighted)
    information objective of the whole tree and the prior, ``lambda`` grows by
    ``annealing_increment`` per epoch from ``start_steepness`` (default: the
    layer's largest current steepness), and finally thresholds become ``S0``
    (``f_lambda = 0.5``) and leaves are reset from the training data. With
    ``validation_data`` (``(x, y)`` or ``(x, y, sample_weight)``) the
    refinement is undone when it lowers the validation score. ``verbose``
    (``"auto"``, 0, 1 or 2) prints one line per epoch. Returns a dict of
    losses and scores.

    ``x`` may be a stream of batches (``y=None``), as for `fit_greedy`:
    the steps then follow the stream's batches, and the leaves come from one
    streamed pass.
    """
    _check_training_args(epochs, batch_size, learning_rate, annealing_increment)
    verbose = _check_verbose(verbose)
    if not _in_memory(x, y):
        return _refine_stream(layer, x, validation_data, epochs, batch_size, learning_rate, annealing_increment,
                              start_steepness, verbose, sample_weight, class_weight)
    layer._ensure_built(x)
    x, y = layer._check_xy(x, y, "refine")
    w = sample_weights(y, sample_weight, class_weight, layer.num_classes, "refine")
    val = _validation(layer, validation_data, "refine")
    state = np.asarray(to_numpy(layer.node_state))
    is_split = topology.is_split_mask(state)
    if not is_split.any() or epochs == 0:
        return {"losses": [], "kept": False}
    backup = [np.array(to_numpy(v)) for v in layer.weights]
    before = None
    if val is not None:
        before = _score(layer, *val)
    lam0 = _refine_start(layer, is_split, start_steepness)
    targets, _ = _targets(layer, y, w)
    if not layer.is_classifier:
        targets = targets.reshape(len(targets), -1)
    weights32 = w.astype(np.float32)
    idx = np.flatnonzero(w > 0)
    total_weight = float(w.sum())
    _, step = _train_step(layer, "tree", learning_rate)
    inverse_weight = np.asarray(1.0 / total_weight, np.float32)
    rng = numpy_generator(layer.seed)
    batch = min(int(batch_size), len(idx))
    losses = []
    capacity = -(-len(idx) // batch)
    for epoch in range(epochs):
        _refine_steepness(layer, is_split, lam0 + annealing_increment * epoch)
        total, mass = _epoch(step, rng, idx, batch, capacity, [x, targets], weights32, [inverse_weight])
        losses.append(total / max(mass, 1e-300))
        if verbose:
            print_msg(f"Refine epoch {epoch + 1}/{epochs} - objective: {losses[-1]:.4f}")
    return _refine_finish(layer, is_split, lambda: layer.set_leaves_from_data(x, y, sample_weight=w), losses, val, before, backup, verbose)
