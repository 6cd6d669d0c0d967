"""Look inside trained trees of every family.

* :func:`export_trees` / :func:`to_json`: a plain, documented dict / JSON per
  tree layer (format in :mod:`keras_trees.inspection.export`), with sample
  counts routed deterministically from given data;
  :func:`route_exported` / :func:`predict_exported` evaluate it with NumPy alone.
* :func:`tree_statistics`: depth, leaves, splits, split evaluations per sample,
  reachable leaves (soft trees).
* :mod:`keras_trees.inspection.plots` (needs matplotlib): :func:`plot_tree`,
  :func:`plot_split_weights`, :func:`plot_decision_regions`.
* :func:`register_family` lets a new tree layer join all of the above by
  describing itself as a :class:`ForestView` on the shared topology.
"""

from keras_trees.inspection._views import ForestView, register_family, view
from keras_trees.inspection.export import (
    export_layer,
    export_trees,
    predict_exported,
    route_exported,
    to_json,
    tree_layers,
)
from keras_trees.inspection.statistics import layer_statistics, tree_statistics


def __getattr__(name):  # plots import matplotlib only when used
    if name in ("plot_tree", "plot_split_weights", "plot_decision_regions"):
        from keras_trees.inspection import plots

        return getattr(plots, name)
    raise AttributeError(name)


__all__ = [
    "ForestView",
    "export_layer",
    "export_trees",
    "layer_statistics",
    "plot_decision_regions",
    "plot_split_weights",
    "plot_tree",
    "predict_exported",
    "register_family",
    "route_exported",
    "to_json",
    "tree_layers",
    "tree_statistics",
    "view",
]
