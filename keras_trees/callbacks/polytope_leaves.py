"""Empirical leaves of convex polytope trees (Armandpour & Zhou 2021, Section 3.3.1)."""

import keras
import numpy as np
from keras import ops

from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks._common import batches, check_labels, flag, layer_input_fn, layer_names, positive_int
from keras_trees.callbacks.polytope_annealing import polytope_layers


def _num_samples(x):
    leaves = keras.tree.flatten(x)
    if not leaves:
        raise ValueError("PolytopeLeafUpdate needs non-empty x and y of the same length")
    return len(leaves[0])


@keras_trees_export("keras_trees.callbacks")
class PolytopeLeafUpdate(keras.callbacks.Callback):
    """Sets leaves to the empirical class distribution (mean response) of the
    training data routed deterministically, at the end of every epoch (or only
    at the end of training with ``every_epoch=False``).

    ``x`` are the inputs of the *model* passed to ``fit`` (a tree inside a
    nested ``Sequential``, a Functional sub-model or a subclassed model is
    found recursively, and ``x`` is mapped to the tree's own inputs through
    the layers before it). The leaves are the layer's non-trainable
    ``leaf_values`` variable, written with ``assign``.

    Keras callbacks do not see the ``sample_weight`` / ``class_weight`` given
    to ``fit()``: pass them here to weight the leaf statistics (each sample
    counts ``sample_weight * class_weight[y]``, as in ``keras.Model.fit``).

    Args:
        x, y: training inputs of the model and labels / targets.
        every_epoch: update after each epoch (default) or once at the end.
        layers: optional layer name(s).
        sample_weight: optional ``(n,)`` weights of the samples.
        class_weight: optional ``{class: weight}`` (classification).
        batch_size: samples mapped and routed at a time.

    >>> import numpy as np
    >>> PolytopeLeafUpdate(np.zeros((2, 3)), np.zeros(2)).every_epoch
    True
    """

    def __init__(self, x, y, every_epoch=True, layers=None, sample_weight=None, class_weight=None,
                 batch_size=4096):
        super().__init__()
        if x is None or y is None or _num_samples(x) != len(y) or len(y) == 0:
            raise ValueError("PolytopeLeafUpdate needs non-empty x and y of the same length")
        n = len(y)
        if sample_weight is not None and np.shape(sample_weight)[:1] != (n,):
            raise ValueError(f"PolytopeLeafUpdate: sample_weight must have one weight per sample ({n}), "
                             f"got shape {np.shape(sample_weight)}")
        if class_weight is not None and not isinstance(class_weight, dict):
            raise TypeError(f"PolytopeLeafUpdate: class_weight must be a dict {{class: weight}}, "
                            f"got {type(class_weight).__name__}")
        self.x, self.y = x, y
        self.sample_weight, self.class_weight = sample_weight, class_weight
        self.every_epoch = flag("every_epoch", every_epoch)
        self.layer_names = layer_names(layers)
        self.batch_size = positive_int("batch_size", batch_size)

    def _layer_inputs(self, layer):
        to_input = layer_input_fn(self.model, layer)
        n = len(self.y)
        parts = []
        for sl in batches(n, self.batch_size):
            xb = keras.tree.map_structure(lambda a: a[sl], self.x)
            parts.append(np.asarray(ops.convert_to_numpy(to_input(xb))))
        return np.concatenate(parts)

    def _update(self):
        for layer in polytope_layers(self.model, self.layer_names):
            if layer.num_classes is not None:  # before mapping the data through the model
                check_labels(self.y, layer.num_classes, "PolytopeLeafUpdate")
            layer.set_leaves_from_data(self._layer_inputs(layer), self.y, batch_size=self.batch_size,
                                       sample_weight=self.sample_weight, class_weight=self.class_weight)

    def on_epoch_end(self, epoch, logs=None):
        if self.every_epoch:
            self._update()

    def on_train_end(self, logs=None):
        if not self.every_epoch:
            self._update()

    def get_config(self):
        # The training data (and its weights) is not part of the config (like EMLeafUpdate).
        return {"every_epoch": self.every_epoch, "layers": self.layer_names, "batch_size": self.batch_size}

    def __deepcopy__(self, memo):
        # Keras Tuner deep-copies callbacks per trial: share the (read-only) data.
        clone = PolytopeLeafUpdate(self.x, self.y, self.every_epoch, self.layer_names, self.sample_weight,
                                   self.class_weight, self.batch_size)
        memo[id(self)] = clone
        return clone
