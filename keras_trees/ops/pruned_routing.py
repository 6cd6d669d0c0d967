"""Pruned probabilistic routing through forests of possibly unbalanced trees.

Probabilistic routing (Hehn et al. 2019, Eq. 1-5; Armandpour & Zhou 2021,
Eq. 7) mixes every leaf's value by its path probability ``mu_l(x)``, the
product over the splits on the path of ``s`` (right turns) or ``1 - s`` (left
turns). Evaluated densely that is every split of every tree for every sample.
As the steepness anneals almost all of the mass follows one path, so the walk
here is depth first with each node's path probability ("mass") and drops a
child subtree once its mass falls below ``prune_threshold``, except the child
the split favours (right iff the split's logit is > 0: the path deterministic
routing takes), which is always kept. Hence

* every sample keeps at least one leaf per tree (its inference path),
* each visited split drops at most one subtree, each of mass
  ``< prune_threshold``, so the dropped mass of a (sample, tree) is below
  ``prune_threshold * (split_evaluations + 1 - kept_leaves)``: the threshold
  times the leaves the walk visited that it did not keep (the dropped subtrees
  count as visited leaves), which is at most ``prune_threshold *
  split_evaluations``;
* each output differs from the exact (dense) one by at most
  ``dropped_mass * max |leaf value|`` (class distributions: by at most the
  dropped mass);
* ``prune_threshold=0`` drops nothing: the exact dense result.

The gradient is the exact gradient of the pruned function (the kept set is
piecewise constant in the parameters); the compiled backward pass walks the
kept paths again instead of storing them.

Two split forms, like `keras_trees.ops.hard_routing`: oblique sigmoid
splits ``s = sigmoid(gamma * (<w, x> + b))`` (end-to-end trees and forests;
``split_weights`` of rank 3) and noisy-OR expert splits (convex polytope
trees; rank 4 with ``expert_weights`` and ``rate0``) with the rate
``S = sum_k r_k softplus(<w_k, x> + b_k)`` and ``s = sigmoid(gamma * (S - rate0))``
(annealed, Appendix B; ``gamma`` is the steepness lambda) or ``s = 1 - exp(-S)``
(``annealed=False``; favoured side right iff ``S > log 2``).

[`pruned_em_statistics`][keras_trees.ops.pruned_routing.pruned_em_statistics] is the EM E-step of end-to-end trees over the
kept leaves (one walk per sample and tree instead of [`pruned_route`][keras_trees.ops.pruned_routing.pruned_route]
followed by [`pruned_leaf_statistics`][keras_trees.ops.pruned_routing.pruned_leaf_statistics]).

[`pruned_route`][keras_trees.ops.pruned_routing.pruned_route], [`pruned_leaf_statistics`][keras_trees.ops.pruned_routing.pruned_leaf_statistics] and
[`pruned_em_statistics`][keras_trees.ops.pruned_routing.pruned_em_statistics] run the compiled kernels where available (the ``KerasTrees>PrunedRouting*`` TensorFlow ops or
the ``KerasTreesPruned*`` XLA FFI handlers under JAX, on the CPU) and the
dense ``keras.ops`` references otherwise, which apply the same pruning rule to
the dense heap (their cost grows with ``2**depth``).
"""

import math

from keras import ops

from keras_trees.api_export import export_constants, keras_trees_export
from keras_trees.ops import _library
from keras_trees.ops.hard_routing import split_flags
from keras_trees.validation import arguments, batched, tensors

# Default of the layers' ``prune_threshold``: see the layers' documentation.
DEFAULT_PRUNE_THRESHOLD = 1e-4
export_constants("keras_trees.ops", globals(), "DEFAULT_PRUNE_THRESHOLD")
LOG2 = math.log(2.0)


def _shape(t):
    return tuple(t.shape)


