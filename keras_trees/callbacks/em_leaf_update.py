"""Closed-form EM leaf updates of end-to-end trees (Hehn et al. 2019, Eq. 10 and 13)."""

import keras
import numpy as np
from keras import ops

from keras_trees.callbacks._common import (
    batches, check_data, check_labels, compiled, end_to_end_layers, layer_input_fn,
)


@keras.saving.register_keras_serializable(package="keras_trees")
class EMLeafUpdate(keras.callbacks.Callback):
    """Sets every leaf's class distribution by the EM M-step over the training data.

    At the start of every epoch (before that epoch's split updates) the callback
    computes the responsibilities ``h_{n,l}`` of Eq. 10 for all training samples
    with the current parameters, and sets each leaf to Eq. 13,
    ``pi_{l,k} = sum_n 1(y_n = k) h_{n,l} / sum_n h_{n,l}``; the optimizer then
    updates the splits during the epoch (Eq. 14). It runs once more when
    training ends, so the final leaves match the final splits. While a tree is
    grown greedily only the leaves of the stumps being trained change; committed
    leaves keep the distributions inherited from their stump.

    Args:
        x, y: the training inputs (as given to ``fit``) and integer labels.
        batch_size: samples per E-step batch.
        layers: optional layer name(s) (default: every classification
            ``EndToEndTree``/``EndToEndForest`` in the model).

    Example:

    >>> import numpy as np
    >>> from keras_trees.callbacks import EMLeafUpdate
    >>> cb = EMLeafUpdate(np.zeros((4, 2), "float32"), np.array([0, 1, 1, 0]))
    >>> cb.batch_size
    4096
    """

    def __init__(self, x, y, batch_size=4096, layers=None):
        super().__init__()
        self.num_samples = check_data(x, y, "EMLeafUpdate")
        self.x = x
        self.y = np.asarray(y)
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.layer_names = layers
        self._fns = {}

    def _statistics_fn(self, layer):
        key = id(layer)
        if key not in self._fns:
            to_input = layer_input_fn(self.model, layer)
            self._fns[key] = compiled(lambda x, y: layer.em_statistics(to_input(x), y))
        return self._fns[key]

    def update(self):
        """One E-step over the data and one leaf M-step, for every layer."""
        for layer in end_to_end_layers(self.model, self.layer_names, classifiers_only=True):
            y = check_labels(self.y, layer.num_classes, "EMLeafUpdate")
            fn = self._statistics_fn(layer)
            counts = None
            for sl in batches(self.num_samples, self.batch_size):
                c = ops.convert_to_numpy(fn(ops.convert_to_tensor(self.x[sl]), ops.convert_to_tensor(y[sl])))
                counts = c.astype(np.float64) if counts is None else counts + c
            layer.set_leaf_distributions(counts)

    def on_train_begin(self, logs=None):
        self._fns = {}

    def on_epoch_begin(self, epoch, logs=None):
        self.update()

    def on_train_end(self, logs=None):
        self.update()

    def get_config(self):  # the data is not part of the config
        return {"batch_size": self.batch_size, "layers": self.layer_names}

    def __deepcopy__(self, memo):
        # Keras Tuner deep-copies callbacks per trial: share the (read-only) data.
        clone = EMLeafUpdate(self.x, self.y, self.batch_size, self.layer_names)
        memo[id(self)] = clone
        return clone
