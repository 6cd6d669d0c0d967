"""Fitted scikit-learn decision trees (and grown end-to-end trees) as arrays in
the shared heap topology of :mod:`keras_trees.topology`.

scikit-learn is an optional dependency: nothing here imports it; the functions
read the fitted estimator's ``tree_`` arrays.

* :func:`from_sklearn` converts any fitted ``DecisionTreeClassifier`` or
  ``DecisionTreeRegressor`` (or its ``tree_``) into a :class:`HeapTree`: an
  unbalanced tree whose positions below a leaf are ``ABSENT``. Split ``i`` tests
  feature ``f`` against threshold ``t`` as the oblique row ``w = e_f``,
  ``b = -t``: a sample goes right iff ``x_f - t > 0``, exactly sklearn's
  ``x_f <= t`` goes left (in float32 the threshold is rounded *down* to the
  largest float32 ``<= t``, so sklearn's float32 comparisons are reproduced
  exactly). Hard routing of the result (``keras_trees.ops.hard_route``)
  reproduces ``estimator.apply`` and ``predict``.
* :func:`pad_to_perfect` turns any :class:`HeapTree` into a perfect tree of a
  given depth (the form non-greedy trees train): every leaf above the last level
  becomes a subtree of zero split rows (``w = 0, b = 0``: samples always go
  left) whose leaves all copy its value, so predictions are unchanged.
* :func:`from_end_to_end` reads a (greedily grown) :class:`EndToEndTree`.
"""

from collections import namedtuple

import numpy as np

from keras_trees import topology


class HeapTree(namedtuple("HeapTree", "node_state split_weights split_bias leaf_values source_node")):
    """One tree in the heap layout, as NumPy arrays (maximum depth ``D``):

    * ``node_state``: ``(1, 2**(D+1) - 1)`` ``ABSENT``/``LEAF``/``SPLIT``,
    * ``split_weights``: ``(1, 2**D - 1, p)`` oblique rows (zero where not a split),
    * ``split_bias``: ``(1, 2**D - 1)``,
    * ``leaf_values``: ``(1, 2**(D+1) - 1, K)``: class probabilities
      (classifiers) or outputs (regressors) at leaf positions,
    * ``source_node``: ``(1, 2**(D+1) - 1)`` id of the node in the source tree
      (scikit-learn node id, or the source heap position), ``-1`` if none.
    """

    @property
    def max_depth(self):
        return topology.max_depth_from_positions(self.node_state.shape[1])

    def route(self, x):
        """Heap position where each sample of ``x`` stops (compiled hard-routing op)."""
        from keras_trees.ops.hard_routing import hard_route

        x = np.asarray(x, dtype=self.split_weights.dtype)
        node, _ = hard_route(
            x, self.split_weights, self.split_bias, topology.is_split_mask(self.node_state),
            with_path_values=False,
        )
        return np.asarray(node)[:, 0]

    def predict(self, x):
        """Leaf values (probabilities or outputs) of each sample's leaf."""
        return self.leaf_values[0, self.route(x)]


def _tree_arrays(estimator):
    tree = getattr(estimator, "tree_", estimator)
    needed = ("children_left", "children_right", "feature", "threshold", "value", "n_features")
    if not all(hasattr(tree, a) for a in needed):
        raise TypeError(
            "expected a fitted scikit-learn DecisionTreeClassifier/DecisionTreeRegressor or its "
            f"tree_, got {type(estimator).__name__}"
        )
    return tree


