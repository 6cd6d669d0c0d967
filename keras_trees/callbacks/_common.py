"""Helpers shared by the end-to-end tree callbacks (not public)."""

import keras
import numpy as np
from keras import ops

from keras_trees.layers import _validation
from keras_trees.layers._end_to_end import find_layers


def end_to_end_layers(model, names=None, classifiers_only=False):
    layers = find_layers(model)
    if names is not None:
        names = [names] if isinstance(names, str) else list(names)
        layers = [layer for layer in layers if layer.name in names]
    if classifiers_only:
        layers = [layer for layer in layers if layer.is_classifier]
    if not layers:
        raise ValueError(
            "found no EndToEndTree/EndToEndForest layer"
            + (" with num_classes" if classifiers_only else "")
            + (f" named {names}" if names else "")
            + " in the model passed to fit()"
        )
    return layers


def check_data(x, y, name):
    if x is None or y is None:
        raise ValueError(f"{name} needs the training data: pass x and y")
    n = len(x)
    if len(y) != n:
        raise ValueError(f"{name}: x has {n} samples but y has {len(y)}")
    if n == 0:
        raise ValueError(f"{name}: the training data is empty")
    return n


def check_labels(y, num_classes, name):
    return _validation.class_labels(y, num_classes, name)


def layer_input_fn(model, layer):
    """Maps model inputs to the layer's inputs (identity when it sits on the input)."""
    try:
        inp = layer.input
        model_inputs = model.inputs
    except (AttributeError, ValueError):
        return lambda x: x
    if any(inp is m for m in model_inputs):
        return lambda x: x
    # A single input is passed as a tensor, not a one-element list: Keras warns
    # when the call structure differs from the model's input structure.
    sub = keras.Model(model_inputs[0] if len(model_inputs) == 1 else model_inputs, inp)
    return lambda x: sub(x, training=False)


def batches(n, batch_size):
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


def compiled(fn):
    """tf.function on the TensorFlow backend (variables are read at call time)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, reduce_retracing=True)
    return fn


def reset_optimizer(optimizer):
    """Fresh optimizer state (moments and step count), keeping the learning rate."""
    if optimizer is None or not getattr(optimizer, "built", False):
        return
    lr = getattr(optimizer, "_learning_rate", None)
    for v in optimizer.variables:
        if v is lr or "learning_rate" in v.name:
            continue
        v.assign(ops.zeros(v.shape, dtype=v.dtype))
