"""Export helpers."""

import os

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.ops._library import reference_only
from keras_trees.validation import models as _models


@keras_trees_export("keras_trees")
def export_portable(model, filepath, **kwargs):
    """Exports ``model`` as a TF SavedModel made of stock TensorFlow ops only.

    ``model.export(filepath)`` keeps the keras-trees custom ops in the graph, so
    the SavedModel needs ``import keras_trees`` before ``tf.saved_model.load``.
    This export traces every keras-trees layer through its ``keras.ops``
    reference path instead: the result loads in plain TensorFlow or TF Serving
    on any machine, at the cost of dense (unconditional) computation.
    Predictions match the custom-op model up to float round-off.

    The input checks of the reference path are traced into the SavedModel as
    ``tf.debugging.Assert`` ops: the served function rejects what the layers
    reject (NaN or Inf inputs, ...) with an ``InvalidArgumentError`` carrying
    the same message, rather than serving NaN. A model whose weights are not
    finite (a diverged training, a NaN assigned), or whose ``node_state`` is
    not a valid topology, is refused before anything is written
    (``ValueError`` naming the layer and the variable).

    Args:
        model: a built ``keras.Model``.
        filepath: the SavedModel directory (a string or ``os.PathLike``).
        **kwargs: passed to ``model.export``.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"model must be a built keras.Model (export_portable exports a whole model), "
                        f"got {type(model).__name__}")
    if not isinstance(filepath, (str, os.PathLike)):
        raise TypeError(f"filepath must be a path (str or os.PathLike), got {type(filepath).__name__}")
    _models.check_weights(model, "export_portable refuses to export a model that would serve NaN")
    kwargs.setdefault("format", "tf_saved_model")
    with reference_only():
        return model.export(filepath, **kwargs)
