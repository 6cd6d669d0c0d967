"""Closed-form EM leaf updates of end-to-end trees (Hehn et al. 2019, Eq. 10 and 13)."""

import keras
import numpy as np
from keras import ops

from keras_trees import streaming
from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks._common import (
    check_data, check_labels, check_weights, compiled, effective_weights, end_to_end_layers, ensure_built,
    layer_input_fn, layer_names, positive_int, weights_config,
)
from keras_trees.layers import _validation
from keras_trees._arrays import to_numpy


@keras_trees_export("keras_trees.callbacks")
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

    Layers with ``leaf_learning="auto"`` (the default) read the EM leaves during
    this ``fit`` (the EM table takes over the leaves they had, also leaves the
    optimizer learnt) and hand the final EM leaves back to their trainable
    logits when it ends, so a later ``fit`` without this callback goes on from
    them by gradient. Layers with ``leaf_learning="gradient"`` are refused.

    Weights: a callback cannot see the ``sample_weight``/``class_weight`` given
    to ``fit``; pass them here as well. Each sample's counts are multiplied by
    its weight, ``pi_{l,k} = sum_n w_n 1(y_n = k) h_{n,l} / sum_n w_n h_{n,l}``
    (an integer weight equals repeating the sample). ``class_weight`` maps
    class ids to weights (omitted classes weigh 1) and excludes
    ``sample_weight``, as in Keras.

    Data: arrays ``x, y`` (as given to ``fit``), or a stream of batches as
    ``EMLeafUpdate(dataset)`` (``y`` None): a batched ``tf.data.Dataset``, a
    ``keras.utils.PyDataset``, a list (or other re-iterable) of ``(x, y)`` or
    ``(x, y, sample_weight)`` batches or a function returning a fresh iterable
    of them (see `keras_trees.streaming`; it is read once per update, so a
    one-shot generator does not do). A stream's per-sample weights are the
    third element of its batches; ``class_weight`` applies to batches without
    one (both at once are refused, as in Keras). The counts are accumulated
    batch by batch, so the data never has to fit in memory; a model not built
    yet is built on the first batch.

    Distributed training: under a multi-worker ``tf.distribute`` strategy (or
    several JAX processes / an initialized ``torch.distributed``) each worker
    reads the share of the data that ``fit`` reads on its backend (see
    `keras_trees.streaming`) and the counts are summed over the workers
    ([`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum]) before the M-step, so every
    replica sets the same leaves. Every worker must run the callback.

    The E-step runs compiled: ``tf.function`` on TensorFlow, ``jax.jit`` (of a
    stateless function of the model's variable values) on JAX.

    Args:
        x: the training inputs (arrays, or a dict/list of arrays for a
            multi-input model, as given to ``fit``), or a data stream of
            ``(x, y[, sample_weight])`` batches (then ``y`` is None).
        y: integer labels of array ``x`` (None for a stream).
        batch_size: samples per E-step batch of arrays (a stream keeps its
            own batches).
        layers: optional layer name(s) (default: every classification
            ``EndToEndTree``/``EndToEndForest`` in the model, also inside
            nested sub-models; ``leaf_learning="gradient"`` layers are skipped).
        sample_weight: optional ``(n,)`` non-negative weights of array
            samples (a stream carries them in its batches).
        class_weight: optional dict class id -> weight.

    Example:

    >>> import numpy as np
    >>> from keras_trees.callbacks import EMLeafUpdate
    >>> cb = EMLeafUpdate(np.zeros((4, 2), "float32"), np.array([0, 1, 1, 0]))
    >>> cb.batch_size
    4096
    """

    def __init__(self, x, y=None, batch_size=4096, layers=None, sample_weight=None, class_weight=None):
        super().__init__()
        self.batch_size = positive_int("batch_size", batch_size)
        self.layer_names = layer_names(layers)
        self.x = x
        if y is None and not streaming.is_array_like(x):
            # A stream of (x, y[, sample_weight]) batches: checked here, read per update.
            data = streaming.stream(x, None, sample_weight, self.batch_size, name="EMLeafUpdate")
            if data.one_shot:
                raise ValueError(
                    "EMLeafUpdate reads the data at every epoch, but x is a one-shot iterator; pass a "
                    "tf.data.Dataset, a keras.utils.PyDataset, a list of batches or a function returning a "
                    "fresh iterable of (x, y[, sample_weight]) batches"
                )
            self.y, self.num_samples = None, None
            self.sample_weight, self.class_weight = check_weights(None, class_weight, 0, "EMLeafUpdate")
        else:
            self.num_samples = check_data(x, y, "EMLeafUpdate")
            self.y = np.asarray(y)
            self.sample_weight, self.class_weight = check_weights(
                sample_weight, class_weight, self.num_samples, "EMLeafUpdate"
            )
        self._fns = {}
        self._inputs = {}

    def _data(self):
        """The training data as a stream (this worker's share in a distributed run)."""
        return streaming.stream(self.x, self.y, self.sample_weight, self.batch_size, name="EMLeafUpdate",
                                model=self.model)

    def _layers(self):
        layers = end_to_end_layers(self.model, self.layer_names, classifiers_only=True)
        if self.layer_names is None:
            em = [layer for layer in layers if layer.leaf_learning != "gradient"]
            if not em:
                raise ValueError(
                    "EMLeafUpdate found only layers with leaf_learning='gradient' (their leaves are "
                    "trained by the optimizer); use leaf_learning='auto' or 'em' for EM leaves"
                )
            layers = em
        # Named layers: use_em_leaves() refuses gradient ones.
        return ensure_built(self.model, layers, self.x if self.y is not None else self._data())

    def _statistics_fn(self, layer):
        # One compiled E-step per training-time model (greedy growth or soft),
        # chosen here: each compiles only its own branch.
        mode = "growth" if int(to_numpy(layer.growing)) else "soft"
        key = (id(layer), mode)
        if key not in self._fns:
            to_input = self._inputs.get(id(layer))
            if to_input is None:
                to_input = self._inputs[id(layer)] = layer_input_fn(self.model, layer)
            self._fns[key] = compiled(
                lambda x, y, w: layer.em_statistics(to_input(x), y, w, branch=mode), self.model
            )
        return self._fns[key]

    def update(self):
        """One E-step over the data and one leaf M-step, for every layer: the
        counts are summed batch by batch and over the workers of a distributed
        run before the leaves are set."""
        for layer in self._layers():
            table = None
            if self.y is not None:
                # Arrays: every label and the class weights checked at once, as before.
                y = check_labels(self.y, layer.num_classes, "EMLeafUpdate")
                effective_weights(self.sample_weight, self.class_weight, y, "EMLeafUpdate", layer.num_classes)
            if self.class_weight is not None:
                table = _validation.class_weight_table(self.class_weight, layer.num_classes, "EMLeafUpdate")
            fn = self._statistics_fn(layer)
            counts = np.zeros((layer.num_trees * layer.num_positions, layer.num_classes))
            for xb, yb, wb in self._data():
                yb = check_labels(yb, layer.num_classes, "EMLeafUpdate")
                if table is not None and wb is not None:
                    raise ValueError("EMLeafUpdate: the data's batches carry sample weights, so class_weight "
                                     "cannot be given as well (as in Model.fit)")
                wb = _validation.batch_weights(yb, wb, table, "EMLeafUpdate")
                c = to_numpy(fn(
                    keras.tree.map_structure(ops.convert_to_tensor, xb),
                    ops.convert_to_tensor(yb.astype("int32")),
                    ops.convert_to_tensor(wb.astype("float32")),
                ))
                counts += np.asarray(c, np.float64).reshape(counts.shape)
            counts, = streaming.all_reduce_sum([counts], model=self.model)
            if not counts.sum() > 0:
                raise ValueError("EMLeafUpdate: the data holds no samples of positive weight (the stream is "
                                 "empty or all its sample weights are 0)")
            layer.set_leaf_distributions(counts)

    def on_train_begin(self, logs=None):
        self._fns = {}
        self._inputs = {}
        for layer in self._layers():
            layer.use_em_leaves()

    def on_epoch_begin(self, epoch, logs=None):
        self.update()

    def on_train_end(self, logs=None):
        self.update()
        for layer in self._layers():
            layer.end_em_leaves()

    def get_config(self):  # the data (x, y, sample_weight) is not part of the config
        return {"batch_size": self.batch_size, "layers": self.layer_names,
                "class_weight": weights_config(self.class_weight)}

    def __deepcopy__(self, memo):
        # Keras Tuner deep-copies callbacks per trial: share the (read-only) data.
        clone = EMLeafUpdate(self.x, self.y, self.batch_size, self.layer_names,
                             sample_weight=self.sample_weight, class_weight=self.class_weight)
        memo[id(self)] = clone
        return clone
