"""Loss-augmented inference and the surrogate objective of non-greedy trees.

Norouzi, Collins, Johnson, Fleet & Kohli, *Efficient Non-greedy Optimization of
Decision Trees*, NIPS 2015. A perfect oblique tree of depth ``d`` has split
rows ``W`` (``2**d - 1`` of them, heap order of `keras_trees.topology`)
and leaf parameters ``Theta`` (``2**d`` rows; leaf ``j`` sits at heap position
``2**d - 1 + j``). With split values ``v = W x + b`` the tree sends ``x`` to
leaf ``f(h)``, ``h = sgn(v)`` (right iff ``v_i > 0``).

* [`loss_augmented_inference`][keras_trees.ops.loss_augmented.loss_augmented_inference] solves ``max_g g^T v + loss(Theta[f(g)], y)``
  over all codes (``fast=False``, Eq. 10-12, ``O(2**d p)``) or over the Hamming
  ball of radius 1 around ``h`` (``fast=True``, Eq. 13, ``O(d**2 p)``) and
  returns the leaves ``f(g)``, ``f(h)`` and the per-sample bound. It dispatches
  to the compiled ``KerasTrees>LossAugmentedInference`` op (multi-threaded over
  samples) and to [`loss_augmented_inference_reference`][keras_trees.ops.loss_augmented.loss_augmented_inference_reference] (``keras.ops``,
  dense over all ``2**d`` leaves) otherwise.
* [`surrogate`][keras_trees.ops.loss_augmented.surrogate] is the differentiable per-sample bound of Eq. 9 (or of
  Eq. 14 for Stable SGD) at given leaves: its gradient is Algorithm 1's
  ``(g - h) x^T`` for the splits and ``d loss / d Theta`` at the leaf ``f(g)``.
* `path_nodes` gives the heap positions and directions on the path to a leaf.
"""

import numpy as np
from keras import ops

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.ops import _library
from keras_trees.ops.hard_routing import SPLIT_VALUE_OVERFLOW
from keras_trees.validation import batched, tensors

LOSSES = ("log", "squared")


def _validate(x, split_weights, split_bias, leaf_values, labels, loss):
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    if len(x.shape) != 2:
        raise ValueError(f"x must have rank 2 (batch, input_dim), got shape {tuple(x.shape)}")
    if len(split_weights.shape) != 2:
        raise ValueError(
            f"split_weights must have shape (2**depth - 1, input_dim), got {tuple(split_weights.shape)}"
        )
    internal, dim = split_weights.shape
    leaves = internal + 1
    if internal < 1 or leaves & (leaves - 1):
        raise ValueError(f"split_weights.shape[0] must be 2**depth - 1, got {internal}")
    if x.shape[1] is not None and x.shape[1] != dim:
        raise ValueError(f"x has {x.shape[1]} features but split_weights expects input_dim={dim}")
    if tuple(split_bias.shape) != (internal,):
        raise ValueError(f"split_bias must have shape ({internal},), got {tuple(split_bias.shape)}")
    if len(leaf_values.shape) != 2 or leaf_values.shape[0] != leaves:
        raise ValueError(f"leaf_values must have shape ({leaves}, K), got {tuple(leaf_values.shape)}")
    k = leaf_values.shape[1]
    if loss == "log":
        if len(labels.shape) != 1:
            raise ValueError(f"labels must have shape (batch,) for loss='log', got {tuple(labels.shape)}")
        if "int" not in str(labels.dtype):
            raise TypeError(f"labels must be integer class ids for loss='log', got dtype {labels.dtype}")
    else:
        if len(labels.shape) != 2 or labels.shape[1] != k:
            raise ValueError(
                f"targets must have shape (batch, {k}) for loss='squared', got {tuple(labels.shape)}"
            )
    if x.shape[0] is not None and labels.shape[0] is not None and x.shape[0] != labels.shape[0]:
        raise ValueError(f"x has {x.shape[0]} samples but labels has {labels.shape[0]}")


