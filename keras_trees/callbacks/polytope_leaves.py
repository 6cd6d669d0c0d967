"""Empirical leaves of convex polytope trees (Armandpour & Zhou 2021, Section 3.3.1)."""

import keras
import numpy as np

from keras_trees import streaming
from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks._common import check_labels, ensure_built, flag, layer_input_fn, layer_names, positive_int
from keras_trees.layers import _validation
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

    Data: arrays ``x, y``, or a stream of batches as
    ``PolytopeLeafUpdate(dataset)`` (``y`` None): a batched
    ``tf.data.Dataset``, a ``keras.utils.PyDataset``, a list (or other
    re-iterable) of ``(x, y)`` / ``(x, y, sample_weight)`` batches or a
    function returning a fresh iterable of them (see
    `keras_trees.streaming`; it is read at every update, so a one-shot
    generator does not do). A stream's per-sample weights are its batches'
    third element, multiplied by ``class_weight[y]``. The routed statistics are
    summed batch by batch (the data never has to fit in memory) and, in a
    distributed run, over the workers (each worker reads its share of the
    data; [`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum]), so every replica sets
    the same leaves. Every worker must run the callback.

    Args:
        x: training inputs of the model (arrays, or a dict/list of arrays), or
            a data stream of ``(x, y[, sample_weight])`` batches.
        y: labels / targets of array ``x`` (None for a stream).
        every_epoch: update after each epoch (default) or once at the end.
        layers: optional layer name(s).
        sample_weight: optional ``(n,)`` weights of array samples (a stream
            carries them in its batches).
        class_weight: optional ``{class: weight}`` (classification).
        batch_size: samples mapped and routed at a time (a stream keeps its
            own batches).

    >>> import numpy as np
    >>> PolytopeLeafUpdate(np.zeros((2, 3)), np.zeros(2)).every_epoch
    True
    """

    def __init__(self, x, y=None, every_epoch=True, layers=None, sample_weight=None, class_weight=None,
                 batch_size=4096):
        super().__init__()
        self.batch_size = positive_int("batch_size", batch_size)
        if y is None and x is not None and not streaming.is_array_like(x):
            # A stream of (x, y[, sample_weight]) batches: checked here, read at every update.
            data = streaming.stream(x, None, sample_weight, self.batch_size, name="PolytopeLeafUpdate")
            if data.one_shot and flag("every_epoch", every_epoch):
                raise ValueError(
                    "PolytopeLeafUpdate reads the data at every epoch, but x is a one-shot iterator; pass a "
                    "tf.data.Dataset, a keras.utils.PyDataset, a list of batches or a function returning a "
                    "fresh iterable of (x, y[, sample_weight]) batches (or every_epoch=False)"
                )
        else:
            if x is None or y is None or _num_samples(x) != len(y) or len(y) == 0:
                raise ValueError("PolytopeLeafUpdate needs non-empty x and y of the same length "
                                 "(or a dataset of (x, y) batches as x)")
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

    def _update(self):
        for layer in polytope_layers(self.model, self.layer_names):
            class_weight = self.class_weight
            if self.y is not None:
                # Arrays: labels and weights checked at once, before mapping the data through the model.
                y = self.y
                if layer.num_classes is not None:
                    y = check_labels(self.y, layer.num_classes, "PolytopeLeafUpdate")
                w = _validation.sample_weights(np.asarray(y), self.sample_weight, class_weight,
                                               layer.num_classes, "set_leaves_from_data")
                data = streaming.stream(self.x, self.y, w, self.batch_size, name="PolytopeLeafUpdate",
                                        model=self.model)
                class_weight = None
            else:
                data = streaming.stream(self.x, None, None, self.batch_size, name="PolytopeLeafUpdate",
                                        model=self.model)
            ensure_built(self.model, [layer], data)
            stats = layer._stream_leaf_statistics(data, batch_size=self.batch_size, class_weight=class_weight,
                                                  to_input=layer_input_fn(self.model, layer),
                                                  where="set_leaves_from_data", model=self.model)
            layer._set_leaves_from_statistics(stats)

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