def _validate(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0, annealed):
    if len(x.shape) != 2:
        raise ValueError(f"x must have rank 2 (batch, input_dim), got shape {_shape(x)}")
    experts = len(split_weights.shape) == 4
    if not experts and len(split_weights.shape) != 3:
        raise ValueError(
            "split_weights must have shape (num_trees, 2**depth - 1, input_dim) (oblique splits) or "
            f"(num_trees, 2**depth - 1, num_experts, input_dim) (noisy-OR splits), got {_shape(split_weights)}"
        )
    trees, internal = split_weights.shape[:2]
    leaves = internal + 1
    if internal < 1 or leaves & (leaves - 1):
        raise ValueError(f"split_weights.shape[1] must be 2**depth - 1, got {internal}")
    dim = split_weights.shape[-1]
    if x.shape[1] is not None and x.shape[1] != dim:
        raise ValueError(f"x has {x.shape[1]} features but split_weights expects input_dim={dim}")
    node = (trees, internal)
    checks = [("is_split", is_split, node)]
    if experts:
        k = split_weights.shape[2]
        if k < 1:
            raise ValueError("split_weights.shape[2] (the number of experts) must be >= 1")
        if expert_weights is None or (annealed and (rate0 is None or gamma is None)):
            raise ValueError(
                "split_weights of rank 4 are noisy-OR splits: pass expert_weights (num_trees, 2**depth - 1, "
                "num_experts) and, when annealed, rate0 and gamma (the steepness), (num_trees, 2**depth - 1)"
            )
        checks += [("split_bias", split_bias, node + (k,)), ("expert_weights", expert_weights, node + (k,))]
        if rate0 is not None:
            checks.append(("rate0", rate0, node))
    else:
        if expert_weights is not None or rate0 is not None:
            raise ValueError("expert_weights and rate0 need rank-4 split_weights (noisy-OR splits)")
        if gamma is None:
            raise ValueError("gamma (num_trees, 2**depth - 1) is required for oblique splits")
        checks.append(("split_bias", split_bias, node))
    if gamma is not None:
        checks.append(("gamma", gamma, node))
    for name, t, shape in checks:
        if _shape(t) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {_shape(t)}")
    return experts


def _statistics_weights(weights, dtype):
    """The ``weights`` of [`pruned_leaf_statistics`][keras_trees.ops.pruned_routing.pruned_leaf_statistics] in ``dtype``, finite
    (a NaN weight would make every statistic it reaches NaN); what reads them
    waits for the check inside compiled functions."""
    weights = tensors.floating(weights, "weights", dtype)
    return batched.checked(lambda: tensors.finite(weights, "weights", "pruned_leaf_statistics needs finite weights"),
                           weights)


def _check_per_pair(name, t, x, split_weights):
    batch, trees = x.shape[0], split_weights.shape[0]
    if len(t.shape) != 3 or t.shape[1] != trees or (batch is not None and t.shape[0] not in (None, batch)):
        raise ValueError(f"{name} must have shape (batch, num_trees, units) = ({batch}, {trees}, units), "
                         f"got {_shape(t)}")


def _check_leaf_values(leaf_values, split_weights):
    trees, internal = split_weights.shape[:2]
    if len(leaf_values.shape) != 3 or _shape(leaf_values)[:2] != (trees, 2 * internal + 1):
        raise ValueError(
            f"leaf_values must have shape (num_trees, 2**(depth+1) - 1, units) = ({trees}, {2 * internal + 1}, "
            f"units) (one row per heap position), got {_shape(leaf_values)}"
        )


def _check_values(x, split_weights, split_bias, gamma, expert_weights, rate0):
    """Value checks of the ``keras.ops`` path (the compiled kernels make the
    same ones): eager, inside ``tf.function`` and under ``jax.jit``."""
    tensors.finite(x, "x", "pruned routing needs finite inputs")
    for name, t in (("split_weights", split_weights), ("split_bias", split_bias), ("gamma", gamma),
                    ("rate0", rate0)):
        if t is not None:
            tensors.finite(t, name, "did training diverge?")
    if expert_weights is not None:
        tensors.nonnegative(expert_weights, "expert_weights", "noisy-OR rates r_k")