def from_sklearn(estimator, max_depth=None, dtype="float32"):
    """Converts a fitted scikit-learn decision tree into a :class:`HeapTree`.

    Args:
        estimator: fitted ``DecisionTreeClassifier``/``DecisionTreeRegressor``
            (single output for classifiers), or its ``tree_``.
        max_depth: depth of the heap; default the tree's own depth. A deeper
            tree is truncated: its nodes on level ``max_depth`` become leaves
            holding the node's (class distribution / mean) value.
        dtype: ``"float32"`` or ``"float64"`` for the split rows and values.

    Returns:
        A :class:`HeapTree`; ``leaf_values`` holds class probabilities in the
        order of ``estimator.classes_`` (classifiers) or the regression outputs.

    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> x = np.random.default_rng(0).normal(size=(200, 3)).astype("float32")
    >>> y = (x[:, 0] > 0.2).astype(int) + (x[:, 1] > 1.0)
    >>> cart = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)
    >>> heap = from_sklearn(cart)
    >>> bool((heap.source_node[0, heap.route(x)] == cart.apply(x)).all())
    True
    """
    tree = _tree_arrays(estimator)
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    left, right = tree.children_left, tree.children_right
    value = np.asarray(tree.value, dtype=np.float64)  # (nodes, outputs, classes)
    classifier = hasattr(estimator, "classes_") or (
        hasattr(tree, "n_classes") and int(np.max(tree.n_classes)) > 1
    )
    if classifier:
        if value.shape[1] != 1:
            raise ValueError(f"multi-output classifiers are not supported ({value.shape[1]} outputs)")
        value = value[:, 0, :]
        value = value / np.maximum(value.sum(1, keepdims=True), 1e-300)  # counts or fractions
    else:
        value = value[:, :, 0]
    depth_of = np.zeros(tree.node_count, dtype=np.int64)
    for n in range(tree.node_count):  # parents precede children in sklearn's arrays
        if left[n] != -1:
            depth_of[left[n]] = depth_of[right[n]] = depth_of[n] + 1
    own_depth = int(depth_of.max()) if tree.node_count else 0
    if max_depth is None:
        max_depth = max(own_depth, 1)
    if isinstance(max_depth, bool) or int(max_depth) != max_depth or max_depth < 1:
        raise ValueError(f"max_depth must be an integer >= 1, got {max_depth!r}")
    max_depth = int(max_depth)
    p = int(tree.n_features)
    internal, positions = topology.num_internal(max_depth), topology.num_positions(max_depth)
    state = topology.empty(1, max_depth)
    weights = np.zeros((1, internal, p), dtype=dtype)
    bias = np.zeros((1, internal), dtype=dtype)
    leaves = np.zeros((1, positions, value.shape[1]), dtype=dtype)
    source = np.full((1, positions), -1, dtype=np.int64)
    stack = [(0, 0)]  # (sklearn node, heap position)
    while stack:
        n, pos = stack.pop()
        source[0, pos] = n
        if left[n] == -1 or pos >= internal:
            state[0, pos] = topology.LEAF
            leaves[0, pos] = value[n]
            continue
        state[0, pos] = topology.SPLIT
        weights[0, pos, tree.feature[n]] = 1.0
        t = float(tree.threshold[n])
        if dtype == np.float32:
            t32 = np.float32(t)
            if float(t32) > t:  # largest float32 <= t: x <= t  <=>  x <= t32 for float32 x
                t32 = np.nextafter(t32, np.float32(-np.inf))
            bias[0, pos] = -t32
        else:
            bias[0, pos] = -t
        stack.append((left[n], 2 * pos + 1))
        stack.append((right[n], 2 * pos + 2))
    topology.validate(state, max_depth)
    return HeapTree(state, weights, bias, leaves, source)


def pad_to_perfect(tree, depth=None):
    """A perfect tree of ``depth`` (default the heap's maximum depth) with the
    same predictions: leaves above the last level are copied down under zero
    split rows (samples go left at ``v = 0``), so the padded tree routes every
    sample to a leaf holding the value of its original leaf. The ``source_node``
    of every copy names the original leaf."""
    depth = tree.max_depth if depth is None else int(depth)
    if depth < tree.max_depth:
        deepest = topology.tree_depth(tree.node_state, 0)
        if deepest > depth:
            raise ValueError(f"the tree has depth {deepest}, more than the requested depth {depth}")
    internal, positions = topology.num_internal(depth), topology.num_positions(depth)
    p, k = tree.split_weights.shape[2], tree.leaf_values.shape[2]
    state = topology.perfect(1, depth)
    weights = np.zeros((1, internal, p), dtype=tree.split_weights.dtype)
    bias = np.zeros((1, internal), dtype=tree.split_bias.dtype)
    leaves = np.zeros((1, positions, k), dtype=tree.leaf_values.dtype)
    source = np.full((1, positions), -1, dtype=np.int64)
    old_state = tree.node_state[0]
    for pos in range(positions):
        # the original position this one descends from (or is)
        anc = pos
        while anc >= len(old_state) or old_state[anc] == topology.ABSENT:
            anc = (anc - 1) // 2
        if old_state[anc] == topology.SPLIT:  # pos itself is an original split
            weights[0, pos] = tree.split_weights[0, pos]
            bias[0, pos] = tree.split_bias[0, pos]
            source[0, pos] = tree.source_node[0, pos]
        else:
            if pos >= internal:
                leaves[0, pos] = tree.leaf_values[0, anc]
            source[0, pos] = tree.source_node[0, anc]
    return HeapTree(state, weights, bias, leaves, source)


def from_end_to_end(layer, tree_index=0):
    """Reads tree ``tree_index`` of an :class:`EndToEndTree`/``EndToEndForest``
    (e.g. grown greedily with ``GreedyLevelGrowth``) into a :class:`HeapTree`
    (its deterministic, hard-routed form; plain inputs, no ``split_features``)."""
    from keras import ops

    if getattr(layer, "split_features", None) is not None:
        raise ValueError("trees with split_features (a feature extractor) cannot be converted")
    if not layer.built:
        raise ValueError("the end-to-end tree layer must be built (called or trained) first")
    state = np.asarray(ops.convert_to_numpy(layer.node_state))[tree_index: tree_index + 1]
    kernel = np.asarray(ops.convert_to_numpy(layer.effective_kernel()))[tree_index: tree_index + 1]
    bias = np.asarray(ops.convert_to_numpy(layer.split_bias))[tree_index: tree_index + 1]
    values = np.asarray(ops.convert_to_numpy(layer.leaf_values))[tree_index: tree_index + 1]
    split = topology.is_split_mask(state)
    kernel = kernel * split[..., None]
    bias = bias * split
    values = values * (state == topology.LEAF)[..., None]
    source = np.where(state != topology.ABSENT, np.arange(state.shape[1])[None], -1)
    return HeapTree(state, kernel, bias, values, source)


__all__ = ["HeapTree", "from_sklearn", "pad_to_perfect", "from_end_to_end"]
