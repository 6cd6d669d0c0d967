"""Fitted scikit-learn decision trees as [`keras_trees.forest.Forest`][keras_trees.forest.Forest] values.

scikit-learn is an optional dependency: nothing here imports it; the functions
read the fitted estimator's ``tree_`` arrays.

* [`from_sklearn`][keras_trees.interop.sklearn.from_sklearn] converts any fitted ``DecisionTreeClassifier`` or
  ``DecisionTreeRegressor`` (or its ``tree_``) into a one-tree forest with
  axis-aligned splits: an unbalanced tree whose positions below a leaf are
  ``ABSENT``. Split ``i`` sends a sample right iff ``x[feature] - threshold > 0``,
  exactly as sklearn's ``x[feature] <= threshold`` sends it left (in float32
  the threshold is rounded *down* to the largest float32 ``<= t``, so sklearn's
  float32 comparisons are reproduced exactly). ``Forest.apply`` (with
  ``source_node``) reproduces ``estimator.apply`` and ``Forest.predict``
  reproduces ``predict`` (regressors) and ``predict_proba`` (classifiers).
* [`pad_to_perfect`][keras_trees.interop.sklearn.pad_to_perfect] is [`keras_trees.forest.Forest.pad_to_perfect`][keras_trees.forest.Forest.pad_to_perfect]:
  a perfect linear tree of a given depth with the same predictions (the form
  non-greedy trees train).
* Trees of keras-trees layers are ``layer.to_forest()``; ``from_end_to_end``
  and the ``HeapTree`` name remain for one release, deprecated.
"""

import numbers
import warnings

import numpy as np

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.forest import Forest
from keras_trees.validation import memory as _memory


def _tree_arrays(estimator):
    tree = getattr(estimator, "tree_", estimator)
    needed = ("children_left", "children_right", "feature", "threshold", "value", "n_features")
    if not all(hasattr(tree, a) for a in needed):
        raise TypeError(
            "expected a fitted scikit-learn DecisionTreeClassifier/DecisionTreeRegressor or its "
            f"tree_, got {type(estimator).__name__}"
        )
    return tree


def _check_arrays(tree, left, right, value):
    """The ``tree_`` arrays are consistent (children in range, parents before
    children, feature ids in range): a clear error instead of a wrong tree."""
    nodes = int(tree.node_count) if hasattr(tree, "node_count") else len(left)
    if nodes < 1 or left.shape != (nodes,) or right.shape != (nodes,) or len(value) != nodes:
        raise ValueError(f"estimator: tree_ arrays must describe node_count={nodes} >= 1 nodes")
    inner = left != -1
    if ((right != -1) != inner).any():
        raise ValueError("estimator: tree_ has a node with only one child")
    ids = np.arange(nodes)
    if (inner & ((left <= ids) | (right <= ids) | (left >= nodes) | (right >= nodes))).any():
        raise ValueError("estimator: tree_ children must be later nodes in [0, node_count)")
    feature = np.asarray(tree.feature)
    if (inner & ((feature < 0) | (feature >= int(tree.n_features)))).any():
        raise ValueError(f"estimator: tree_ feature ids must lie in [0, n_features={int(tree.n_features)})")