def _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0, annealed, prune_threshold):
    """Converts and checks what is known without the values: ``x`` as
    floating features (integers and booleans cast to the parameters' floating dtype), the split
    parameters in ``x``'s dtype, ``is_split`` as booleans, and the shapes."""
    threshold = arguments.prune_threshold(prune_threshold)
    x = tensors.features(x, "x", like=split_weights)
    dtype = tensors.dtype_name(x)
    conv = lambda t, name: None if t is None else tensors.floating(t, name, dtype)  # noqa: E731
    split_weights, split_bias, gamma, expert_weights, rate0 = (
        conv(t, name) for t, name in ((split_weights, "split_weights"), (split_bias, "split_bias"), (gamma, "gamma"),
                                      (expert_weights, "expert_weights"), (rate0, "rate0")))
    is_split = split_flags(is_split)
    experts = _validate(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0, annealed)
    if experts:
        zeros = ops.zeros(split_weights.shape[:2], dtype=split_weights.dtype)
        gamma = zeros if gamma is None else gamma
        rate0 = zeros if rate0 is None else rate0
    return threshold, experts, (x, split_weights, split_bias, gamma, is_split, expert_weights, rate0)


def _split_probabilities(x, split_weights, split_bias, gamma, expert_weights, rate0, annealed):
    """``(right, left, favours_right)``, each ``(batch, num_trees, 2**depth - 1)``."""
    dtype = x.dtype
    cast = lambda t: ops.cast(t, dtype)  # noqa: E731
    if expert_weights is not None:
        z = ops.einsum("bp,tikp->btik", x, cast(split_weights)) + cast(split_bias)[None]
        rate = ops.sum(cast(expert_weights)[None] * ops.softplus(z), axis=-1)
        if not annealed:
            return -ops.expm1(-rate), ops.exp(-rate), rate > LOG2
        u = cast(gamma)[None] * (rate - cast(rate0)[None])
    else:
        u = cast(gamma)[None] * (ops.einsum("bp,tip->bti", x, cast(split_weights)) + cast(split_bias)[None])
    return ops.sigmoid(u), ops.sigmoid(-u), u > 0


@keras_trees_export("keras_trees.ops")
def pruned_leaf_probabilities(x, split_weights, split_bias, gamma, is_split,
                              prune_threshold=DEFAULT_PRUNE_THRESHOLD, expert_weights=None, rate0=None,
                              annealed=True):
    """Dense ``keras.ops`` reference of the pruned walk over the whole heap.

    Returns:
        ``(mu, kept_leaves, split_evaluations, dropped_mass)``: ``mu``
        ``(batch, num_trees, 2**(depth+1) - 1)`` the path probabilities of the
        kept leaves (0 at every other position), ``kept_leaves`` and
        ``split_evaluations`` ``(batch, num_trees)`` int32, ``dropped_mass``
        ``(batch, num_trees)`` (no gradient). Arguments as in [`pruned_route`][keras_trees.ops.pruned_routing.pruned_route].
    """
    threshold, _, args = _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0,
                                  annealed, prune_threshold)
    x, split_weights, split_bias, gamma, is_split, expert_weights, rate0 = args
    _check_values(x, split_weights, split_bias, gamma, expert_weights, rate0)
    right, left, favours_right = _split_probabilities(x, split_weights, split_bias, gamma, expert_weights,
                                                      rate0, annealed)
    internal = split_weights.shape[1]
    depth = (internal + 1).bit_length() - 1
    split = ops.cast(is_split, "bool")[None]
    batch, trees = ops.shape(x)[0], split_weights.shape[0]
    zeros = ops.zeros_like(right[..., :1])
    mass = ops.ones_like(zeros)
    keep = ops.ones_like(zeros, dtype="bool")
    masses, keeps = [mass], [keep]
    dropped = ops.zeros_like(zeros[..., 0])
    evaluations = ops.zeros_like(zeros[..., 0], dtype="int32")
    for d in range(depth):
        sl = slice(2**d - 1, 2 ** (d + 1) - 1)
        active = ops.logical_and(keep, split[..., sl])
        m_left, m_right = mass * left[..., sl], mass * right[..., sl]
        fav = favours_right[..., sl]
        k_left = ops.logical_and(active, ops.logical_or(m_left >= threshold, ops.logical_not(fav)))
        k_right = ops.logical_and(active, ops.logical_or(m_right >= threshold, fav))
        lost = (ops.where(ops.logical_and(active, ops.logical_not(k_left)), m_left, 0.0)
                + ops.where(ops.logical_and(active, ops.logical_not(k_right)), m_right, 0.0))
        dropped = dropped + ops.sum(lost, axis=-1)
        evaluations = evaluations + ops.sum(ops.cast(active, "int32"), axis=-1)
        width = 2 ** (d + 1)
        mass = ops.reshape(ops.stack([ops.where(k_left, m_left, 0.0), ops.where(k_right, m_right, 0.0)], -1),
                           (batch, trees, width))
        keep = ops.reshape(ops.stack([k_left, k_right], -1), (batch, trees, width))
        masses.append(mass)
        keeps.append(keep)
    mu = ops.concatenate(masses, axis=-1)
    not_split = ops.concatenate([ops.logical_not(split), ops.ones((1, trees, internal + 1), dtype="bool")], axis=-1)
    leaf = ops.logical_and(ops.concatenate(keeps, axis=-1), not_split)
    mu = ops.where(leaf, mu, 0.0)
    kept = ops.sum(ops.cast(leaf, "int32"), axis=-1)
    return mu, kept, evaluations, ops.stop_gradient(dropped)


