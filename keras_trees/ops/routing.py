"""Routing activations and path probabilities shared by every soft-tree family.

Everything here is written once in ``keras.ops`` and is the reference that the
compiled kernels are tested against.

Tree layout (used throughout keras-trees): a perfect binary tree of depth ``d``
has ``2**d - 1`` internal nodes in heap order (root 0, children of ``i`` are
``2*i + 1`` on the left and ``2*i + 2`` on the right) and ``2**d`` leaves
ordered left to right.
"""

from keras import ops

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.validation import tensors


@keras_trees_export("keras_trees.ops")
def smooth_step(t, gamma=1.0):
    """Smooth-step activation of Hazimeh et al. (2020), Eq. 4.

    ``0`` for ``t <= -gamma/2``, ``1`` for ``t >= gamma/2`` and the cubic
    ``-2 t^3 / gamma^3 + 3 t / (2 gamma) + 1/2`` in between. Continuously
    differentiable; exact zeros and ones give conditional computation.

    Domain: ``t`` real (``+-inf`` give 0 and 1), ``gamma`` finite and > 0; a
    tensor ``gamma = 0`` gives a step with NaN at ``t = 0``.
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").

    >>> float(smooth_step(0.0, 1.0))
    0.5
    """
    tensors.host_domain(t, "t", "real numbers (not NaN)", lambda a: a == a)
    tensors.host_domain(gamma, "gamma", "a finite number > 0", lambda a: (a > 0) & (a < float("inf")))
    t = tensors.floating(t, "t")
    gamma = ops.cast(gamma, t.dtype)
    u = t / gamma
    cubic = -2.0 * u * u * u + 1.5 * u + 0.5
    # Round-off near the ends must not leave [0, 1]: clamped by selects, not
    # ops.clip, whose gradient XLA's CPU compiler got wrong under jit (zero at
    # interior points of a depth-12 ensemble's nodes, JAX 0.10).
    cubic = ops.where(cubic < 0.0, 0.0, ops.where(cubic > 1.0, 1.0, cubic))
    return ops.where(u <= -0.5, 0.0, ops.where(u >= 0.5, 1.0, cubic))


@keras_trees_export("keras_trees.ops")
def logistic_step(t, gamma=1.0):
    """The rescaled logistic ``1 / (1 + exp(-6 t / gamma))`` the paper compares against.

    At ``gamma = 1`` it is the paper's ``(1 + e^{-6t})^{-1}`` (Figure 1): same scale as
    the smooth-step, but never exactly 0 or 1, so every node is always reached.

    Domain: ``t`` real, ``gamma`` finite and > 0; a tensor ``gamma = 0`` gives
    NaN at ``t = 0`` and a step elsewhere.
    Python numbers and NumPy arrays outside the domain raise ``ValueError``;
    tensors are not read (see docs/errors.md, "The math helpers").
    """
    tensors.host_domain(t, "t", "real numbers (not NaN)", lambda a: a == a)
    tensors.host_domain(gamma, "gamma", "a finite number > 0", lambda a: (a > 0) & (a < float("inf")))
    t = tensors.floating(t, "t")
    return ops.sigmoid(6.0 * t / ops.cast(gamma, t.dtype))


ACTIVATIONS = {"smooth_step": smooth_step, "logistic": logistic_step}


def get_activation(name):
    if name not in ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}"
        )
    return ACTIVATIONS[name]


@keras_trees_export("keras_trees.ops")
def depth_from_internal_nodes(num_internal):
    """Depth ``d`` of a perfect tree with ``num_internal == 2**d - 1`` nodes
    ([`keras_trees.topology.max_depth_from_internal`][keras_trees.topology.max_depth_from_internal])."""
    return topology.max_depth_from_internal(num_internal)


@keras_trees_export("keras_trees.ops")
def leaf_probabilities(left_probs):
    """Probability of reaching each leaf of a perfect tree (Eq. 2).

    Args:
        left_probs: ``(..., 2**d - 1)`` probabilities of going left at each
            internal node, in heap order.

    Returns:
        ``(..., 2**d)`` leaf probabilities, leaves left to right.
    """
    left_probs = tensors.floating(left_probs, "left_probs")
    depth = depth_from_internal_nodes(left_probs.shape[-1])
    lead = ops.shape(left_probs)[:-1]
    probs = ops.ones_like(left_probs[..., :1])
    for level in range(depth):
        start, end = 2**level - 1, 2 ** (level + 1) - 1
        s = left_probs[..., start:end]
        probs = ops.stack([probs * s, probs * (1.0 - s)], axis=-1)
        probs = ops.reshape(probs, (*lead, 2 ** (level + 1)))
    return probs


@keras_trees_export("keras_trees.ops")
def hard_leaf_index(go_left):
    """Leaf reached by deterministic routing, from boolean decisions at every node.

    Args:
        go_left: ``(..., 2**d - 1)`` booleans in heap order.

    Returns:
        ``(...,)`` int32 leaf index (left to right).
    """
    go_left = tensors.as_tensor(go_left, "go_left")
    depth = depth_from_internal_nodes(go_left.shape[-1])
    node = ops.zeros(ops.shape(go_left)[:-1], dtype="int32")
    for _ in range(depth):
        left = ops.take_along_axis(ops.cast(go_left, "int32"), node[..., None], axis=-1)[..., 0]
        node = 2 * node + 2 - left
    return node - (2**depth - 1)
