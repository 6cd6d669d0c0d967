"""Look inside trained trees of every family.

Every tree layer describes its trees as one value type,
[`keras_trees.forest.Forest`][keras_trees.forest.Forest] (``layer.to_forest()``); everything here
reads forests:

* [`export_trees`][keras_trees.inspection.export.export_trees] / [`to_json`][keras_trees.inspection.export.to_json]: a plain, documented dict / JSON per
  tree layer (format in `keras_trees.inspection.export`), with sample
  counts routed deterministically from given data;
  [`route_exported`][keras_trees.inspection.export.route_exported] / [`predict_exported`][keras_trees.inspection.export.predict_exported] evaluate it with NumPy alone.
* [`tree_statistics`][keras_trees.inspection.statistics.tree_statistics]: depth, leaves, splits, split evaluations per sample,
  reachable leaves (soft trees).
* `keras_trees.inspection.plots` (needs matplotlib): [`plot_tree`][keras_trees.inspection.plots.plot_tree]
  (deep trees too: cut with ``max_depth``), [`plot_split_weights`][keras_trees.inspection.plots.plot_split_weights],
  [`plot_decision_regions`][keras_trees.inspection.plots.plot_decision_regions].
* [`feature_importances`][keras_trees.inspection.importances.feature_importances] (split usage or impurity gain of a forest),
  [`routing_sensitivity`][keras_trees.inspection.importances.routing_sensitivity] (soft layers), [`permutation_importance`][keras_trees.inspection.importances.permutation_importance]
  (any model): `keras_trees.inspection.importances`.
* [`export_text`][keras_trees.inspection.rules.export_text]: a tree as indented rules, scikit-learn's layout.
* [`hard_forest`][keras_trees.inspection.extraction.hard_forest]: the hard-routed forest of a soft layer (Tree Ensemble
  Layer, hinge forests) and its measured agreement with the layer.
* Feature names come from ``feature_names=``, a pandas DataFrame's columns or
  the forest's ``feature_names`` (`keras_trees.inspection.names`).

Data too large for memory: the statistics that are sums over samples take a
stream of ``(x, y[, sample_weight])`` batches as well as arrays
(`keras_trees.streaming`) and sum it batch by batch and over the workers
of a distributed run: [`export_trees`][keras_trees.inspection.export.export_trees] / [`to_json`][keras_trees.inspection.export.to_json],
[`tree_statistics`][keras_trees.inspection.statistics.tree_statistics], [`feature_importances`][keras_trees.inspection.importances.feature_importances],
[`routing_sensitivity`][keras_trees.inspection.importances.routing_sensitivity], [`export_text`][keras_trees.inspection.rules.export_text], [`plot_tree`][keras_trees.inspection.plots.plot_tree]'s sample
counts (and [`Forest.node_statistics`][keras_trees.forest.Forest.node_statistics]).
The others need arrays in memory and raise ``TypeError`` for a stream:
[`permutation_importance`][keras_trees.inspection.importances.permutation_importance] (shuffles a column across all rows),
[`hard_forest`][keras_trees.inspection.extraction.hard_forest] (every row's outputs and their agreement),
[`layer_statistics`][keras_trees.inspection.statistics.layer_statistics] (one batch: use [`tree_statistics`][keras_trees.inspection.statistics.tree_statistics]),
[`plot_decision_regions`][keras_trees.inspection.plots.plot_decision_regions] (draws every point).

A new tree layer joins all of the above by defining ``to_forest()`` and
``forest_features(inputs)`` (see ``keras_trees.layers._forest_layer``).
"""

import warnings

from keras_trees.api_export import public_api
from keras_trees.forest import Forest
from keras_trees.inspection import (  # noqa: F401  (plots imports matplotlib only when used)
    export, extraction, importances, names, plots, rules, statistics,
)


def _view(layer):
    return layer.to_forest()


def __getattr__(name):
    if name in ("ForestView", "view"):  # deprecated names of the former registry
        new = "keras_trees.Forest" if name == "ForestView" else "layer.to_forest()"
        warnings.warn(f"keras_trees.inspection.{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2)
        return Forest if name == "ForestView" else _view
    if name == "register_family":
        raise AttributeError(
            "keras_trees.inspection.register_family was removed: a tree layer joins inspection by "
            "defining to_forest() (returning a keras_trees.Forest) and forest_features(inputs)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = public_api(__name__)