@keras_trees_export("keras_trees.ops")
def pruned_route_reference(x, split_weights, split_bias, gamma, is_split, leaf_values,
                             prune_threshold=DEFAULT_PRUNE_THRESHOLD, expert_weights=None, rate0=None,
                             annealed=True, with_statistics=False):
    """Dense ``keras.ops`` reference of [`pruned_route`][keras_trees.ops.pruned_routing.pruned_route] (same arguments and results)."""
    mu, kept, evaluations, dropped = pruned_leaf_probabilities(
        x, split_weights, split_bias, gamma, is_split, prune_threshold, expert_weights, rate0, annealed)
    leaf_values = tensors.floating(leaf_values, "leaf_values", tensors.dtype_name(mu))
    _check_leaf_values(leaf_values, tensors.as_tensor(split_weights, "split_weights"))
    tensors.finite(leaf_values, "leaf_values", "did training diverge?")
    out = ops.einsum("btn,tnu->btu", mu, ops.cast(leaf_values, mu.dtype))
    return (out, kept, evaluations, dropped) if with_statistics else out


@keras_trees_export("keras_trees.ops")
def pruned_leaf_statistics_reference(x, split_weights, split_bias, gamma, is_split, weights,
                                     prune_threshold=DEFAULT_PRUNE_THRESHOLD, expert_weights=None, rate0=None,
                                     annealed=True):
    """Dense ``keras.ops`` reference of [`pruned_leaf_statistics`][keras_trees.ops.pruned_routing.pruned_leaf_statistics]."""
    mu, _, _, _ = pruned_leaf_probabilities(
        x, split_weights, split_bias, gamma, is_split, prune_threshold, expert_weights, rate0, annealed)
    weights = _statistics_weights(weights, tensors.dtype_name(mu))
    _check_per_pair("weights", weights, mu, tensors.as_tensor(split_weights, "split_weights"))
    return ops.einsum("btn,btu->tnu", mu, ops.cast(weights, mu.dtype))


