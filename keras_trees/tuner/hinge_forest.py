"""Keras Tuner search space for random hinge forests and ferns (Lay et al. 2018)."""

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.layers import HingeBatchNormalization, HingeFern, HingeForest, _validation
from keras_trees.tuner._base import TreeHyperModel


@keras_trees_export("keras_trees.tuner")
class HingeForestHyperModel(TreeHyperModel):
    """``Input -> Dense features -> HingeBatchNormalization -> HingeForest | HingeFern``.

    Hyperparameters around the paper's setting (100 trees of depth 10 over 100
    learned inner-product features, Adam lr 0.005): ``kind`` (forest or fern),
    ``num_trees`` 10-100 (log), ``depth`` 3-10 (the layer's ``max_depth``; the
    hyperparameter keeps its 0.1.0 name so saved trials reload), ``features`` 0 (the raw inputs),
    50, 100 or 200 learned features, plus ``learning_rate`` (1e-3-1e-2 by
    default) and ``batch_size``. Trees are summed.
    """

    def __init__(self, input_shape, num_classes=None, units=None, max_trees=100, max_depth=10,
                 learning_rate=(1e-3, 1e-2), **kwargs):
        super().__init__(input_shape, num_classes=num_classes, units=units,
                         learning_rate=learning_rate, **kwargs)
        self.max_trees = _validation.positive_int("max_trees", max_trees)
        self.max_depth = _validation.positive_int("max_depth", max_depth)

    def tree_layers(self, hp):
        kind = hp.Choice("kind", ["forest", "fern"])
        num_trees = self.clamped_int(hp, "num_trees", min(10, self.max_trees), self.max_trees, sampling="log")
        depth = self.clamped_int(hp, "depth", min(3, self.max_depth), self.max_depth)
        features = hp.Choice("features", [0, 50, 100, 200])
        layers = [keras.layers.Flatten()] if len(self.input_shape) > 1 else []
        if features:
            layers.append(keras.layers.Dense(features, use_bias=False))
        layers.append(HingeBatchNormalization())
        cls = HingeForest if kind == "forest" else HingeFern
        layers.append(cls(num_trees, max_depth=depth, units=self.output_dim, reduction="sum"))
        return layers

    def get_config(self):
        return super().get_config() | {"max_trees": self.max_trees, "max_depth": self.max_depth}
