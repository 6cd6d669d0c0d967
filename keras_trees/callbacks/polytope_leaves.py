"""Empirical leaves of convex polytope trees (Armandpour & Zhou 2021, Section 3.3.1)."""

import keras

from keras_trees.callbacks.polytope_annealing import polytope_layers


@keras.saving.register_keras_serializable(package="keras_trees")
class PolytopeLeafUpdate(keras.callbacks.Callback):
    """Sets leaves to the empirical class distribution (mean response) of the
    training data routed deterministically, at the end of every epoch (or only
    at the end of training with ``every_epoch=False``).

    Args:
        x, y: training inputs of the tree layer and labels / targets.
        every_epoch: update after each epoch (default) or once at the end.
        layers: optional layer name(s).

    >>> import numpy as np
    >>> PolytopeLeafUpdate(np.zeros((2, 3)), np.zeros(2)).every_epoch
    True
    """

    def __init__(self, x, y, every_epoch=True, layers=None):
        super().__init__()
        if x is None or y is None or len(x) != len(y) or len(x) == 0:
            raise ValueError("PolytopeLeafUpdate needs non-empty x and y of the same length")
        self.x, self.y = x, y
        self.every_epoch = bool(every_epoch)
        self.layer_names = layers

    def _update(self):
        for layer in polytope_layers(self.model, self.layer_names):
            layer.set_leaves_from_data(self.x, self.y)

    def on_epoch_end(self, epoch, logs=None):
        if self.every_epoch:
            self._update()

    def on_train_end(self, logs=None):
        if not self.every_epoch:
            self._update()

    def get_config(self):
        # The training data is not part of the config (like EMLeafUpdate).
        return {"every_epoch": self.every_epoch, "layers": self.layer_names}