@keras_trees_export("keras_trees.ops")
def pruned_route(x, split_weights, split_bias, gamma, is_split, leaf_values,
                   prune_threshold=DEFAULT_PRUNE_THRESHOLD, expert_weights=None, rate0=None, annealed=True,
                   with_statistics=False):
    """Per-tree outputs of probabilistic routing with pruning (compiled op where available).

    Args:
        x: ``(batch, input_dim)`` finite split features.
        split_weights: ``(num_trees, 2**depth - 1, input_dim)`` oblique split
            weights in heap order, or ``(num_trees, 2**depth - 1, K,
            input_dim)`` noisy-OR expert weights.
        split_bias: ``(num_trees, 2**depth - 1)`` (oblique) or
            ``(num_trees, 2**depth - 1, K)`` (experts).
        gamma: ``(num_trees, 2**depth - 1)`` steepness of every split
            (oblique: ``gamma``; annealed experts: ``lambda``; unused by
            non-annealed experts, may be None there).
        is_split: ``(num_trees, 2**depth - 1)`` booleans (``node_state ==
            SPLIT`` over the internal positions); walks stop at the first
            non-split.
        leaf_values: ``(num_trees, 2**(depth+1) - 1, units)`` by heap position
            (only leaf positions are read).
        prune_threshold: in ``[0, 1)``; subtrees of smaller path probability
            are dropped (except the favoured child); 0 is exact.
        expert_weights: noisy-OR only, ``(num_trees, 2**depth - 1, K)``, ``>= 0``.
        rate0: annealed noisy-OR only, ``(num_trees, 2**depth - 1)``, ``S0``.
        annealed: noisy-OR only: ``sigmoid(gamma * (S - rate0))`` (True) or
            ``1 - exp(-S)`` (False).
        with_statistics: also return the walk's statistics.

    Returns:
        ``(batch, num_trees, units)``: ``sum_l mu_l(x) leaf_values[t, l]`` over
        the kept leaves of each tree; with ``with_statistics``, the tuple
        ``(output, kept_leaves, split_evaluations, dropped_mass)``, the last
        three ``(batch, num_trees)`` (int32, int32, float; not differentiable).
        ``dropped_mass < prune_threshold * (split_evaluations + 1 - kept_leaves)``
        wherever something was dropped.

    >>> import numpy as np
    >>> w = np.array([[[1.0], [0.0], [0.0]]]); b = np.zeros((1, 3)); g = np.full((1, 3), 2.0)
    >>> is_split = np.array([[True, False, False]]); v = np.arange(7.0).reshape(1, 7, 1)
    >>> x = np.array([[0.0], [5.0]])
    >>> out, kept, _, dropped = pruned_route(x, w, b, g, is_split, v, prune_threshold=0.01, with_statistics=True)
    >>> np.round(np.asarray(out, float)[:, 0, 0], 4).tolist()  # 0.5 * 1 + 0.5 * 2, then 0.99995 * 2
    [1.5, 1.9999]
    >>> np.asarray(kept).ravel().tolist(), np.round(np.asarray(dropped, float).ravel(), 5).tolist()
    ([2, 1], [0.0, 5e-05])
    """
    if not _library.custom_ops_available("pruned_routing"):
        return pruned_route_reference(x, split_weights, split_bias, gamma, is_split, leaf_values, prune_threshold,
                                      expert_weights, rate0, annealed, with_statistics)
    # The kernels check the values.
    threshold, experts, args = _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0,
                                        annealed, prune_threshold)
    x, split_weights, split_bias, gamma, is_split, expert_weights, rate0 = args
    leaf_values = tensors.floating(leaf_values, "leaf_values", tensors.dtype_name(x))
    _check_leaf_values(leaf_values, split_weights)
    kernels = _library.binding("pruned_routing")
    result = kernels.pruned_route(x, split_weights, split_bias, gamma, is_split, leaf_values,
                                  threshold, expert_weights, rate0, annealed)
    return result if with_statistics else result[0]


@keras_trees_export("keras_trees.ops")
def pruned_leaf_statistics(x, split_weights, split_bias, gamma, is_split, weights,
                           prune_threshold=DEFAULT_PRUNE_THRESHOLD, expert_weights=None, rate0=None, annealed=True):
    """``statistics[t, l, u] = sum_b mu_l(x_b) * weights[b, t, u]`` over the kept leaves.

    The gradient of [`pruned_route`][keras_trees.ops.pruned_routing.pruned_route] with respect to ``leaf_values`` for
    ``grad_output = weights`` (computed without the split gradients): the EM
    E-step of end-to-end trees (``weights`` = responsibilities divided by the
    leaf values) and the soft class counts of convex polytope trees.
    Differentiable with respect to ``x``, the split parameters and ``weights``.

    Args:
        weights: ``(batch, num_trees, units)``.
        others: as in [`pruned_route`][keras_trees.ops.pruned_routing.pruned_route].

    Returns:
        ``(num_trees, 2**(depth+1) - 1, units)``, 0 at positions that are not
        kept leaves of any sample.
    """
    if not _library.custom_ops_available("pruned_routing"):
        return pruned_leaf_statistics_reference(x, split_weights, split_bias, gamma, is_split, weights,
                                                prune_threshold, expert_weights, rate0, annealed)
    # The kernels check the values.
    threshold, _, args = _prepare(x, split_weights, split_bias, gamma, is_split, expert_weights, rate0,
                                  annealed, prune_threshold)
    x, split_weights, split_bias, gamma, is_split, expert_weights, rate0 = args
    weights = _statistics_weights(weights, tensors.dtype_name(x))
    _check_per_pair("weights", weights, x, split_weights)
    kernels = _library.binding("pruned_routing")
    return kernels.pruned_leaf_statistics(x, split_weights, split_bias, gamma, is_split, weights,
                                          threshold, expert_weights, rate0, annealed)


