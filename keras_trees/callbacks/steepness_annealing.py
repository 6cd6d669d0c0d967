"""Steepness annealing of end-to-end trees (Hehn et al. 2019, Section 2.2 and Table 1)."""

import keras
import numpy as np

from keras_trees._arrays import to_numpy
from keras_trees import _deprecation, topology
from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks._common import (
    end_to_end_layers, layer_names, nonnegative_float, optional_positive_float,
)


@keras_trees_export("keras_trees.callbacks")
class SteepnessAnnealing(keras.callbacks.Callback):
    """Raises the steepness of every split by ``increment`` per training epoch.

    A split that has been trained for ``e`` epochs uses the steepness
    ``s0 + increment * e`` (``s0`` is the layer's ``steepness`` argument; the
    paper's ``gamma``: 1.0 and 0.1 per epoch; Table 1 compares increments 0,
    0.01 and 0.1). The counter is per split: while [`GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth]
    grows a tree only the stumps being trained advance and each new stump
    starts at ``s0``; during finetuning every split advances from where it
    stopped. Values live in the layers' non-trainable ``gamma`` (steepness per
    split) and ``node_epochs`` variables, written with ``assign`` at the start
    of each epoch, so the compiled training step sees them.

    Args:
        increment: steepness increase per epoch (>= 0).
        max_steepness: optional cap. Its deprecated name ``max_gamma`` still
            works, with a warning.
        layers: optional layer name(s) to anneal (default: every
            ``EndToEndTree``/``EndToEndForest`` in the model, also inside
            nested sub-models).

    Example:

    >>> from keras_trees.callbacks import SteepnessAnnealing
    >>> SteepnessAnnealing(increment=0.01).increment
    0.01
    """

    def __init__(self, increment=0.1, max_steepness=None, layers=None, **kwargs):
        max_steepness = _deprecation.renamed_argument(
            type(self).__name__, kwargs, "max_gamma", "max_steepness", max_steepness
        )
        if kwargs:
            raise TypeError(f"SteepnessAnnealing got unexpected arguments {sorted(kwargs)}")
        super().__init__()
        self.increment = nonnegative_float("increment", increment)
        self.max_steepness = optional_positive_float("max_steepness", max_steepness)
        self.layer_names = layer_names(layers)

    def on_train_begin(self, logs=None):
        self._unbuilt = []

    def on_epoch_begin(self, epoch, logs=None):
        self._unbuilt = []
        for layer in end_to_end_layers(self.model, self.layer_names):
            if not layer.built:
                # A subclassed model on TensorFlow is built by the first training
                # step: its splits start at s0 (this epoch's value); the
                # epoch is counted when it ends.
                self._unbuilt.append(layer)
                continue
            trained = trained_splits(layer)
            epochs = to_numpy(layer.node_epochs)
            gamma = np.array(to_numpy(layer.gamma))
            new = layer.initial_steepness + self.increment * epochs
            if self.max_steepness is not None:
                new = np.minimum(new, self.max_steepness)
            gamma[trained] = new[trained]
            layer.gamma.assign(gamma)
            layer.node_epochs.assign(epochs + trained.astype(epochs.dtype))

    def on_epoch_end(self, epoch, logs=None):
        for layer in getattr(self, "_unbuilt", []):
            if layer.built:
                epochs = to_numpy(layer.node_epochs)
                layer.node_epochs.assign(epochs + trained_splits(layer).astype(epochs.dtype))
        self._unbuilt = []

    @property
    def max_gamma(self):
        """The name of ``max_steepness`` in 0.1.0."""
        return self.max_steepness

    def get_config(self):
        return {"increment": self.increment, "max_steepness": self.max_steepness, "layers": self.layer_names}

    @classmethod
    def from_config(cls, config):
        return cls(**_deprecation.renamed_config(config, {"max_gamma": "max_steepness"}))


def trained_splits(layer):
    """Splits the optimizer trains now: candidate stumps while growing, else all splits."""
    state = to_numpy(layer.node_state)[:, : layer.num_internal]
    if int(to_numpy(layer.growing)):
        return to_numpy(layer.candidate).astype(bool) & (state == topology.LEAF)
    return state == topology.SPLIT