def _inputs(x, split_weights, split_bias, leaf_values, labels, loss, compiled=False, values=False):
    """Converts and checks what is known without the values: ``x`` as
    floating features (integers and booleans cast to the parameters' floating dtype), the parameters
    in ``x``'s dtype, shapes, and the labels: class ids (log loss) checked in
    ``[0, K)`` before their cast to int32 (int64 ids beyond int32 and
    fractional floats refused; the compiled kernel checks int32 ids itself,
    so ``compiled`` skips that one runtime check), or floating targets; with
    ``values`` also `_check_values`. Under ``jax.jit`` the returned ``x``
    depends on one check call (`keras_trees.validation.tensors.jit_gathered`)."""
    with tensors.jit_gathered() as pending:
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        x = tensors.features(x, "x", like=split_weights)
        dtype = tensors.dtype_name(x)
        split_weights = tensors.floating(split_weights, "split_weights", dtype)
        split_bias = tensors.floating(split_bias, "split_bias", dtype)
        leaf_values = tensors.floating(leaf_values, "leaf_values", dtype)
        if labels is None:
            raise TypeError("labels must be class ids (loss='log') or targets (loss='squared'), got None")
        if loss == "log":
            classes = leaf_values.shape[-1] if len(leaf_values.shape) == 2 else None
            int32_tensor = hasattr(labels, "dtype") and tensors.dtype_name(labels) == "int32"
            if not (compiled and int32_tensor):
                labels = tensors.indices(labels, "labels", upper=classes)
            labels = tensors.as_tensor(labels, "labels")
        else:
            labels = tensors.floating(labels, "labels", dtype)
        _validate(x, split_weights, split_bias, leaf_values, labels, loss)
        if values:
            _check_values(x, split_weights, split_bias, leaf_values, labels, loss)
    x = batched.require_all(pending, output=x)
    return x, split_weights, split_bias, leaf_values, labels


def _check_values(x, split_weights, split_bias, leaf_values, labels, loss):
    """Value checks of the ``keras.ops`` path (the compiled kernel makes the
    same ones): eager, inside ``tf.function`` and under ``jax.jit``."""
    tensors.finite(x, "x", "loss-augmented inference needs finite inputs")
    tensors.finite(split_weights, "split_weights", "did training diverge?")
    tensors.finite(split_bias, "split_bias", "did training diverge?")
    tensors.finite(leaf_values, "leaf_values", "did training diverge?")
    if loss == "squared":
        tensors.finite(labels, "labels", "the regression targets must be finite")


def leaf_losses(leaf_values, labels, loss):
    """``(batch, leaves)`` loss of every leaf for every sample (log or squared)."""
    theta = ops.convert_to_tensor(leaf_values)
    if loss == "log":
        lse = ops.logsumexp(theta, axis=1)  # (L,)
        picked = ops.transpose(ops.take(theta, ops.cast(labels, "int32"), axis=1))  # (B, L)
        return lse[None, :] - picked
    y = ops.cast(labels, theta.dtype)
    return (
        ops.sum(y * y, axis=1)[:, None]
        - 2.0 * ops.einsum("bk,lk->bl", y, theta)  # einsum: ops.matmul gives float32 on PyTorch
        + ops.sum(theta * theta, axis=1)[None, :]
    )


def selected_leaf_loss(leaf_values, leaf, labels, loss):
    """``(batch,)`` loss of ``leaf_values[leaf]`` (differentiable in ``leaf_values``)."""
    theta = ops.take(leaf_values, ops.cast(leaf, "int32"), axis=0)  # (B, K)
    if loss == "log":
        lse = ops.logsumexp(theta, axis=1)
        onehot = ops.one_hot(ops.cast(labels, "int32"), theta.shape[1], dtype=theta.dtype)
        return lse - ops.sum(theta * onehot, axis=1)
    diff = theta - ops.cast(labels, theta.dtype)
    return ops.sum(diff * diff, axis=1)


