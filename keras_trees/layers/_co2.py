"""Greedy oblique trees by the CO2 bound (Norouzi, Collins, Fleet & Kohli, *CO2
Forest*, arXiv:1506.06155, 2015): the initialization of non-greedy trees
(Norouzi et al., NIPS 2015, Section 7).

The non-greedy paper initializes ``W`` and ``Theta`` with "a greedy variant of
the tree training procedure called CO2 [18]", itself initialized by
axis-aligned splits that maximize information gain; CO2 is the convex-concave
upper bound of the non-greedy paper applied greedily to trees of depth 1, one
node at a time. [`co2_tree`][keras_trees.layers._co2.co2_tree] builds such a tree, top-down, one level at a
time, and returns it as a [`keras_trees.forest.Forest`][keras_trees.forest.Forest] with linear splits
that [`keras_trees.layers.NonGreedyTree.initialize_from`][keras_trees.layers.non_greedy_tree.NonGreedyTree.initialize_from] accepts.

What is done at each internal node, with the samples its (already optimized)
ancestors route to it:

1. the node stays a leaf when it is on level ``max_depth``, holds fewer than
   ``min_samples_split`` samples, is pure, or admits no axis-aligned split;
2. otherwise its split is initialized with the best axis-aligned split on these
   samples (a depth-1 scikit-learn ``DecisionTreeClassifier``, ``criterion``,
   ``random_state``, the sample weights): the split of the CART tree of the same
   depth wherever the ancestors route as CART does; the row ``[w, b]`` is
   scaled to norm ``nu``; the two leaves ``Theta_L``, ``Theta_R`` start at the
   smoothed log class frequencies of its two sides;
3. the depth-1 bound (Eq. 7 and 9 for a stump, log loss), per sample
   ``max(s + l(Theta_R, y), -s + l(Theta_L, y)) - |s|`` with ``s = w.x + b``,
   averaged with the sample weights over the node's samples, is minimized
   jointly in ``[w, b]`` and ``Theta_L``, ``Theta_R`` by full-batch
   subgradient descent with momentum (the gradients of Algorithm 1: ``(g - h) x``
   for the row, the log-loss gradient at the loss-augmented leaf for
   ``Theta``), each step projecting the row onto ``||[w, b]|| <= nu`` (line 8);
   the iterate with the lowest bound that still sends samples both ways is kept
   (the initial split is one, so the bound never rises);
4. the samples are routed by the new split (right iff ``w.x + b > 0``) to the
   children.

All nodes of a level are optimized together as independent stumps (every
sample is in one node), in float64 NumPy; the result is deterministic for a
given ``random_state``. Leaves hold the weighted class frequencies of the
training samples they receive (a child receiving none copies its parent's);
``NonGreedyTree.initialize_from`` turns them into smoothed log-probabilities.
The stumps' optimized ``Theta`` only serve the optimization of their split.

Differences from the papers, as far as they describe CO2: full-batch steps
instead of SGD mini-batches (all nodes of a level at once), the best iterate
kept, and the stopping rules above; the CO2 paper's own settings (its ``nu``,
learning rates, number of steps) are not given in the non-greedy paper.
"""

import numpy as np

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.forest import Forest, class_ids
from keras_trees.layers._random import check_seed
from keras_trees.validation.arguments import positive_float, positive_int
from keras_trees.validation.bounds import nonnegative_float, nonnegative_int

CRITERIA = ("gini", "entropy", "log_loss")
MAX_DEPTH = 20
_SMOOTHING = 1e-2  # initial stump leaves: log((p + eps/K) / (1 + eps)), as NonGreedyTree.initialize_from


def _log_softmax(theta):
    top = theta.max(axis=1, keepdims=True)
    return theta - top - np.log(np.exp(theta - top).sum(axis=1, keepdims=True))


def _segment_sums(values, starts):
    """Sums of ``values`` (rows sorted by node) over each node's rows; every node has rows."""
    return np.add.reduceat(values, starts, axis=0)


