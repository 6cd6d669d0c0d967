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


def as_forest(source):
    """A :class:`~keras_trees.forest.Forest` from a forest, an exported layer dict
    (:func:`~keras_trees.inspection.export_trees`), a tree layer
    (``to_forest()``) or a fitted scikit-learn tree
    (:func:`~keras_trees.interop.from_sklearn`)."""
    if isinstance(source, Forest):
        return source
    if isinstance(source, dict):
        return Forest.from_dict(source)
    if callable(getattr(source, "to_forest", None)):
        return source.to_forest()
    if hasattr(source, "tree_"):
        from keras_trees.interop.sklearn import from_sklearn

        return from_sklearn(source)
    raise TypeError(f"expected a Forest, an exported layer dict, a tree layer or a fitted "
                    f"scikit-learn tree, got {type(source).__name__}")