@keras_trees_export("keras_trees.ops")
def loss_augmented_inference_reference(x, split_weights, split_bias, leaf_values, labels, loss="log", fast=True):
    """Dense ``keras.ops`` reference: scores all ``2**d`` leaves of every sample.

    ``score(j) = loss(Theta[j], y) + sum over the path of j of (s_i v_i - |v_i|)``
    (``s_i`` the direction taken at node ``i``): the objective of Eq. 12 for the
    code that follows ``j``'s path and ``sgn(v)`` elsewhere. ``fast`` keeps the
    leaves whose path disagrees with ``sgn(v)`` at most once (Eq. 13). Memory
    ``O(batch * 2**d)``: for tests and small trees.

    Returns:
        ``(g_leaf, h_leaf, score)`` as the compiled op (see
        [`loss_augmented_inference`][keras_trees.ops.loss_augmented.loss_augmented_inference]).
    """
    x, split_weights, split_bias, leaf_values, labels = _inputs(
        x, split_weights, split_bias, leaf_values, labels, loss, values=True)
    internal = split_weights.shape[0]
    depth = topology.max_depth_from_internal(internal)
    # einsum, not ops.matmul: Keras computes float64 matmuls in float32 on PyTorch.
    v = ops.einsum("bp,ip->bi", x, split_weights) + split_bias[None]
    batch = ops.shape(v)[0]
    margin = ops.zeros_like(v[:, :1])
    flips = ops.zeros_like(v[:, :1])
    overflow = ops.zeros_like(v[:, :1])  # non-finite split values on the path to each position
    for level in range(depth):
        vl = v[:, 2**level - 1: 2 ** (level + 1) - 1]  # (B, 2**level)
        left, right = -vl - ops.abs(vl), vl - ops.abs(vl)
        right_h = ops.cast(vl > 0, v.dtype)
        bad = ops.cast(ops.logical_not(ops.isfinite(vl)), v.dtype)
        # children in heap order: interleave left/right of each node
        margin = ops.reshape(ops.stack([margin + left, margin + right], axis=-1), (batch, 2 ** (level + 1)))
        flips = ops.reshape(ops.stack([flips + right_h, flips + 1.0 - right_h], axis=-1), (batch, 2 ** (level + 1)))
        overflow = ops.reshape(ops.stack([overflow + bad, overflow + bad], axis=-1), (batch, 2 ** (level + 1)))
    # The kernels' rule: a split value that the search reads (on the path to a
    # candidate leaf) is not finite.
    searched = overflow > 0.0
    if fast:
        searched = ops.logical_and(searched, flips <= 1.0)
    # Only with finite inputs and parameters (their own checks name them, and
    # under jit the order in which two failed checks report is not fixed).
    finite = ops.logical_and(ops.all(ops.isfinite(x)),
                             ops.logical_and(ops.all(ops.isfinite(split_weights)), ops.all(ops.isfinite(split_bias))))
    with tensors.jit_gathered() as pending:
        tensors.require(ops.logical_not(ops.logical_and(finite, ops.any(searched))), SPLIT_VALUE_OVERFLOW)
    scores = batched.require_all(pending, output=margin + leaf_losses(leaf_values, labels, loss))
    h_leaf = ops.cast(ops.argmin(flips, axis=1), "int32")  # the only leaf with 0 disagreements
    if fast:
        scores = ops.where(flips <= 1.0, scores, ops.full_like(scores, -np.inf))
    h_score = ops.take_along_axis(scores, h_leaf[:, None], axis=1)[:, 0]
    best = ops.max(scores, axis=1, initial=-np.inf)  # `initial`: an empty batch is no error
    first = ops.cast(ops.argmax(scores, axis=1), "int32")
    g_leaf = ops.where(h_score >= best, h_leaf, first)
    # where, not ops.maximum: Keras promotes float64 to float32 there on PyTorch.
    return g_leaf, h_leaf, ops.where(h_score > best, h_score, best)


@keras_trees_export("keras_trees.ops")
def loss_augmented_inference(x, split_weights, split_bias, leaf_values, labels, loss="log", fast=True):
    """Loss-augmented inference of a perfect oblique tree (compiled op where available).

    Args:
        x: ``(batch, p)`` finite inputs.
        split_weights: ``(2**d - 1, p)`` split rows in heap order.
        split_bias: ``(2**d - 1,)``.
        leaf_values: ``(2**d, K)``: unnormalized log-probabilities (``loss="log"``)
            or regression outputs (``loss="squared"``).
        labels: ``(batch,)`` integer classes in ``[0, K)`` (log) or ``(batch, K)``
            targets (squared).
        loss: ``"log"`` (Eq. 2) or ``"squared"`` (Eq. 3).
        fast: search the Hamming ball of radius 1 around ``sgn(v)`` (Eq. 13)
            instead of all leaves (Eq. 10).

    Returns:
        ``(g_leaf, h_leaf, score)``: ``(batch,)`` int32 leaf indices of the
        loss-augmented code ``g`` and of ``h = sgn(W x + b)`` (the prediction),
        and the per-sample upper bound ``max_g [g^T v + loss] - max_h h^T v``
        (Eq. 7 or 13), which is ``>= loss(Theta[h_leaf], y)``. Ties keep ``h``.

    >>> import numpy as np
    >>> w = np.array([[1.0], [0.0], [0.0]], "float32"); b = np.zeros(3, "float32")
    >>> theta = np.array([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.0, 2.0]], "float32")
    >>> g, h, s = loss_augmented_inference(np.array([[-0.1], [3.0]], "float32"), w, b, theta,
    ...                                    np.array([0, 1]), fast=False)
    >>> np.asarray(h).tolist(), np.asarray(g).tolist()   # sample 0 is near the root split:
    ([0, 2], [2, 2])
    >>> # g crosses it to the high-loss leaf 2, so the bound exceeds the loss there
    ([0, 2], [2, 2])
    """
    if _library.custom_ops_available("loss_augmented"):  # the kernel checks the values
        x, split_weights, split_bias, leaf_values, labels = _inputs(
            x, split_weights, split_bias, leaf_values, labels, loss, compiled=True)
        kernels = _library.binding("loss_augmented")
        return kernels.loss_augmented_inference(
            x, split_weights, split_bias, leaf_values, labels, loss, fast
        )
    return loss_augmented_inference_reference(x, split_weights, split_bias, leaf_values, labels, loss, fast)