def stump_bounds(xt, y, weight, starts, totals, rows, theta_left, theta_right):
    """Per-node weighted mean of the depth-1 bound and what its gradient needs.

    ``xt``: ``(n, p + 1)`` samples with a trailing 1, sorted by node; ``starts``:
    first row of every node; ``totals``: the nodes' weight sums; ``rows``:
    ``(J, p + 1)``; ``theta_*``: ``(J, K)``. Returns ``(bound (J,), s (n,),
    g_right (n,) bool, lsl (J, K), lsr (J, K))``."""
    counts = np.diff(np.append(starts, len(y)))
    node = np.repeat(np.arange(len(starts)), counts)
    s = np.einsum("ij,ij->i", xt, rows[node])
    lsl, lsr = _log_softmax(theta_left), _log_softmax(theta_right)
    right = s - lsr[node, y]
    left = -s - lsl[node, y]
    g_right = right > left
    per_sample = np.maximum(right, left) - np.abs(s)
    bound = _segment_sums(weight * per_sample, starts) / totals
    return bound, s, g_right, lsl, lsr


def optimize_stumps(xt, y, weight, starts, rows, theta_left, theta_right, nu, steps, learning_rate,
                    momentum=0.9):
    """Minimizes the weighted mean depth-1 bound of every node of a level.

    Arguments as `stump_bounds` (samples sorted by node); ``rows`` are
    projected onto ``||row|| <= nu``. Returns ``(rows, theta_left, theta_right,
    initial_bound, bound)``: the kept iterate (lowest bound among those that
    send at least one sample each way; the initial one when none is better)
    and the bounds per node before and after."""
    num_nodes, k = theta_left.shape
    counts = np.diff(np.append(starts, len(y)))
    node = np.repeat(np.arange(num_nodes), counts)
    totals = _segment_sums(weight, starts)
    totals = np.where(totals > 0, totals, 1.0)
    label_index = node * k + y

    def project(v):
        norm = np.linalg.norm(v, axis=1, keepdims=True)
        return v * np.minimum(1.0, nu / np.maximum(norm, 1e-300))

    params = [project(rows.astype(np.float64)), theta_left.astype(np.float64), theta_right.astype(np.float64)]
    velocity = [np.zeros_like(p) for p in params]
    best = [p.copy() for p in params]
    best_bound = initial = None
    for step in range(steps + 1):
        bound, s, g_right, lsl, lsr = stump_bounds(xt, y, weight, starts, totals, *params)
        goes_right = s > 0
        n_right = np.add.reduceat(goes_right.astype(np.int64), starts)
        separates = (n_right > 0) & (n_right < counts)
        if initial is None:
            initial, best_bound = bound.copy(), bound.copy()
        else:
            better = separates & (bound < best_bound)
            best_bound = np.where(better, bound, best_bound)
            for b, p in zip(best, params):
                b[better] = p[better]
        if step == steps:
            break
        # Algorithm 1: d/dw = (g - h) x; d/dTheta = softmax(Theta) - onehot(y) at the loss-augmented leaf.
        g = np.where(g_right, 1.0, -1.0)
        h = np.where(goes_right, 1.0, -1.0)
        grad_rows = _segment_sums((weight * (g - h))[:, None] * xt, starts) / totals[:, None]
        grads = [grad_rows]
        for mask, logp in ((~g_right, lsl), (g_right, lsr)):
            w = weight * mask
            mass = _segment_sums(w, starts)
            label_mass = np.bincount(label_index, weights=w, minlength=num_nodes * k).reshape(num_nodes, k)
            grads.append((mass[:, None] * np.exp(logp) - label_mass) / totals[:, None])
        for p, v, grad in zip(params, velocity, grads):
            v *= momentum
            v -= learning_rate * grad
            p += v
        params[0] = project(params[0])
    return best[0], best[1], best[2], initial, best_bound


def _class_frequencies(y, weight, k):
    counts = np.bincount(y, weights=weight, minlength=k)
    total = counts.sum()
    return counts / total if total > 0 else np.bincount(y, minlength=k) / max(len(y), 1)


