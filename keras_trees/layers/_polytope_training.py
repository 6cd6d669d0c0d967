"""Training of convex polytope trees (Armandpour & Zhou 2021, Section 3.3, Algorithm 1).

Not public: use :meth:`ConvexPolytopeTree.fit_greedy` and
:meth:`ConvexPolytopeTree.refine`.

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
"""

import math

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_trees import topology
from keras_trees.losses.conditional_entropy import conditional_entropy_from_counts
from keras_trees.losses.leaf_variance import leaf_variance_from_moments
from keras_trees.ops import polytope as poly


def _softplus_inverse(y):
    y = np.maximum(np.asarray(y, dtype=np.float64), 1e-12)
    return np.where(y > 30, y, np.log(np.expm1(np.minimum(y, 30.0))))


# --------------------------------------------------------------- thresholds
def best_threshold(rate, y, num_classes=None, min_samples_leaf=1):
    """Threshold on a node's split function with the largest information gain.

    Samples with ``rate <= threshold`` go left. Classification (``num_classes``
    given, integer ``y``) minimizes ``n0/N H(left) + (N-n0)/N H(right)``
    (Section 3.3.2); regression (``num_classes=None``, ``y`` of shape ``(n,)``
    or ``(n, units)``) minimizes the summed within-child squared error.

    Returns:
        ``(threshold, gain, n_left)``; ``(None, 0.0, 0)`` when no cut leaves at
        least ``min_samples_leaf`` samples on each side (e.g. all rates equal).
        ``gain`` is in nats (classification) or squared units per sample.

    >>> import numpy as np
    >>> t, gain, n0 = best_threshold(np.array([0.1, 0.2, 0.9, 1.0]), np.array([0, 0, 1, 1]), 2)
    >>> round(t, 3), round(gain, 4), n0
    (0.55, 0.6931, 2)
    """
    rate = np.asarray(rate, dtype=np.float64).ravel()
    n = len(rate)
    if n < 2 * min_samples_leaf or n < 2:
        return None, 0.0, 0
    order = np.argsort(rate, kind="stable")
    s = rate[order]
    i = np.arange(1, n)  # left = first i samples
    valid = (s[1:] > s[:-1]) & (i >= min_samples_leaf) & (n - i >= min_samples_leaf)
    if not valid.any():
        return None, 0.0, 0
    if num_classes is not None:
        yy = np.asarray(y).ravel()[order].astype(np.int64)
        onehot = np.zeros((n, num_classes))
        onehot[np.arange(n), yy] = 1.0
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
        yy = yy - yy.mean(0)
        c1, c2 = np.cumsum(yy, 0), np.cumsum(yy * yy, 0)
        nl = i[:, None].astype(np.float64)
        sse_l = c2[:-1] - c1[:-1] ** 2 / nl
        r1, r2 = c1[-1] - c1[:-1], c2[-1] - c2[:-1]
        sse_r = r2 - r1**2 / (n - nl)
        parent = float((c2[-1] - c1[-1] ** 2 / n).sum())
        child = (sse_l + sse_r).sum(-1)
    gain = (parent - child) / n
    gain = np.where(valid, gain, -np.inf)
    k = int(np.argmax(gain))
    return float(0.5 * (s[k] + s[k + 1])), float(gain[k]), k + 1


# --------------------------------------------------------------- objectives
def _stump_objective(layer, x, y, node, num_samples):
    """Information objective of the stumps at ``node`` (one per sample) + prior."""
    kernel = ops.take(layer.expert_kernel[0], node, axis=0)
    bias = ops.take(layer.expert_bias[0], node, axis=0)
    r = ops.take(layer.expert_weights()[0], node, axis=0)
    s0 = ops.take(layer.rate0()[0], node)
    lam = ops.take(layer.steepness[0], node)
    _, log_r, log_l = poly.stump_log_probabilities(x, kernel, bias, r, s0, lam, layer.annealing)
    pr, pl = ops.exp(log_r)[:, None], ops.exp(log_l)[:, None]
    ids = ops.concatenate([2 * node + 1, 2 * node + 2], axis=0)
    positions = layer.num_positions
    batch = ops.cast(ops.shape(x)[0], x.dtype)
    if layer.is_classifier:
        onehot = ops.one_hot(ops.cast(y, "int32"), layer.num_classes, dtype=x.dtype)
        counts = ops.segment_sum(ops.concatenate([pl * onehot, pr * onehot], 0), ids, num_segments=positions)
        loss = conditional_entropy_from_counts(counts, total=batch)
    else:
        p = ops.concatenate([pl, pr], 0)
        yy = ops.concatenate([y, y], 0)
        m = ops.segment_sum(ops.concatenate([p, p * yy, p * yy * yy], 1), ids, num_segments=positions)
        u = layer.units
        loss = leaf_variance_from_moments(m[:, 0], m[:, 1: 1 + u], m[:, 1 + u:], batch)
    return loss + _prior(layer, num_samples)


