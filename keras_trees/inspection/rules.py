"""Trees as indented rule text, in the layout of scikit-learn's ``export_text``.

::

    |--- petal width (cm) <= 0.800
    |   |--- class: setosa
    |--- petal width (cm) >  0.800
    |   |--- ...

Each split prints its test twice, first the side samples going left satisfy,
then the right side, following the forest's ``right_if``: an axis-aligned
split ``x[f] - t`` reads ``f <= t`` / ``f >  t`` (``f >= t`` / ``f <  t`` for
``right_if="negative"``); an oblique one ``<w, x> + b`` reads
``0.52*a - 0.31*b + 0.12*c + ... (4 more of 7 terms) <= -b`` with its ``terms``
largest ``|w_j|`` and how many nonzero terms it has; a noisy-OR one ``f(x) <= c`` with
``f(x) = r_1*sp(<w_1, x> + b_1) + ...`` (``sp`` = softplus, facets by
decreasing ``r_k``, facets with ``r_k = 0`` left out).

A fitted keras-trees estimator prints its trees over its input columns
(``estimator.forest_``): numeric columns in their units, a split on a one-hot
or missing-value column as ``colour = red`` / ``colour != red`` and ``age is
missing`` / ``age is not missing``, an oblique split with one nonzero weight
as a threshold on its column, and oblique terms ranked by ``|w_j| * std_j``
(each column's spread on the training data) instead of ``|w_j|``.
"""

import numpy as np

from keras_trees import streaming, topology
from keras_trees.api_export import keras_trees_export
from keras_trees.forest import node_sums
from keras_trees.inspection import names as _names
from keras_trees.inspection.export import _is_stream
from keras_trees.validation import arguments, bounds


def _number(value, decimals):
    return f"{value:.{decimals}f}"


def _linear_terms(w, names, decimals, terms, scale=None):
    """``w`` as a sum of its ``terms`` largest terms: largest ``|w_j|``, or with
    ``scale`` (each feature's spread) largest ``|w_j| * scale_j``."""
    size = np.abs(w) if scale is None else np.abs(w) * scale
    order = [j for j in np.argsort(-size, kind="stable") if w[j] != 0]
    if not order:
        return "0"
    text = ""
    for j in order[:terms]:
        sign = "-" if w[j] < 0 else "+"
        text += f" {sign} {_number(abs(w[j]), decimals)}*{names[j]}" if text else \
            f"{'-' if w[j] < 0 else ''}{_number(abs(w[j]), decimals)}*{names[j]}"
    if len(order) > terms:
        text += f" + ... ({len(order) - terms} more of {len(order)} terms)"
    return text


def _one_column_text(forest, t, i, names, decimals):
    """``(left, right)`` of a split reading one column, in the estimators'
    forests (``forest.extra`` holds ``feature_scale``; others print as they
    always did): a 0/1 column that ``binary_features`` names ``[column,
    value]`` (one-hot and missing-value columns) reads ``colour = red`` /
    ``colour != red``, ``age is missing`` / ``age is not missing``; an oblique
    split with one nonzero weight reads as a threshold on its column. None for
    other splits (and for a 0/1 column both of whose values go the same way)."""
    if "feature_scale" not in forest.extra:
        return None
    if forest.split_kind == "axis_aligned":
        j, w, b = int(forest.feature[t, i]), 1.0, -float(forest.threshold[t, i])
    elif forest.split_kind == "linear":
        used = np.flatnonzero(forest.weights[t, i])
        if len(used) != 1:
            return None
        j = int(used[0])
        w, b = float(forest.weights[t, i, j]), float(forest.bias[t, i])
    else:
        return None
    positive = forest.right_if == "positive"
    binary = (forest.extra.get("binary_features") or [None] * forest.input_dim)[j]
    if binary is not None:
        column, value = binary
        if value == "missing":
            one, zero = f"{column} is missing", f"{column} is not missing"
        else:
            one, zero = f"{column} = {value}", f"{column} != {value}"
        right = [(w * v + b > 0) if positive else (w * v + b < 0) for v in (0.0, 1.0)]
        if right[0] != right[1]:
            return (zero, one) if right[1] else (one, zero)
        return None
    if forest.split_kind == "axis_aligned":
        return None  # the usual text
    threshold, name = _number(-b / w, decimals), names[j]
    if (w > 0) == positive:  # right for larger values
        return f"{name} <= {threshold}", f"{name} >  {threshold}"
    return f"{name} >= {threshold}", f"{name} <  {threshold}"


