"""Shared parts of the keras-trees HyperModels: task, optimizer, batch size."""

import keras

try:
    import keras_tuner as kt
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "keras_trees.tuner needs keras-tuner (and, on the TensorFlow backend, tensorboard): "
        'pip install "keras-trees[tuner]"'
    ) from e

from keras_trees.api_export import keras_trees_export
from keras_trees.layers import _validation


@keras_trees_export("keras_trees.tuner")
class TreeHyperModel(kt.HyperModel):
    """Base of the per-family HyperModels (subclasses define [`tree_layers`][keras_trees.inspection.export.tree_layers]).

    Every model is ``Input -> tree_layers(hp)`` compiled with Adam; the learning
    rate and the batch size are tuned here, the tree hyperparameters by the
    subclass. Pass exactly one of ``num_classes`` (classification; sparse
    integer labels, accuracy metric) or ``units`` (regression, mean squared error).

    Args:
        input_shape: shape of one sample, e.g. ``(16,)``.
        num_classes: number of classes; or
        units: regression outputs.
        learning_rate: ``(min, max)`` of the log-uniform learning-rate range, or a
            number to fix it.
        batch_sizes: batch sizes to choose from (a single value fixes it).
        metrics: compiled metrics (default ``["accuracy"]`` for classification).
        name, tunable: as for ``keras_tuner.HyperModel``.

    Every hyperparameter name can be fixed or narrowed the Keras Tuner way, with
    a ``keras_tuner.HyperParameters`` passed to the tuner as ``hyperparameters=``
    (``tune_new_entries=False`` to search only those).
    """

    def __init__(self, input_shape, num_classes=None, units=None, learning_rate=(1e-3, 1e-1),
                 batch_sizes=(64, 128, 256, 512), metrics=None, name=None, tunable=True):
        super().__init__(name=name, tunable=tunable)
        if not isinstance(input_shape, (tuple, list)):
            raise TypeError(f"input_shape must be a tuple of dimensions, e.g. (16,), got {input_shape!r}")
        self.input_shape = tuple(_validation.positive_int("input_shape", d) for d in input_shape)
        self.num_classes, self.units = _validation.task(num_classes, units)
        if isinstance(learning_rate, (tuple, list)):
            lo, hi = (_validation.positive_float("learning_rate", v) for v in learning_rate)
            if lo > hi:
                raise ValueError(f"learning_rate range must be (min, max), got {learning_rate}")
            self.learning_rate = (lo, hi)
        else:
            self.learning_rate = _validation.positive_float("learning_rate", learning_rate)
        sizes = batch_sizes if isinstance(batch_sizes, (tuple, list)) else [batch_sizes]
        self.batch_sizes = [_validation.positive_int("batch_sizes", b) for b in sizes]
        self.metrics = metrics

    # ----------------------------------------------------------- subclasses
    @property
    def output_dim(self):
        return self.num_classes if self.num_classes is not None else self.units

    @property
    def outputs_probabilities(self):
        """True when the tree layer outputs class probabilities (not logits)."""
        return False

    def tree_layers(self, hp):
        """The layers after the input (the tree, and what feeds it). Abstract:
        every family's HyperModel defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define tree_layers(hp)")

    @staticmethod
    def clamped_int(hp, name, low, high, sampling="linear"):
        """``hp.Int`` clamped to ``[low, high]``: keras-tuner 1.4's
        BayesianOptimization can propose ``high + 1`` for log-sampled integers."""
        value = hp.Int(name, low, high, sampling=sampling)
        return max(low, min(high, int(value)))

    # ------------------------------------------------------------ HyperModel
    def build(self, hp):
        if isinstance(self.learning_rate, tuple):
            lr = hp.Float("learning_rate", *self.learning_rate, sampling="log")
        else:
            lr = hp.Fixed("learning_rate", self.learning_rate)
        if len(self.batch_sizes) > 1:
            hp.Choice("batch_size", self.batch_sizes)
        else:
            hp.Fixed("batch_size", self.batch_sizes[0])
        model = keras.Sequential([keras.Input(self.input_shape), *self.tree_layers(hp)])
        if self.num_classes is not None:
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=not self.outputs_probabilities)
            metrics = ["accuracy"] if self.metrics is None else self.metrics
        else:
            loss = keras.losses.MeanSquaredError()
            metrics = [] if self.metrics is None else self.metrics
        model.compile(optimizer=keras.optimizers.Adam(lr), loss=loss, metrics=metrics)
        return model

    def fit(self, hp, model, *args, **kwargs):
        kwargs.pop("batch_size", None)  # tuned
        return model.fit(*args, batch_size=hp.get("batch_size"), **kwargs)

    def get_config(self):
        return {
            "input_shape": self.input_shape, "num_classes": self.num_classes, "units": self.units,
            "learning_rate": self.learning_rate, "batch_sizes": self.batch_sizes,
        }
