"""Keras Tuner search spaces for end-to-end learned trees and forests (Hehn et al. 2019)."""

from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.layers import EndToEndForest, EndToEndTree, _validation
from keras_trees.tuner._base import TreeHyperModel


@keras_trees_export("keras_trees.tuner")
class EndToEndTreeHyperModel(TreeHyperModel):
    """A greedily grown, then finetuned [`EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree] (or forest).

    Hyperparameters: ``max_depth`` 2-``max_depth``, ``annealing`` (the steepness
    increment per epoch, Table 1: 0, 0.01 or 0.1), ``epochs_per_level`` (from
    ``epochs_per_level``), ``split_type`` (oblique or axis-aligned), plus
    ``learning_rate`` (1e-3-1e-1) and ``batch_size``; with ``forest=True``
    also ``num_trees`` and ``features_per_split``.

    ``fit`` adds [`GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth], [`EMLeafUpdate`][keras_trees.callbacks.em_leaf_update.EMLeafUpdate] (classification)
    and [`SteepnessAnnealing`][keras_trees.callbacks.steepness_annealing.SteepnessAnnealing] on the training data of the trial (with the
    ``sample_weight``/``class_weight`` given to ``search``, if any) and runs
    for ``growth.max_epochs(max_depth)`` epochs (growth and finetuning stop the
    trial themselves); the ``epochs`` given to ``search`` are ignored.
    """

    def __init__(self, input_shape, num_classes=None, units=None, max_depth=10, forest=False,
                 max_trees=70, epochs_per_level=(10, 20, 45), batch_sizes=(250, 500, 1000), **kwargs):
        super().__init__(input_shape, num_classes=num_classes, units=units, batch_sizes=batch_sizes, **kwargs)
        self.max_depth = _validation.positive_int("max_depth", max_depth)
        self.forest = bool(forest)
        self.max_trees = _validation.positive_int("max_trees", max_trees)
        levels = epochs_per_level if isinstance(epochs_per_level, (list, tuple)) else [epochs_per_level]
        self.epochs_per_level = [_validation.positive_int("epochs_per_level", e) for e in levels]

    @property
    def outputs_probabilities(self):
        return True  # categorical leaves

    def tree_layers(self, hp):
        depth = self.clamped_int(hp, "max_depth", min(2, self.max_depth), self.max_depth)
        split_type = hp.Choice("split_type", ["oblique", "axis_aligned"])
        hp.Choice("annealing", [0.0, 0.01, 0.1], default=0.1)
        hp.Choice("epochs_per_level", self.epochs_per_level)
        task = {"num_classes": self.num_classes} if self.num_classes is not None else {"units": self.units}
        if not self.forest:
            return [EndToEndTree(max_depth=depth, split_type=split_type, **task)]
        num_trees = self.clamped_int(hp, "num_trees", min(5, self.max_trees), self.max_trees, sampling="log")
        features = None
        q = 1
        for d in self.input_shape:
            q *= d
        if split_type == "oblique" and q > 1:
            with hp.conditional_scope("split_type", ["oblique"]):
                features = self.clamped_int(hp, "features_per_split", 1, q, sampling="log")
        return [EndToEndForest(num_trees, depth, split_type=split_type, features_per_split=features, **task)]

    def fit(self, hp, model, x=None, y=None, *args, callbacks=None, epochs=None, **kwargs):
        kwargs.pop("batch_size", None)  # tuned
        # The weights given to search() weight the leaf statistics too.
        weights = {"sample_weight": kwargs.get("sample_weight"), "class_weight": kwargs.get("class_weight")}
        growth = GreedyLevelGrowth(x, y, epochs_per_level=hp.get("epochs_per_level"), **weights)
        ours = [growth, SteepnessAnnealing(hp.get("annealing"))]
        if self.num_classes is not None:
            ours.insert(1, EMLeafUpdate(x, y, **weights))
        return model.fit(x, y, *args, batch_size=hp.get("batch_size"),
                         callbacks=list(callbacks or []) + ours,
                         epochs=growth.max_epochs(hp.get("max_depth")), **kwargs)

    def get_config(self):
        return super().get_config() | {
            "max_depth": self.max_depth, "forest": self.forest, "max_trees": self.max_trees,
            "epochs_per_level": self.epochs_per_level,
        }