def _prepare_em(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight, prune_threshold,
                compiled=False):
    """Static checks of [`pruned_em_statistics`][keras_trees.ops.pruned_routing.pruned_em_statistics] (dtypes, shapes), once
    for both paths, and the labels: class ids in ``[0, classes)`` checked
    before their cast to int32 (the compiled kernel checks int32 ids itself,
    so ``compiled`` skips that one runtime check). Returns ``(threshold, x,
    split_weights, split_bias, gamma, is_split, leaf_values, labels,
    sample_weight)`` as tensors."""
    split_weights = tensors.as_tensor(split_weights, "split_weights")
    if len(split_weights.shape) != 3:
        raise ValueError("pruned_em_statistics takes oblique splits: split_weights of shape "
                         f"(num_trees, 2**depth - 1, input_dim), got {_shape(split_weights)}")
    threshold, _, args = _prepare(x, split_weights, split_bias, gamma, is_split, None, None, True, prune_threshold)
    x, split_weights, split_bias, gamma, is_split, _, _ = args
    dtype = tensors.dtype_name(x)
    leaf_values = tensors.floating(leaf_values, "leaf_values", dtype)
    sample_weight = None if sample_weight is None else tensors.floating(sample_weight, "sample_weight", dtype)
    _check_leaf_values(leaf_values, split_weights)
    classes = leaf_values.shape[2]
    if labels is None:
        raise TypeError("labels must be integer class ids (batch,), got None")
    int32_tensor = hasattr(labels, "dtype") and tensors.dtype_name(labels) == "int32"
    if not (compiled and int32_tensor):
        labels = tensors.indices(labels, "labels", upper=classes)
    labels = tensors.as_tensor(labels, "labels")
    batch = x.shape[0]
    for name, t in (("labels", labels), ("sample_weight", sample_weight)):
        if t is not None and (len(t.shape) != 1 or (batch is not None and t.shape[0] not in (None, batch))):
            raise ValueError(f"{name} must have shape (batch,) = ({batch},), got {_shape(t)}")
    return (threshold, x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight)


def _check_em_values(threshold, x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight):
    """Value checks of the E-step's ``keras.ops`` path (the kernel makes the same ones)."""
    _check_values(x, split_weights, split_bias, gamma, None, None)
    tensors.nonnegative(leaf_values, "leaf_values", "the leaves' class distributions")
    if sample_weight is not None:
        tensors.nonnegative(sample_weight, "sample_weight")


def _em_reference(threshold, x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight):
    mu, _, _, _ = pruned_leaf_probabilities(x, split_weights, split_bias, gamma, is_split, threshold)
    values = ops.cast(leaf_values, mu.dtype)
    trees = float(values.shape[0])
    onehot = ops.one_hot(ops.cast(labels, "int32"), values.shape[2], dtype=mu.dtype)
    pi_y = ops.einsum("tnk,bk->btn", values, onehot)
    p_y = ops.sum(mu * pi_y, axis=(1, 2)) / trees
    # where, not ops.maximum: Keras promotes float64 to float32 there on PyTorch.
    scale = 1.0 / (trees * ops.where(p_y > 1e-30, p_y, ops.full_like(p_y, 1e-30)))
    if sample_weight is not None:
        scale = scale * ops.cast(sample_weight, mu.dtype)
    h = mu * pi_y * scale[:, None, None]
    return ops.stop_gradient(ops.einsum("btn,bk->tnk", h, onehot))


