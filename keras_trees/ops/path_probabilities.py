"""Probabilistic routing through forests of unbalanced trees (Hehn et al. 2019).

The probability that a sample reaches leaf ``l`` (Eq. 1 with ``s = sigma_gamma``,
Eq. 5) is the product, over the splits on the path, of ``sigma(gamma_i f_i)`` for
right turns and ``1 - sigma(gamma_i f_i)`` for left turns. Everything is written
in ``keras.ops`` and works on the heap topology of `keras_trees.topology`;
only the splits and leaves that are present are evaluated (the index sets have a
data-dependent size), so deep unbalanced trees cost what they contain, not
``2**max_depth``.
"""

import numpy as np
from keras import ops

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.validation import arguments, batched, tensors
from keras_trees.validation import topology as topology_checks


def _tree_sizes(split_weights):
    trees, internal, _ = split_weights.shape
    depth = topology.max_depth_from_internal(internal)
    return trees, internal, 2 * internal + 1, depth


def _inputs(x, split_weights, split_bias, gamma, node_state, check_values=True):
    """Converts and checks the arguments of the three functions here: ``x`` as
    floating features (integers and booleans cast to the parameters' floating dtype), the split
    parameters in its dtype, shapes, ``node_state`` a valid topology
    (`keras_trees.validation.topology.node_state`) and, with
    ``check_values``, every value finite (eager, ``tf.function``, ``jax.jit``)."""
    with tensors.jit_gathered() as pending:
        x = tensors.features(x, "x", like=split_weights)
        dtype = tensors.dtype_name(x)
        split_weights = tensors.floating(split_weights, "split_weights", dtype)
        split_bias = tensors.floating(split_bias, "split_bias", dtype)
        if gamma is None:
            raise TypeError("gamma must be a tensor of steepnesses (num_trees, 2**depth - 1), got None")
        gamma = tensors.floating(gamma, "gamma", dtype)
        if len(split_weights.shape) != 3:
            raise ValueError("split_weights must have shape (num_trees, 2**depth - 1, input_dim), "
                             f"got {tuple(split_weights.shape)}")
        trees, internal, dim = split_weights.shape
        leaves = internal + 1
        if internal < 1 or leaves & (leaves - 1):
            raise ValueError(f"split_weights.shape[1] must be 2**depth - 1, got {internal}")
        if x.shape[1] != dim:
            raise ValueError(f"x has {x.shape[1]} features but split_weights expects input_dim={dim}")
        for name, t in (("split_bias", split_bias), ("gamma", gamma)):
            if tuple(t.shape) != (trees, internal):
                raise ValueError(f"{name} must have shape ({trees}, {internal}), got {tuple(t.shape)}")
        if node_state is None:
            raise TypeError("node_state must be an integer topology (num_trees, 2**(depth + 1) - 1), got None")
        if not tensors.is_backend_tensor(node_state):
            node_state = np.asarray(node_state)
        if tuple(node_state.shape) != (trees, 2 * internal + 1):
            raise ValueError(f"node_state must have shape ({trees}, {2 * internal + 1}), got {tuple(node_state.shape)}")
        node_state = topology_checks.node_state(node_state, "node_state")
        if check_values:
            tensors.finite(x, "x", "path probabilities need finite inputs")
            tensors.finite(split_weights, "split_weights", "did training diverge?")
            tensors.finite(split_bias, "split_bias", "did training diverge?")
        tensors.finite(gamma, "gamma", "did training diverge?")
    x = batched.require_all(pending, output=x)
    return x, split_weights, split_bias, gamma, ops.cast(node_state, "int32")


def present(node_state, kind):
    """Flat indices into ``(num_trees * positions)`` of the positions in state ``kind``."""
    flat = ops.reshape(node_state, (-1,))
    return ops.cast(ops.nonzero(ops.equal(flat, kind))[0], "int32")