def split_text(forest, t, i, names, decimals, terms):
    """``(left, right)`` texts of split ``i`` of tree ``t``. Oblique terms are
    ranked by ``|w_j|``, or by ``|w_j| * s_j`` where ``forest.extra`` holds
    ``feature_scale`` ``s`` (the estimators' forests: features in their own units)."""
    scale = forest.extra.get("feature_scale")
    scale = None if scale is None else np.asarray(scale, np.float64)
    one = _one_column_text(forest, t, i, names, decimals)
    if one is not None:
        return one
    if forest.split_kind == "axis_aligned":
        lhs, rhs = names[forest.feature[t, i]], forest.threshold[t, i]
    elif forest.split_kind == "linear":
        lhs, rhs = _linear_terms(forest.weights[t, i], names, decimals, terms, scale), -forest.bias[t, i]
    else:
        r = forest.expert_weights[t, i]
        facets = [k for k in np.argsort(-r, kind="stable") if r[k] > 0]
        parts = [f"{_number(r[k], decimals)}*sp({_linear_terms(forest.weights[t, i, k], names, decimals, terms, scale)}"
                 f" {'-' if forest.bias[t, i, k] < 0 else '+'} {_number(abs(forest.bias[t, i, k]), decimals)})"
                 for k in facets[:terms]]
        more = f" + ... ({len(facets) - terms} more of {len(facets)} facets)" if len(facets) > terms else ""
        lhs, rhs = (" + ".join(parts) or "0") + more, forest.threshold[t, i]
    rhs = _number(rhs, decimals)
    if forest.right_if == "positive":
        return f"{lhs} <= {rhs}", f"{lhs} >  {rhs}"
    return f"{lhs} >= {rhs}", f"{lhs} <  {rhs}"


def _leaf(forest, t, i, class_names, decimals, samples):
    value = forest.leaves[t, i]
    if forest.num_classes is not None:
        k = int(np.argmax(value))
        text = f"class: {class_names[k] if class_names is not None else k}"
    else:
        text = "value: [" + ", ".join(_number(v, decimals) for v in value) + "]"
    return text if samples is None else f"{text} (samples: {int(samples[t, i])})"


def _subtree_depth(state, i):
    if state[i] != topology.SPLIT:
        return 1
    return 1 + max(_subtree_depth(state, 2 * i + 1), _subtree_depth(state, 2 * i + 2))