def path_nodes(leaf, depth):
    """Heap positions ``(batch, depth)`` of the splits on the path to ``leaf`` and
    the direction taken at each (``+1`` right, ``-1`` left)."""
    leaf = ops.cast(ops.convert_to_tensor(leaf), "int32")
    pos = leaf + (2**depth - 1)  # heap position of the leaf
    nodes, dirs = [], []
    for level in range(depth):
        up = depth - level  # ancestor `up` levels above the leaf
        child = ops.right_shift(pos + 1, up - 1) - 1  # position on level + 1
        nodes.append(ops.right_shift(pos + 1, up) - 1)
        dirs.append(ops.cast(ops.equal(ops.mod(child, 2), 0), "int32") * 2 - 1)  # even = right child
    return ops.stack(nodes, axis=1), ops.stack(dirs, axis=1)


def path_margin(x, split_weights, split_bias, leaf, depth):
    """``(batch,)`` ``sum over the path of leaf of (s_i - sgn(v_i)) v_i``: the
    score term ``g^T v - h^T v`` for the code that follows ``leaf``'s path.

    ``sgn(v_i)`` is held constant (+1 iff ``v_i > 0``), so the gradient with
    respect to row ``i`` is ``(g_i - h_i) x`` as in line 6 of Algorithm 1.
    """

    nodes, dirs = path_nodes(leaf, depth)
    w = ops.take(split_weights, nodes, axis=0)  # (B, d, p)
    b = ops.take(split_bias, nodes, axis=0)  # (B, d)
    v = ops.einsum("bdp,bp->bd", w, ops.cast(x, w.dtype)) + b
    h = ops.stop_gradient(ops.where(v > 0, ops.ones_like(v), -ops.ones_like(v)))
    return ops.sum((ops.cast(dirs, v.dtype) - h) * v, axis=1)


@keras_trees_export("keras_trees.ops")
def surrogate(x, split_weights, split_bias, leaf_values, labels, g_leaf, loss="log", assigned_leaf=None):
    """Differentiable per-sample surrogate at the loss-augmented leaf ``g_leaf``.

    ``path_margin(g_leaf) + loss(Theta[g_leaf], y)`` equals the bound of Eq. 7 /
    Eq. 13 (SGD). With ``assigned_leaf`` (Stable SGD, Eq. 14) the h term is
    maximized under ``f(h) = assigned_leaf`` instead, which subtracts
    ``path_margin(assigned_leaf) <= 0``. Gradients: ``(g - h) x^T`` for the split
    rows on the two paths, ``d loss / d Theta`` at ``Theta[g_leaf]`` (Algorithm 1).
    """
    x, split_weights, split_bias, leaf_values, labels = _inputs(
        x, split_weights, split_bias, leaf_values, labels, loss, values=True)
    depth = topology.max_depth_from_internal(split_weights.shape[0])
    leaves = 2**depth
    g_leaf = tensors.indices(g_leaf, "g_leaf", upper=leaves)
    if assigned_leaf is not None:
        assigned_leaf = tensors.indices(assigned_leaf, "assigned_leaf", upper=leaves)
    for name, t in (("g_leaf", g_leaf), ("assigned_leaf", assigned_leaf)):
        if t is not None and tuple(t.shape) != tuple(labels.shape[:1]):
            raise ValueError(f"{name} must have shape (batch,) = {tuple(labels.shape[:1])}, got {tuple(t.shape)}")
    value = path_margin(x, split_weights, split_bias, g_leaf, depth)
    value = value + selected_leaf_loss(leaf_values, g_leaf, labels, loss)
    if assigned_leaf is not None:
        value = value - path_margin(x, split_weights, split_bias, assigned_leaf, depth)
    return value
