"""Keras Tuner search space for the Tree Ensemble Layer (Hazimeh et al. 2020, Section 5)."""

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.layers import TreeEnsembleLayer, _validation
from keras_trees.tuner._base import TreeHyperModel


@keras_trees_export("keras_trees.tuner")
class TreeEnsembleHyperModel(TreeHyperModel):
    """``Input -> BatchNormalization -> TreeEnsembleLayer`` with the paper's search space.

    Hyperparameters (the paper tunes trees, depth, gamma, learning rate, batch
    size and an L2 penalty on the node weights): ``num_trees`` 1-100 (log),
    ``depth`` 2-8 (the layer's ``max_depth``), ``gamma`` 1e-2-1 (log; the
    layer's ``transition_width``), ``use_node_l2`` / ``node_l2`` 1e-6-1e-1
    (log), plus ``learning_rate`` and ``batch_size``. The hyperparameters keep
    their 0.1.0 names so that saved tuner trials reload.

    >>> import keras_tuner as kt
    >>> hypermodel = TreeEnsembleHyperModel(input_shape=(16,), num_classes=26)
    >>> model = hypermodel.build(kt.HyperParameters())
    >>> type(model.layers[-1]).__name__
    'TreeEnsembleLayer'
    """

    def __init__(self, input_shape, num_classes=None, units=None, max_trees=100, max_depth=8, **kwargs):
        super().__init__(input_shape, num_classes=num_classes, units=units, **kwargs)
        self.max_trees = _validation.positive_int("max_trees", max_trees)
        self.max_depth = _validation.positive_int("max_depth", max_depth)

    def tree_layers(self, hp):
        num_trees = self.clamped_int(hp, "num_trees", 1, self.max_trees, sampling="log")
        depth = self.clamped_int(hp, "depth", 2, self.max_depth)
        width = hp.Float("gamma", 1e-2, 1.0, sampling="log")
        node_l2 = 0.0
        if hp.Boolean("use_node_l2"):
            with hp.conditional_scope("use_node_l2", [True]):
                node_l2 = hp.Float("node_l2", 1e-6, 1e-1, sampling="log")
        return [
            keras.layers.BatchNormalization(),
            TreeEnsembleLayer(
                num_trees, max_depth=depth, units=self.output_dim, transition_width=width,
                node_regularizer=keras.regularizers.L2(node_l2) if node_l2 else None,
            ),
        ]

    def get_config(self):
        return super().get_config() | {"max_trees": self.max_trees, "max_depth": self.max_depth}