def _tree_objective(layer, x, y, num_samples):
    """Joint objective of the probabilistic tree (Algorithm 1) + prior."""
    p = ops.exp(layer.leaf_log_probabilities(x))  # (batch, positions)
    batch = ops.cast(ops.shape(x)[0], x.dtype)
    if layer.is_classifier:
        onehot = ops.one_hot(ops.cast(y, "int32"), layer.num_classes, dtype=x.dtype)
        loss = conditional_entropy_from_counts(ops.matmul(ops.transpose(p), onehot), total=batch)
    else:
        pt = ops.transpose(p)
        loss = leaf_variance_from_moments(ops.sum(p, 0), ops.matmul(pt, y), ops.matmul(pt, y * y), batch)
    return loss + _prior(layer, num_samples)


def _prior(layer, num_samples):
    if layer.prior is None:
        return 0.0
    return layer.prior(layer.log_expert_weight[0], layer.expert_kernel[0], layer.trained_splits[0]) / float(num_samples)


def _train_step_fn(layer, optimizer, objective):
    variables = layer.trainable_variables

    @tf.function(reduce_retracing=True)
    def step(*args):
        with tf.GradientTape() as tape:
            loss = objective(*args)
        grads = tape.gradient(loss, variables)
        grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v) for g, v in zip(grads, variables)]
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    return step


def anneal(layer, epoch, increment, mask=None, max_steepness=None):
    """``lambda = steepness0 + increment * epoch`` at the splits in ``mask``
    (default: the layer's ``trained_splits``); shared with the callback."""
    lam = np.array(ops.convert_to_numpy(layer.steepness))
    mask = np.asarray(ops.convert_to_numpy(layer.trained_splits) if mask is None else mask).astype(bool)
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


def _targets(layer, y):
    """Training targets as float32 (classes as ids; regression standardized)."""
    if layer.is_classifier:
        return y.astype(np.float32), None
    mean, std = y.mean(0), y.std(0)
    std = np.where(std > 0, std, 1.0)
    return ((y - mean) / std).astype(np.float32), (mean, std)


def _score(layer, x, y):
    """Accuracy (classification) or negative MSE of the deterministic tree."""
    pred = np.asarray(layer(x, training=False))
    if layer.is_classifier:
        return float((pred.argmax(1) == y).mean())
    return -float(((pred - y) ** 2).mean())