@keras_trees_export("keras_trees.ops")
def pruned_em_statistics_reference(x, split_weights, split_bias, gamma, is_split, leaf_values, labels,
                                   sample_weight=None, prune_threshold=DEFAULT_PRUNE_THRESHOLD):
    """Dense ``keras.ops`` reference of [`pruned_em_statistics`][keras_trees.ops.pruned_routing.pruned_em_statistics] (same arguments and result)."""
    prepared = _prepare_em(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight,
                           prune_threshold)
    _check_em_values(*prepared)
    return _em_reference(*prepared)


@keras_trees_export("keras_trees.ops")
def pruned_em_statistics(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight=None,
                         prune_threshold=DEFAULT_PRUNE_THRESHOLD):
    """EM E-step of end-to-end trees and forests over the kept leaves (compiled op where available).

    With the leaves' class distributions ``pi = leaf_values``, the
    responsibility of leaf ``l`` of tree ``t`` for sample ``b`` (Hehn et al.
    2019, Eq. 10; for forests the likelihood of Eq. 20 in Eq. 4) is
    ``h[b, t, l] = mu_l(x_b) pi[t, l, y_b] / (num_trees * p(y_b))`` with
    ``p(y_b) = (1 / num_trees) sum_t sum_l mu_l(x_b) pi[t, l, y_b]`` over the
    leaves pruned routing keeps; the result is the M-step's counts
    ``counts[t, l, k] = sum_{b: y_b = k} w_b h[b, t, l]``. The compiled
    kernel walks each (sample, tree) once and remembers its kept leaves, where
    [`pruned_route`][keras_trees.ops.pruned_routing.pruned_route] (for ``p(y)``) then [`pruned_leaf_statistics`][keras_trees.ops.pruned_routing.pruned_leaf_statistics]
    walk twice. Not differentiable (statistics of the data).

    Args:
        x, split_weights, split_bias, gamma, is_split, prune_threshold: as in
            [`pruned_route`][keras_trees.ops.pruned_routing.pruned_route] (oblique splits only).
        leaf_values: ``(num_trees, 2**(depth+1) - 1, classes)`` class
            distributions by heap position (finite, ``>= 0``).
        labels: ``(batch,)`` integer class ids in ``[0, classes)``.
        sample_weight: optional ``(batch,)`` finite weights ``>= 0`` (1 without).

    Returns:
        ``(num_trees, 2**(depth+1) - 1, classes)`` counts, 0 at positions
        that are not kept leaves of any sample.

    >>> import numpy as np
    >>> w = np.array([[[1.0], [0.0], [0.0]]]); b = np.zeros((1, 3)); g = np.full((1, 3), 2.0)
    >>> is_split = np.array([[True, False, False]])
    >>> v = np.zeros((1, 7, 2)); v[0, 1] = [0.9, 0.1]; v[0, 2] = [0.2, 0.8]
    >>> c = pruned_em_statistics(np.array([[0.0], [0.0]]), w, b, g, is_split, v, np.array([0, 1]),
    ...                          prune_threshold=0.0)
    >>> np.round(np.asarray(c, float)[0, 1:3], 4).tolist()  # counts of leaves 1 and 2: 0.5 pi[y] / p(y)
    [[0.8182, 0.1111], [0.1818, 0.8889]]
    """
    compiled = _library.custom_ops_available("pruned_routing")
    prepared = _prepare_em(x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight,
                           prune_threshold, compiled=compiled)
    threshold, x, split_weights, split_bias, gamma, is_split, leaf_values, labels, sample_weight = prepared
    if compiled:  # the kernel checks the values
        if sample_weight is None:
            sample_weight = ops.ones(ops.shape(labels), dtype=x.dtype if "float" in str(x.dtype) else "float32")
        kernels = _library.binding("pruned_routing")
        return kernels.pruned_em_statistics(x, split_weights, split_bias, gamma, is_split, leaf_values, labels,
                                            sample_weight, threshold)
    _check_em_values(*prepared)
    return _em_reference(*prepared)