@keras_trees_export("keras_trees.inspection")
def export_text(forest, tree=0, feature_names=None, class_names=None, max_depth=None, decimals=3,
                x=None, terms=3, spacing=3):
    """Tree ``tree`` as indented rules (scikit-learn's ``export_text`` layout).

    Args:
        forest: a [`Forest`][keras_trees.forest.Forest], an exported layer dict,
            a tree layer, a fitted scikit-learn tree or a fitted keras-trees
            estimator: its trees over its input columns (``estimator.forest_``:
            numeric columns in their units, one-hot splits as ``colour = red``,
            missing-value indicators as ``age is missing``); ``x`` then is what
            its ``predict`` takes, ``feature_names`` names its input columns
            and ``class_names`` defaults to its ``classes_``.
        tree: which tree of the forest.
        feature_names: ``input_dim`` names; default the columns of ``x`` if a
            DataFrame, else the forest's ``feature_names``, else ``x[j]``.
        class_names: names of the classes, for forests whose leaves are class
            distributions (leaves print the ``argmax``); other leaves print
            their values.
        max_depth: splits deeper than this print ``truncated branch of depth k``
            (None: the whole tree).
        decimals: digits of thresholds, weights and values.
        x: optional rows the splits read: leaves then show ``(samples: n)``,
            the samples routed there ([`Forest.node_statistics`][keras_trees.forest.Forest.node_statistics]). Or a
            stream of ``(x, y)`` / ``(x, y, sample_weight)`` batches of such
            rows (`keras_trees.streaming`; labels and weights unused):
            the counts are summed batch by batch and, in a distributed run,
            over the workers (every worker must call it).
        terms: oblique splits print their ``terms`` largest-``|weight|`` terms
            (noisy-OR splits as many facets), then ``+ ... (k more of n terms)``.
        spacing: width of one indentation level.

    >>> import numpy as np
    >>> from keras_trees import Forest, topology
    >>> stump = Forest(node_state=topology.stump(1, 1), split_kind="axis_aligned",
    ...                feature=np.array([[1]]), threshold=np.array([[0.5]]),
    ...                leaves=np.array([[[0.0, 0.0], [0.9, 0.1], [0.2, 0.8]]]), input_dim=2, num_classes=2)
    >>> print(export_text(stump, feature_names=["a", "b"], class_names=["no", "yes"]))
    |--- b <= 0.500
    |   |--- class: no
    |--- b >  0.500
    |   |--- class: yes
    <BLANKLINE>
    """
    if _names.is_estimator(forest):
        estimator = forest
        forest, x = _names.from_estimator(estimator, x, feature_names, "export_text")
        if class_names is None and estimator._task == "classification":
            class_names = [str(c) for c in estimator.classes_]
        feature_names = None
    forest = _names.as_forest(forest)
    if max_depth is not None:
        max_depth = bounds.nonnegative_int("max_depth", max_depth)
    decimals = bounds.nonnegative_int("decimals", decimals)
    terms = arguments.positive_int("terms", terms)
    spacing = arguments.positive_int("spacing", spacing)
    one = forest.tree(tree)
    if x is not None and _is_stream(x):
        names = _names.resolve(forest.input_dim, feature_names, None, forest)
        samples = _streamed_samples(one, x)
    else:
        names = _names.resolve(forest.input_dim, feature_names, x, forest)
        samples = None if x is None else one.node_statistics(_names.as_array(x))["samples"]
    if class_names is not None and forest.num_classes is not None and len(class_names) != forest.num_classes:
        raise ValueError(f"class_names must hold {forest.num_classes} names, got {len(class_names)}")
    state = one.node_state[0]
    lines = []

    def recurse(i, depth):
        indent = ("|" + " " * spacing) * depth
        indent = indent[:-spacing] + "-" * spacing
        if max_depth is not None and depth > max_depth + 1 and _subtree_depth(state, i) > 1:
            lines.append(f"{indent} truncated branch of depth {_subtree_depth(state, i)}")
        elif state[i] == topology.SPLIT:
            left, right = split_text(one, 0, i, names, decimals, terms)
            lines.append(f"{indent} {left}")
            recurse(2 * i + 1, depth + 1)
            lines.append(f"{indent} {right}")
            recurse(2 * i + 2, depth + 1)
        else:
            lines.append(f"{indent} {_leaf(one, 0, i, class_names, decimals, samples)}")

    recurse(0, 1)
    return "\n".join(lines) + "\n"


def _streamed_samples(forest, data):
    """``(T, N)`` samples routed through every node of ``forest`` from a stream
    of batches, summed batch by batch and over the workers."""
    data = streaming.stream(data, name="export_text")
    N = forest.node_state.shape[1]
    counts = np.zeros((forest.num_trees, N))
    for xb, _, _ in data:
        if len(xb):
            counts += node_sums(forest.route(xb), np.ones(len(xb)), N, subtrees=True)[..., 0]
    counts, = streaming.all_reduce_sum([counts])
    return np.rint(counts).astype(np.int64)
