"""Feature names for rules, exports, plots and importances.

Names come, first found first, from a ``feature_names=`` argument, the columns
of a pandas ``DataFrame`` given as ``x`` (pandas is never imported: a frame is
recognised by its ``columns`` and ``to_numpy``), or the forest's own
``feature_names``; without any, feature ``j`` is written ``x[j]``.
"""

import numpy as np

from keras_trees.forest import Forest


def is_frame(x):
    """Whether ``x`` is a pandas ``DataFrame`` (or looks like one)."""
    return hasattr(x, "columns") and hasattr(x, "to_numpy") and getattr(x, "ndim", 2) == 2


def frame_names(x):
    """The column names of a DataFrame ``x`` as strings, else None."""
    return [str(c) for c in x.columns] if is_frame(x) else None


def as_array(x):
    """``x`` as a NumPy array (a DataFrame through ``to_numpy``)."""
    return x.to_numpy() if is_frame(x) else np.asarray(x)


def resolve(num_features, feature_names=None, x=None, forest=None):
    """``num_features`` names: ``feature_names``, else ``x``'s columns, else
    ``forest.feature_names``, else ``["x[0]", "x[1]", ...]``."""
    for names in (feature_names, frame_names(x), getattr(forest, "feature_names", None)):
        if names is not None:
            names = [str(n) for n in names]
            if len(names) != num_features:
                raise ValueError(f"feature_names must hold {num_features} names, got {len(names)}")
            return names
    return [f"x[{j}]" for j in range(num_features)]


def is_estimator(source):
    """Whether ``source`` is a keras-trees scikit-learn estimator (duck typing:
    scikit-learn is not imported here)."""
    return bool(getattr(type(source), "_keras_trees_estimator", False))


def from_estimator(estimator, x=None, feature_names=None, where="inspection"):
    """``(forest, rows)`` of a fitted keras-trees estimator: its trees over the
    design rows of its input columns (``estimator.forest_``), named after the
    columns (``feature_names``: names of the ``n_features_in_`` input columns,
    default ``feature_names_in_``), and the design rows of its inputs ``x``
    (``estimator.forest_features(x)``; None without ``x``). ``x`` is what
    ``predict`` takes, in memory: a stream of batches raises ``TypeError``."""
    from keras_trees.inspection.export import require_arrays

    require_arrays(x, "x", f"{where} of an estimator", "its rows go through the estimator's preprocessing")
    forest = estimator._forest(feature_names)
    return forest, None if x is None else estimator.forest_features(x)


def estimator_labels(estimator, y):
    """``y`` as the estimator's forest reads labels: class ids in the order of
    ``classes_`` (any label type), else the targets as given."""
    if y is None or estimator._task != "classification":
        return y
    y = as_array(y).reshape(-1)
    ids = np.searchsorted(estimator.classes_, y)
    ids = np.minimum(ids, len(estimator.classes_) - 1)
    unknown = estimator.classes_[ids] != y
    if unknown.any():
        raise ValueError(f"y holds labels the estimator was not fitted on: {sorted(set(y[unknown].tolist()))[:5]}")
    return ids


def as_forest(source):
    """A [`Forest`][keras_trees.forest.Forest] from a forest, an exported layer dict
    ([`export_trees`][keras_trees.inspection.export.export_trees]), a tree layer
    (``to_forest()``), a fitted scikit-learn tree
    ([`from_sklearn`][keras_trees.interop.sklearn.from_sklearn]) or a fitted keras-trees
    estimator (its ``forest_``, over its input columns)."""
    if isinstance(source, Forest):
        return source
    if is_estimator(source):  # its trees over its input columns
        return source.forest_
    if isinstance(source, dict):
        return Forest.from_dict(source)
    if callable(getattr(source, "to_forest", None)):
        return source.to_forest()
    if hasattr(source, "tree_"):
        from keras_trees.interop.sklearn import from_sklearn

        return from_sklearn(source)
    raise TypeError(f"expected a Forest, an exported layer dict, a tree layer, a fitted "
                    f"scikit-learn tree or a fitted keras-trees estimator, got {type(source).__name__}")