@keras_trees_export("keras_trees.layers")
def co2_tree(x, y, max_depth, num_classes=None, nu=4.0, steps=100, learning_rate=None, momentum=0.9,
             criterion="entropy", min_samples_split=2, sample_weight=None, random_state=None):
    """A greedy oblique classification tree grown with the CO2 bound, as a one-tree
    [`Forest`][keras_trees.forest.Forest] (linear splits, right iff ``w.x + b > 0``).

    The greedy initialization of the non-greedy paper (Section 7): every node's
    split starts at the best axis-aligned (CART) split of the samples its
    ancestors route to it and is then optimized on the depth-1 convex-concave
    bound under ``||[w, b]|| <= nu``; see `keras_trees.layers._co2` for the
    procedure and how it differs from the papers. Start a non-greedy tree from
    it with ``NonGreedyTree(max_depth, num_classes, nu).initialize_from(co2_tree(x, y, max_depth, nu=nu))``.

    Args:
        x: ``(n, p)`` finite numeric features (standardize them: the bound, and
            ``nu``, depend on their scale).
        y: ``(n,)`` integer class ids in ``[0, num_classes)``.
        max_depth: the deepest a leaf may be (1 to 20).
        num_classes: number of classes (default ``max(y) + 1``).
        nu: the bound on every split row's norm (Eq. 9; default chosen on letter), also the norm the
            initial axis-aligned rows are scaled to.
        steps: full-batch steps per level (0: the splits stay axis-aligned and
            the tree is a greedy entropy tree, CART's up to tie-breaking).
        learning_rate: step size (default ``0.1 * nu``, chosen on letter).
        momentum: momentum of the steps, in ``[0, 1)``.
        criterion: the axis-aligned initialization's criterion (scikit-learn's
            ``"gini"``, ``"entropy"`` or ``"log_loss"``).
        min_samples_split: nodes with fewer samples stay leaves (>= 2).
        sample_weight: optional ``(n,)`` finite non-negative weights (of the
            bound, the class frequencies and the axis-aligned splits).
        random_state: seed of scikit-learn's tie-breaking between equally good
            axis-aligned splits (None or an int >= 0).

    Returns:
        A one-tree [`Forest`][keras_trees.forest.Forest] of depth ``<= max_depth``
        whose leaves hold class frequencies (``family="co2_tree"``;
        ``extra`` records ``nu``, ``steps``, ``learning_rate``).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(300, 2)); y = (x[:, 0] + x[:, 1] > 0).astype(int)
    >>> tree = co2_tree(x, y, max_depth=1, nu=4.0, random_state=0)
    >>> bool((tree.predict(x).argmax(1) == y).mean() > 0.95)
    True
    """
    from sklearn.tree import DecisionTreeClassifier

    max_depth = positive_int("max_depth", max_depth, maximum=MAX_DEPTH)
    nu = positive_float("nu", nu)
    steps = nonnegative_int("steps", steps)
    learning_rate = 0.1 * nu if learning_rate is None else positive_float("learning_rate", learning_rate)
    momentum = nonnegative_float("momentum", momentum)
    if momentum >= 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    min_samples_split = positive_int("min_samples_split", min_samples_split)
    if min_samples_split < 2:
        raise ValueError(f"min_samples_split must be >= 2, got {min_samples_split}")
    random_state = check_seed(random_state, "random_state")
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise TypeError(f"x must hold numbers, got dtype {x.dtype}")
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must have shape (n, p) with n, p >= 1, got {x.shape}")
    x = x.astype(np.float64)
    if not np.isfinite(x).all():
        raise ValueError("x contains NaN or Inf (impute missing values first)")
    n, p = x.shape
    if num_classes is None:
        y = class_ids(y, np.iinfo(np.int64).max, "y")
        num_classes = int(y.max()) + 1 if len(y) else 1
    else:
        num_classes = positive_int("num_classes", num_classes)
        y = class_ids(y, num_classes, "y")
    if len(y) != n:
        raise ValueError(f"y must hold one label per row of x ({n}), got {len(y)}")
    k = num_classes
    if sample_weight is None:
        weight = np.ones(n)
    else:
        weight = np.asarray(sample_weight, dtype=np.float64)
        if weight.shape != (n,):
            raise ValueError(f"sample_weight must have shape ({n},), got {weight.shape}")
        if not (np.isfinite(weight).all() and (weight >= 0).all() and weight.sum() > 0):
            raise ValueError("sample_weight must be finite, >= 0 and not all 0")

    internal, positions = topology.num_internal(max_depth), topology.num_positions(max_depth)
    state = topology.empty(1, max_depth)
    weights = np.zeros((internal, p))
    bias = np.zeros(internal)
    leaves = np.zeros((positions, k))
    xt = np.concatenate([x, np.ones((n, 1))], axis=1)
    position = np.zeros(n, dtype=np.int64)  # the node every still-open sample is in
    open_samples = np.arange(n)
    leaves[0] = _class_frequencies(y, weight, k)
    state[0, 0] = topology.LEAF
    for _ in range(max_depth):
        if not len(open_samples):
            break
        order = open_samples[np.argsort(position[open_samples], kind="stable")]
        nodes, starts = np.unique(position[order], return_index=True)
        ends = np.append(starts[1:], len(order))
        split_nodes, rows, thetas, keep = [], [], [], []
        for node, a, b in zip(nodes, starts, ends):
            idx = order[a:b]
            yn, wn = y[idx], weight[idx]
            if len(idx) < min_samples_split or np.all(yn == yn[0]) or not wn.sum() > 0:
                continue
            stump = DecisionTreeClassifier(max_depth=1, criterion=criterion, random_state=random_state)
            stump.fit(x[idx], yn, sample_weight=wn)
            tree = stump.tree_
            if tree.children_left[0] == -1:
                continue
            row = np.zeros(p + 1)
            row[tree.feature[0]], row[p] = 1.0, -float(tree.threshold[0])  # right iff x_f > t, as CART
            row *= nu / np.linalg.norm(row)
            right = xt[idx] @ row > 0
            theta = [np.log((_class_frequencies(yn[side], wn[side], k) + _SMOOTHING / k) / (1 + _SMOOTHING))
                     for side in (~right, right)]
            split_nodes.append(node)
            rows.append(row)
            thetas.append(theta)
            keep.append(idx)
        if not split_nodes:
            break
        idx = np.concatenate(keep)
        counts = np.array([len(i) for i in keep])
        seg = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rows = np.array(rows)
        if steps:
            rows = optimize_stumps(
                xt[idx], y[idx], weight[idx], seg, rows, np.array([t[0] for t in thetas]),
                np.array([t[1] for t in thetas]), nu, steps, learning_rate, momentum)[0]
        node = np.repeat(np.arange(len(split_nodes)), counts)
        split_nodes = np.array(split_nodes)
        right = np.einsum("ij,ij->i", xt[idx], rows[node]) > 0
        position[idx] = 2 * split_nodes[node] + 1 + right
        state[0, split_nodes] = topology.SPLIT
        weights[split_nodes], bias[split_nodes] = rows[:, :p], rows[:, p]
        children = np.concatenate([2 * split_nodes + 1, 2 * split_nodes + 2])
        state[0, children] = topology.LEAF
        leaves[children] = np.concatenate([leaves[split_nodes]] * 2)  # children that receive no sample
        reached, which = np.unique(position[idx], return_inverse=True)
        mass = np.bincount(which * k + y[idx], weights=weight[idx], minlength=len(reached) * k)
        mass = mass.reshape(len(reached), k)
        plain = np.bincount(which * k + y[idx], minlength=len(reached) * k).reshape(len(reached), k)
        total = mass.sum(axis=1, keepdims=True)
        leaves[reached] = np.where(total > 0, mass / np.where(total > 0, total, 1.0),
                                   plain / plain.sum(axis=1, keepdims=True))
        open_samples = idx
    return Forest(
        family="co2_tree", node_state=state, split_kind="linear", weights=weights[None], bias=bias[None],
        leaves=leaves[None], input_dim=p, aggregation="mean",
        leaf_output="class distribution (class ids 0 .. num_classes - 1)", num_classes=k,
        extra={"nu": nu, "steps": steps, "learning_rate": learning_rate, "momentum": momentum},
    )