@keras_trees_export("keras_trees.ops")
def soft_leaf_log_probabilities(x, split_weights, split_bias, gamma, node_state, prune_threshold=0.0):
    """Log path probabilities of every present leaf of every tree.

    Args:
        x: ``(batch, input_dim)`` split features.
        split_weights: ``(num_trees, 2**D - 1, input_dim)``.
        split_bias, gamma: ``(num_trees, 2**D - 1)``; gamma is the steepness.
        node_state: ``(num_trees, 2**(D+1) - 1)`` int topology.
        prune_threshold: the pruning rule of
            `keras_trees.ops.pruned_routing` (a leaf is dropped when a
            node on its path has path probability below the threshold and is
            not the child its split favours); 0 (default) drops nothing.

    Returns:
        ``(leaf_ids, log_mu)``: ``(L,)`` int32 flat leaf indices into
        ``num_trees * (2**(D+1) - 1)`` (tree-major) and ``(batch, L)``
        ``log mu_l(x)``; ``sum_l mu_l = 1`` within each tree without pruning;
        dropped leaves have ``log mu = -inf``.
    """
    x, split_weights, split_bias, gamma, state = _inputs(x, split_weights, split_bias, gamma, node_state)
    trees, internal, positions, depth = _tree_sizes(split_weights)
    split_ids_pos = present(state[:, :internal], topology.SPLIT)  # into trees * internal
    w = ops.take(ops.reshape(split_weights, (trees * internal, -1)), split_ids_pos, axis=0)
    b = ops.take(ops.reshape(split_bias, (-1,)), split_ids_pos, axis=0)
    g = ops.take(ops.reshape(ops.cast(gamma, x.dtype), (-1,)), split_ids_pos, axis=0)
    # Rows are splits / leaves, columns samples: gathering whole rows (and the
    # segment sums of their gradients) is far cheaper than gathering columns.
    z = (ops.matmul(w, ops.transpose(x)) + b[:, None]) * g[:, None]  # (S, batch)
    edges = ops.stack([ops.log_sigmoid(-z), ops.log_sigmoid(z)], axis=1)
    edges = ops.reshape(edges, (2 * ops.shape(z)[0], ops.shape(x)[0]))  # no -1: the batch may be empty
    edges = ops.concatenate([edges, ops.zeros((1, ops.shape(x)[0]), dtype=edges.dtype)], axis=0)
    num_splits = ops.shape(z)[0]

    is_split = ops.cast(ops.equal(ops.reshape(state[:, :internal], (-1,)), topology.SPLIT), "int32")
    remap = ops.cumsum(is_split) - 1  # position -> column of z
    leaf_ids = present(state, topology.LEAF)
    tree = leaf_ids // positions
    h1 = leaf_ids % positions + 1  # 1-based heap index
    leaf_depth = ops.zeros_like(h1)
    for d in range(1, depth + 1):
        leaf_depth = leaf_depth + ops.cast(h1 >= 2**d, "int32")
    pow2 = ops.convert_to_tensor([2**k for k in range(depth + 1)], dtype="int32")
    threshold = arguments.prune_threshold(prune_threshold)
    if threshold > 0:
        # favoured[2s + direction]: the edge the split favours (right iff its logit > 0).
        right = z > 0
        favoured = ops.reshape(ops.stack([ops.logical_not(right), right], axis=1), (-1, ops.shape(x)[0]))
        favoured = ops.concatenate([favoured, ops.ones_like(favoured[:1])], axis=0)
        kept = None
    log_mu = None
    for d in range(depth):
        valid = leaf_depth > d
        shift = ops.maximum(leaf_depth - d, 1)
        ancestor = h1 // ops.take(pow2, shift) - 1
        direction = (h1 // ops.take(pow2, shift - 1)) % 2
        pos = tree * internal + ops.minimum(ancestor, internal - 1)
        col = ops.where(valid, 2 * ops.take(remap, pos) + direction, 2 * num_splits)
        term = ops.take(edges, col, axis=0)
        log_mu = term if log_mu is None else log_mu + term
        if threshold > 0:
            keep = ops.logical_or(ops.exp(log_mu) >= threshold, ops.take(favoured, col, axis=0))
            kept = keep if kept is None else ops.logical_and(kept, keep)
    if threshold > 0 and kept is not None:
        log_mu = ops.where(kept, log_mu, ops.cast(float("-inf"), log_mu.dtype))
    return leaf_ids, ops.transpose(log_mu)


@keras_trees_export("keras_trees.ops")
def frontier(x, split_weights, split_bias, gamma, node_state, candidate):
    """Greedy-growth routing: hard through committed splits, soft at candidate stumps.

    Every sample is routed deterministically through the present splits to a
    leaf ``n`` (``node``); when ``candidate[n]`` is set, the stump stored at
    ``n`` (split parameters at ``n``, leaf predictions at ``2n+1`` and
    ``2n+2``) is evaluated probabilistically. Each stump therefore only sees the
    samples routed to it (Section 2.5).

    Returns:
        ``(node, is_stump, right_prob)``, each ``(batch, num_trees)``.
    """
    from keras_trees.ops.hard_routing import route_to_leaves, split_flags

    # x and the split parameters: hard routing checks their values on both paths.
    x, split_weights, split_bias, gamma, node_state = _inputs(x, split_weights, split_bias, gamma, node_state,
                                                              check_values=False)
    trees, internal, positions, _ = _tree_sizes(split_weights)
    with tensors.jit_gathered() as pending:
        candidate = split_flags(candidate, "candidate")
    x = batched.require_all(pending, output=x)
    if tuple(candidate.shape) != (trees, internal):
        raise ValueError(f"candidate must have shape ({trees}, {internal}), got {tuple(candidate.shape)}")
    node = route_to_leaves(x, split_weights, split_bias, node_state)
    at = ops.minimum(node, internal - 1)
    flat = at + ops.arange(trees, dtype="int32")[None] * internal  # (batch, trees)
    cand = ops.take(ops.reshape(ops.cast(candidate, "bool"), (-1,)), flat)
    is_stump = ops.logical_and(node < internal, cand)
    w = ops.take(ops.reshape(split_weights, (trees * internal, -1)), flat, axis=0)  # (b, t, p)
    b = ops.take(ops.reshape(split_bias, (-1,)), flat)
    g = ops.take(ops.reshape(ops.cast(gamma, x.dtype), (-1,)), flat)
    f = ops.sum(w * x[:, None, :], axis=-1) + b
    return node, is_stump, ops.sigmoid(g * f)


@keras_trees_export("keras_trees.ops")
def heap_leaf_probabilities(x, split_weights, split_bias, gamma, node_state):
    """Dense level-by-level variant for shallow heaps: ``(batch, num_trees, positions)``.

    Evaluates every heap position (``2**(D+1) - 1`` per tree) with elementwise
    products instead of gathers; entries at positions that are not leaves are 0.
    Equal to [`soft_leaf_log_probabilities`][keras_trees.ops.path_probabilities.soft_leaf_log_probabilities] (exponentiated and scattered);
    faster when trees are nearly full and ``D`` is small (forests of depth 10).
    """
    x, split_weights, split_bias, gamma, node_state = _inputs(x, split_weights, split_bias, gamma, node_state)
    trees, internal, positions, depth = _tree_sizes(split_weights)
    f = ops.einsum("bq,tiq->bti", x, split_weights) + split_bias[None]
    s = ops.sigmoid(f * gamma[None])
    probs = ops.ones_like(f[:, :, :1])
    levels = [probs]
    batch = ops.shape(x)[0]
    for d in range(depth):
        sd = s[:, :, 2**d - 1: 2 ** (d + 1) - 1]
        probs = ops.reshape(ops.stack([probs * (1.0 - sd), probs * sd], axis=-1), (batch, trees, 2 ** (d + 1)))
        levels.append(probs)
    mu = ops.concatenate(levels, axis=-1)
    is_leaf = ops.cast(ops.equal(node_state, topology.LEAF), x.dtype)
    return mu * is_leaf[None]