@keras_trees_export("keras_trees.interop")
def from_sklearn(estimator, max_depth=None, dtype="float32"):
    """Converts a fitted scikit-learn decision tree into a one-tree [`Forest`][keras_trees.forest.Forest].

    Args:
        estimator: fitted ``DecisionTreeClassifier``/``DecisionTreeRegressor``
            (single output for classifiers), or its ``tree_``.
        max_depth: depth of the heap; default the tree's own depth. A deeper
            tree is truncated: its nodes on level ``max_depth`` become leaves
            holding the node's (class distribution / mean) value. The heap
            holds ``2**(max_depth + 1) - 1`` positions: a depth whose arrays
            would take more than a quarter of this machine's memory is refused
            (``ValueError`` saying how much it would need and the largest depth
            that fits) before anything is allocated.
        dtype: ``"float32"`` or ``"float64"`` for the thresholds and values.

    Returns:
        A [`Forest`][keras_trees.forest.Forest] with axis-aligned splits;
        ``leaves`` hold class probabilities in the order of
        ``estimator.classes_`` (classifiers) or the regression outputs;
        ``source_node`` maps heap positions to sklearn node ids;
        ``feature_names`` are ``estimator.feature_names_in_`` when fitted on a
        DataFrame.

    >>> import numpy as np
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> x = np.random.default_rng(0).normal(size=(200, 3)).astype("float32")
    >>> y = (x[:, 0] > 0.2).astype(int) + (x[:, 1] > 1.0)
    >>> cart = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)
    >>> forest = from_sklearn(cart)
    >>> bool((forest.source_node[0, forest.apply(x)[:, 0]] == cart.apply(x)).all())
    True
    """
    tree = _tree_arrays(estimator)
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    left, right = np.asarray(tree.children_left), np.asarray(tree.children_right)
    value = np.asarray(tree.value, dtype=np.float64)  # (nodes, outputs, classes)
    _check_arrays(tree, left, right, value)
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
    if isinstance(max_depth, bool) or not isinstance(max_depth, numbers.Real) or int(max_depth) != max_depth \
            or max_depth < 1:
        raise ValueError(f"max_depth must be an integer >= 1, got {max_depth!r}")
    max_depth = int(max_depth)
    itemsize = dtype.itemsize
    _memory.check_heap(
        "from_sklearn", 1, max_depth, bytes_per_position=4 + itemsize * value.shape[1] + 8,
        bytes_per_internal=8 + itemsize,
        hint=f"the tree has depth {own_depth}; pass a smaller max_depth to truncate it "
             "(nodes on that level become leaves holding their node's value)")
    internal, positions = topology.num_internal(max_depth), topology.num_positions(max_depth)
    state = topology.empty(1, max_depth)
    feature = np.zeros((1, internal), dtype=np.int64)
    threshold = np.zeros((1, internal), dtype=dtype)
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
        feature[0, pos] = tree.feature[n]
        t = float(tree.threshold[n])
        if dtype == np.float32:
            t32 = np.float32(t)
            if float(t32) > t:  # largest float32 <= t: x <= t  <=>  x <= t32 for float32 x
                t32 = np.nextafter(t32, np.float32(-np.inf))
            threshold[0, pos] = t32
        else:
            threshold[0, pos] = t
        stack.append((left[n], 2 * pos + 1))
        stack.append((right[n], 2 * pos + 2))
    names = getattr(estimator, "feature_names_in_", None)
    return Forest(
        family="sklearn_decision_tree", node_state=state, split_kind="axis_aligned", feature=feature,
        threshold=threshold, leaves=leaves, input_dim=int(tree.n_features), aggregation="mean",
        leaf_output="class distribution (order of classes_)" if classifier else "regression value",
        inputs="estimator input", num_classes=value.shape[1] if classifier else None,
        feature_names=None if names is None else list(names), source_node=source,
    )


@keras_trees_export("keras_trees.interop")
def pad_to_perfect(tree, depth=None):
    """[`keras_trees.forest.Forest.pad_to_perfect`][keras_trees.forest.Forest.pad_to_perfect] of ``tree``: perfect
    linear trees of ``depth`` (default its maximum depth) with the same predictions."""
    return tree.pad_to_perfect(depth)


@keras_trees_export("keras_trees.interop")
def from_end_to_end(layer, tree_index=0):
    """Deprecated: use ``layer.to_forest().tree(tree_index)``.

    Tree ``tree_index`` of a built [`EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree]/``EndToEndForest`` as a
    one-tree [`Forest`][keras_trees.forest.Forest] (plain inputs, no ``split_features``); a negative
    ``tree_index`` counts from the last tree, as Python's indexing does."""
    warnings.warn("from_end_to_end is deprecated: use layer.to_forest().tree(tree_index)",
                  DeprecationWarning, stacklevel=2)
    if getattr(layer, "split_features", None) is not None:
        raise ValueError("trees with split_features (a feature extractor) cannot be converted")
    return layer.to_forest().tree(tree_index)


def _heap_tree(node_state, split_weights, split_bias, leaf_values, source_node=None):
    """The linear [`Forest`][keras_trees.forest.Forest] made of the fields of the former ``HeapTree``."""
    return Forest(node_state=node_state, split_kind="linear", weights=split_weights, bias=split_bias,
                  leaves=leaf_values, input_dim=np.shape(split_weights)[-1], source_node=source_node)


def __getattr__(name):
    if name == "HeapTree":
        warnings.warn(
            "keras_trees.interop.sklearn.HeapTree is deprecated: trees are keras_trees.Forest values "
            "(HeapTree(node_state, split_weights, split_bias, leaf_values, source_node) now builds one)",
            DeprecationWarning, stacklevel=2)
        return _heap_tree
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

