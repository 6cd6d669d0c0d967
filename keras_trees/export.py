"""Export helpers."""

from keras_trees.api_export import keras_trees_export
from keras_trees.ops._library import reference_only


@keras_trees_export("keras_trees")
def export_portable(model, filepath, **kwargs):
    """Exports ``model`` as a TF SavedModel made of stock TensorFlow ops only.

    ``model.export(filepath)`` keeps the keras-trees custom ops in the graph, so
    the SavedModel needs ``import keras_trees`` before ``tf.saved_model.load``.
    This export traces every keras-trees layer through its ``keras.ops``
    reference path instead: the result loads in plain TensorFlow or TF Serving
    on any machine, at the cost of dense (unconditional) computation.
    Predictions match the custom-op model up to float round-off.

    Extra keyword arguments go to ``model.export``.
    """
    kwargs.setdefault("format", "tf_saved_model")
    with reference_only():
        return model.export(filepath, **kwargs)