# --------------------------------------------------------------- greedy
def fit_greedy(layer, x, y, validation_data=None, max_depth=None, epochs=20, batch_size=512,
               learning_rate=0.01, annealing_increment=0.1, min_samples_split=10, min_samples_leaf=1,
               min_gain=1e-6, refine_epochs=0, refine_learning_rate=None, verbose=0):
    """Grows the tree from a root stump (Section 3.3.2) and sets its leaves.

    Args:
        x, y: training data (integer classes or float targets).
        validation_data: optional ``(x_val, y_val)``: the tree is cut back to
            the depth with the best validation accuracy (lowest MSE), and a
            refinement is kept only if it does not lower that score.
        max_depth: growth limit (default: the layer's ``max_depth``).
        epochs: training epochs of each level's stumps (on their samples).
        batch_size, learning_rate: Adam mini-batches (fresh Adam per level).
        annealing_increment: ``lambda`` grows by this per epoch from the
            layer's ``steepness`` (Appendix B).
        min_samples_split: nodes with fewer samples stay leaves.
        min_samples_leaf: thresholds leave at least this many samples per side.
        min_gain: smallest information gain (variance reduction per sample of
            the node) that makes a split.
        refine_epochs: optional joint refinement afterwards (:func:`refine`).
        verbose: 1 prints one line per level.

    Returns:
        A dict with per-level ``levels`` records, the validation score per
        depth (``validation``), ``depth`` and ``leaves``.
    """
    layer._ensure_built(x)
    x, y = layer._check_xy(x, y, "fit_greedy")
    _check_training_args(epochs, batch_size, learning_rate, annealing_increment)
    depth_limit = layer.max_depth if max_depth is None else int(max_depth)
    if not 1 <= depth_limit <= layer.max_depth:
        raise ValueError(f"max_depth must be in [1, {layer.max_depth}] (the layer's max_depth), got {max_depth}")
    if isinstance(min_samples_split, bool) or int(min_samples_split) < 2:
        raise ValueError(f"min_samples_split must be an integer >= 2, got {min_samples_split!r}")
    if int(min_samples_leaf) < 1:
        raise ValueError(f"min_samples_leaf must be an integer >= 1, got {min_samples_leaf!r}")
    if validation_data is not None:
        x_val, y_val = layer._check_xy(validation_data[0], validation_data[1], "fit_greedy validation_data")
    n = len(x)
    targets, _ = _targets(layer, y)
    I, K = layer.num_internal, layer.num_experts
    state = topology.root_leaf(1, layer.max_depth)
    layer.node_state.assign(state)
    layer.trained_splits.assign(np.zeros((1, I), np.float32))
    history = {"levels": [], "validation": {}}
    rng = np.random.default_rng(layer.seed)
    for level in range(depth_limit):
        node = layer._route_numpy(x)
        candidates = []
        for leaf in topology.leaves(state, 0):
            if topology.position_depth(leaf) != level:
                continue
            at = node == leaf
            count = int(at.sum())
            if count < min_samples_split or count < 2 * min_samples_leaf:
                continue
            if layer.is_classifier and len(np.unique(y[at])) < 2:
                continue
            if not layer.is_classifier and np.all(y[at].std(0) == 0):
                continue
            candidates.append(int(leaf))
        if not candidates:
            break
        # Fresh stumps: random polytopes around each node's samples.
        kernel = np.array(ops.convert_to_numpy(layer.expert_kernel))
        bias = np.array(ops.convert_to_numpy(layer.expert_bias))
        log_r = np.array(ops.convert_to_numpy(layer.log_expert_weight))
        p0 = np.array(ops.convert_to_numpy(layer.p0_logit))
        for c in candidates:
            xc = x[node == c]
            k, b = layer._draw_experts(1, xc.mean(0), np.maximum(xc.std(0), 1e-3))
            kernel[0, c], bias[0, c] = k[0], b[0]
            # r_k = 1/K scaled so the rate S spreads by about one unit over the
            # node's samples (a usable slope of f_lambda at lambda ~ 1), and S0
            # at the median rate (half of the samples on each side).
            rate = np.logaddexp(0.0, xc @ k[0].T + b[0]).mean(-1)
            scale = 1.0 / max(float(rate.std()), 1e-6)
            log_scale = float(np.clip(np.log(scale), -9.0, 9.0))
            log_r[0, c] = log_scale - math.log(K)
            p0[0, c] = _softplus_inverse(np.median(rate) * math.exp(log_scale))
        layer.expert_kernel.assign(kernel)
        layer.expert_bias.assign(bias)
        layer.log_expert_weight.assign(log_r)
        layer.p0_logit.assign(p0)
        mask = np.zeros((1, I), bool)
        mask[0, candidates] = True
        layer.trained_splits.assign(mask.astype(np.float32))
        idx = np.flatnonzero(np.isin(node, candidates))
        optimizer = keras.optimizers.Adam(learning_rate)
        step = _train_step_fn(
            layer, optimizer, lambda xb, yb, nb: _stump_objective(layer, xb, yb, nb, n)
        )
        losses = []
        for epoch in range(epochs):
            anneal(layer, epoch, annealing_increment, mask)
            perm = rng.permutation(idx)
            total = 0.0
            for start in range(0, len(perm), batch_size):
                sel = perm[start: start + batch_size]
                nb = node[sel].astype(np.int32)
                total += float(step(x[sel], targets[sel], nb)) * len(sel)
            losses.append(total / max(len(perm), 1))
            if verbose > 1:
                print(f"  level {level} epoch {epoch}: loss {losses[-1]:.5f}")
        # Deterministic split: the best threshold on each stump's split function.
        rate_all = np.asarray(layer.split_values(x[idx]))
        thr = np.array(ops.convert_to_numpy(layer.threshold))
        committed = []
        for c in candidates:
            at = node[idx] == c
            t, gain, _ = best_threshold(rate_all[at, c], y[idx][at], layer.num_classes, int(min_samples_leaf))
            if t is None or gain <= min_gain:
                continue
            thr[0, c] = t
            state = topology.split_leaf(state, 0, c)
            committed.append(c)
        layer.threshold.assign(thr)
        layer.node_state.assign(state)
        layer.trained_splits.assign(np.zeros((1, I), np.float32))
        record = {"level": level, "candidates": len(candidates), "splits": len(committed),
                  "leaves": int(topology.num_leaves(state)[0]), "loss": losses[-1] if losses else None}
        history["levels"].append(record)
        if verbose:
            print(f"level {level}: {record['splits']}/{record['candidates']} splits, "
                  f"{record['leaves']} leaves, stump loss {record['loss']}")
        if not committed:
            break
    layer.set_leaves_from_data(x, y)
    if validation_data is not None:
        history["validation"] = select_depth(layer, x_val, y_val)
    if refine_epochs:
        history["refine"] = refine(
            layer, x, y, validation_data=validation_data, epochs=refine_epochs, batch_size=batch_size,
            learning_rate=refine_learning_rate or learning_rate * 0.1, annealing_increment=annealing_increment,
        )
    history["depth"] = layer.depth()
    history["leaves"] = layer.num_leaves()
    return history


