"""Steepness annealing of end-to-end trees (Hehn et al. 2019, Section 2.2 and Table 1)."""

import keras
import numpy as np
from keras import ops

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks._common import end_to_end_layers


@keras_trees_export("keras_trees.callbacks")
class SteepnessAnnealing(keras.callbacks.Callback):
    """Raises the steepness ``gamma`` of every split by ``increment`` per training epoch.

    A split that has been trained for ``e`` epochs uses
    ``gamma = gamma0 + increment * e`` (``gamma0`` is the layer's ``gamma``,
    paper: 1.0 and 0.1 per epoch; Table 1 compares increments 0, 0.01 and 0.1).
    The counter is per split: while :class:`GreedyLevelGrowth` grows a tree only
    the stumps being trained advance and each new stump starts at ``gamma0``;
    during finetuning every split advances from where it stopped. Values live in
    the layers' non-trainable ``gamma`` and ``node_epochs`` variables, written
    with ``assign`` at the start of each epoch, so the compiled training step
    sees them.

    Args:
        increment: steepness increase per epoch (>= 0).
        max_gamma: optional cap.
        layers: optional layer name(s) to anneal (default: every
            ``EndToEndTree``/``EndToEndForest`` in the model, also inside
            nested sub-models).

    Example:

    >>> from keras_trees.callbacks import SteepnessAnnealing
    >>> SteepnessAnnealing(increment=0.01).increment
    0.01
    """

    def __init__(self, increment=0.1, max_gamma=None, layers=None):
        super().__init__()
        increment = float(increment)
        if not (np.isfinite(increment) and increment >= 0):
            raise ValueError(f"increment must be a finite number >= 0, got {increment}")
        if max_gamma is not None and not float(max_gamma) > 0:
            raise ValueError(f"max_gamma must be > 0, got {max_gamma}")
        self.increment = increment
        self.max_gamma = None if max_gamma is None else float(max_gamma)
        self.layer_names = layers

    def on_train_begin(self, logs=None):
        self._unbuilt = []

    def on_epoch_begin(self, epoch, logs=None):
        self._unbuilt = []
        for layer in end_to_end_layers(self.model, self.layer_names):
            if not layer.built:
                # A subclassed model on TensorFlow is built by the first training
                # step: its splits start at gamma0 (this epoch's value); the
                # epoch is counted when it ends.
                self._unbuilt.append(layer)
                continue
            trained = trained_splits(layer)
            epochs = ops.convert_to_numpy(layer.node_epochs)
            gamma = np.array(ops.convert_to_numpy(layer.gamma))
            new = layer.initial_gamma + self.increment * epochs
            if self.max_gamma is not None:
                new = np.minimum(new, self.max_gamma)
            gamma[trained] = new[trained]
            layer.gamma.assign(gamma)
            layer.node_epochs.assign(epochs + trained.astype(epochs.dtype))

    def on_epoch_end(self, epoch, logs=None):
        for layer in getattr(self, "_unbuilt", []):
            if layer.built:
                epochs = ops.convert_to_numpy(layer.node_epochs)
                layer.node_epochs.assign(epochs + trained_splits(layer).astype(epochs.dtype))
        self._unbuilt = []

    def get_config(self):
        return {"increment": self.increment, "max_gamma": self.max_gamma, "layers": self.layer_names}


def trained_splits(layer):
    """Splits the optimizer trains now: candidate stumps while growing, else all splits."""
    state = ops.convert_to_numpy(layer.node_state)[:, : layer.num_internal]
    if int(ops.convert_to_numpy(layer.growing)):
        return ops.convert_to_numpy(layer.candidate).astype(bool) & (state == topology.LEAF)
    return state == topology.SPLIT