def select_depth(layer, x_val, y_val):
    """Cuts the tree back to the depth with the best validation score (ties:
    the shallowest). Needs values at internal positions (set by
    :meth:`set_leaves_from_data`). Returns ``{depth: score}``."""
    state = np.asarray(ops.convert_to_numpy(layer.node_state))
    full = layer._route_numpy(x_val)
    values = np.asarray(ops.convert_to_numpy(layer.leaf_values))[0]
    depth_of = topology.position_depth(full)
    scores = {}
    for d in range(0, topology.tree_depth(state, 0) + 1):
        anc = ((full + 1) >> np.maximum(depth_of - d, 0)) - 1
        pred = values[anc]
        if layer.is_classifier:
            scores[d] = float((pred.argmax(1) == y_val).mean())
        else:
            scores[d] = -float(((pred - y_val) ** 2).mean())
    best = max(scores, key=lambda d: (scores[d], -d))
    for s in topology.splits(state, 0):
        if topology.position_depth(s) == best and state[0, s] == topology.SPLIT:
            state = topology.make_leaf(state, 0, s)
    layer.node_state.assign(state)
    return scores


# --------------------------------------------------------------- refinement
def refine(layer, x, y, validation_data=None, epochs=10, batch_size=512, learning_rate=1e-3,
           annealing_increment=0.1, start_steepness=None):
    """Joint refinement of all splits of the current topology (Algorithm 1).

    Each node's ``S0`` starts at its threshold (so the probabilistic tree
    starts at the deterministic one), all splits train with the information
    objective of the whole tree and the prior, ``lambda`` grows by
    ``annealing_increment`` per epoch from ``start_steepness`` (default: the
    layer's largest current steepness), and finally thresholds become ``S0``
    (``f_lambda = 0.5``) and leaves are reset from the training data. With
    ``validation_data`` the refinement is undone when it lowers the
    validation score. Returns a dict of losses and scores.
    """
    layer._ensure_built(x)
    x, y = layer._check_xy(x, y, "refine")
    _check_training_args(epochs, batch_size, learning_rate, annealing_increment)
    state = np.asarray(ops.convert_to_numpy(layer.node_state))
    is_split = state[:, : layer.num_internal] == topology.SPLIT
    if not is_split.any() or epochs == 0:
        return {"losses": [], "kept": False}
    backup = [np.array(ops.convert_to_numpy(v)) for v in layer.weights]
    before = None
    if validation_data is not None:
        x_val, y_val = layer._check_xy(validation_data[0], validation_data[1], "refine validation_data")
        before = _score(layer, x_val, y_val)
    thr = np.asarray(ops.convert_to_numpy(layer.threshold), dtype=np.float64)
    p0 = np.array(ops.convert_to_numpy(layer.p0_logit))
    p0[is_split] = _softplus_inverse(thr[is_split])
    layer.p0_logit.assign(p0)
    layer.trained_splits.assign(is_split.astype(np.float32))
    lam0 = float(np.asarray(ops.convert_to_numpy(layer.steepness))[is_split].max()) if start_steepness is None else float(start_steepness)
    targets, _ = _targets(layer, y)
    n = len(x)
    optimizer = keras.optimizers.Adam(learning_rate)
    step = _train_step_fn(layer, optimizer, lambda xb, yb: _tree_objective(layer, xb, yb, n))
    rng = np.random.default_rng(layer.seed)
    losses = []
    for epoch in range(epochs):
        anneal(layer, 0, 0.0, is_split)  # reset to steepness0, then offset
        lam = np.array(ops.convert_to_numpy(layer.steepness))
        lam[is_split] = lam0 + annealing_increment * epoch
        layer.steepness.assign(lam)
        perm = rng.permutation(n)
        total = 0.0
        for start in range(0, n, batch_size):
            sel = perm[start: start + batch_size]
            yb = targets[sel] if layer.is_classifier else targets[sel].reshape(len(sel), -1)
            total += float(step(x[sel], yb)) * len(sel)
        losses.append(total / n)
    thr = np.array(ops.convert_to_numpy(layer.threshold))
    thr[is_split] = np.asarray(ops.convert_to_numpy(layer.rate0()))[is_split]
    layer.threshold.assign(thr)
    layer.trained_splits.assign(np.zeros_like(is_split, dtype=np.float32))
    layer.set_leaves_from_data(x, y)
    result = {"losses": losses, "kept": True}
    if before is not None:
        after = _score(layer, x_val, y_val)
        result.update(before=before, after=after)
        if after < before:
            for v, value in zip(layer.weights, backup):
                v.assign(value)
            result["kept"] = False
    return result
