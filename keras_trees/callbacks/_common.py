"""Helpers shared by the tree callbacks (not public)."""

import numbers

import keras
import numpy as np
from keras import ops

from keras_trees import streaming
from keras_trees.layers import _validation
from keras_trees.validation import arguments, bounds
from keras_trees.layers._end_to_end import find_layers
from keras_trees.layers._layer_inputs import identity, layer_input_fn  # noqa: F401 (used by the callbacks)


def layer_names(layers):
    """The ``layers=`` argument of a callback: None, a layer name or a list of names."""
    if layers is None or isinstance(layers, str):
        return layers
    if isinstance(layers, (list, tuple)) and all(isinstance(n, str) for n in layers):
        return list(layers)
    raise TypeError(f"layers must be None, a layer name or a list of layer names, got {layers!r}")


def positive_int(name, value):
    return arguments.positive_int(name, value)


def nonnegative_int(name, value):
    return bounds.nonnegative_int(name, value)


def nonnegative_float(name, value):
    return bounds.nonnegative_float(name, value)


def optional_positive_float(name, value):
    return None if value is None else arguments.positive_float(name, value)


def flag(name, value):
    """A boolean argument: True/False (also NumPy booleans and the integers 0 and 1)."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


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


def ensure_built(model, layers, x):
    """Builds ``model`` on one sample of ``x`` when some of ``layers`` are not built yet
    (a subclassed model on TensorFlow is only built by the first training step,
    after ``on_train_begin``). ``x``: the model's inputs as arrays (or a
    dict/list of arrays), or a [`keras_trees.streaming.Batches`][keras_trees.streaming.Batches] stream
    (its first batch is read)."""
    if not all(layer.built for layer in layers):
        if isinstance(x, streaming.Batches):
            x = x.sample()
        model(keras.tree.map_structure(lambda a: a[:1], x), training=False)
    return layers


def check_data(x, y, name):
    if x is None:
        raise ValueError(f"{name} needs the training data: pass x and y (or a dataset of (x, y) batches as x)")
    if y is None:
        raise ValueError(f"{name}: x is an array, so y (the labels) is needed as well (or pass a dataset of "
                         "(x, y) batches as x)")
    # A dict/list of arrays (a multi-input model's inputs) counts the rows of its arrays.
    multi = isinstance(x, (dict, list, tuple)) and streaming.is_array_like(x)
    for arg, value in (("x", x), ("y", y)):
        if multi and arg == "x":
            continue
        if not hasattr(value, "__len__") or np.ndim(value) == 0:
            raise ValueError(f"{name}: {arg} must hold one entry per training sample, got {type(value).__name__}")
    n = len(keras.tree.flatten(x)[0]) if multi else len(x)
    if len(y) != n:
        raise ValueError(f"{name}: x has {n} samples but y has {len(y)}")
    if n == 0:
        raise ValueError(f"{name}: the training data is empty")
    return n


def check_labels(y, num_classes, name):
    return _validation.class_labels(y, num_classes, name)


# ------------------------------------------------------------------ weights
def check_weights(sample_weight, class_weight, num_samples, name):
    """Validated ``(sample_weight, class_weight)`` as given to a callback.

    Keras semantics: ``sample_weight`` is one non-negative weight per sample;
    ``class_weight`` maps class ids to weights (classes it omits weigh 1); the
    two exclude each other, as in ``fit``.
    """
    if sample_weight is not None and class_weight is not None:
        raise ValueError(f"{name}: pass sample_weight or class_weight, not both (as in Model.fit)")
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
        if sample_weight.ndim == 2 and sample_weight.shape[1] == 1:
            sample_weight = sample_weight[:, 0]
        if sample_weight.shape != (num_samples,):
            raise ValueError(
                f"{name}: sample_weight must have shape ({num_samples},), got {sample_weight.shape}"
            )
        if not np.all(np.isfinite(sample_weight)) or np.any(sample_weight < 0):
            raise ValueError(f"{name}: sample_weight must be finite and >= 0")
        if not sample_weight.sum() > 0:
            raise ValueError(f"{name}: sample_weight is zero for every sample")
    if class_weight is not None:
        if not isinstance(class_weight, dict):
            raise TypeError(
                f"{name}: class_weight must be a dict class id -> weight, got {type(class_weight).__name__}"
            )
        parsed = {}
        for key, value in class_weight.items():
            if isinstance(key, str) and key.lstrip("-").isdigit():
                key = int(key)  # from a JSON config
            if isinstance(key, bool) or not isinstance(key, numbers.Integral):
                raise ValueError(f"{name}: class_weight keys must be integer class ids, got {key!r}")
            value = float(value)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: class weights must be finite and >= 0, got {value} for class {key}")
            parsed[int(key)] = value
        class_weight = parsed
    return sample_weight, class_weight


def effective_weights(sample_weight, class_weight, labels, name, num_classes=None):
    """Per-sample weights ``(n,)`` (float64) or None when all samples weigh 1.

    ``labels`` are the integer classes in ``[0, num_classes)`` (``class_weight``
    needs a classifier; its keys must be classes of the layer).
    """
    if class_weight is not None:
        if labels is None:
            raise ValueError(f"{name}: class_weight needs a classification layer (num_classes=...)")
        num_classes = int(labels.max()) + 1 if num_classes is None else int(num_classes)
        outside = sorted(k for k in class_weight if not 0 <= k < num_classes)
        if outside:
            raise ValueError(f"{name}: class_weight has class ids {outside} outside [0, {num_classes})")
        weights = np.array([class_weight.get(c, 1.0) for c in range(num_classes)])
        weights = weights[labels]
        if not weights.sum() > 0:
            raise ValueError(f"{name}: class_weight gives every sample weight zero")
        return weights
    return sample_weight


def weights_config(class_weight):
    """``class_weight`` for a JSON config (string keys)."""
    return None if class_weight is None else {str(k): v for k, v in class_weight.items()}


def batches(n, batch_size):
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


def compiled(fn, model=None):
    """``fn`` compiled for the backend; it reads the current variable values at
    every call.

    TensorFlow: ``tf.function``. JAX: ``jax.jit`` of a stateless version that
    receives the values of ``model``'s variables as arguments (without
    ``model``: ``fn`` itself, run eagerly). PyTorch: ``fn`` without autograd.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, reduce_retracing=True, autograph=False)
    if backend == "jax" and model is not None:
        import jax

        variables = list(model.variables)

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args)

        jitted = jax.jit(stateless)
        return lambda *args: jitted([v.value for v in variables], *args)
    if backend == "torch":
        import torch

        def no_grad(*args):
            with torch.no_grad():
                return fn(*args)

        return no_grad
    return fn


def reset_optimizer(optimizer):
    """Fresh optimizer state (moments and step count), keeping the learning rate.

    A ``LossScaleOptimizer`` (mixed_float16) keeps its loss scale: only the
    inner optimizer is reset (a zero loss scale would turn gradients into NaN).
    """
    if optimizer is None or not getattr(optimizer, "built", False):
        return
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        reset_optimizer(inner)
        return
    lr = getattr(optimizer, "_learning_rate", None)
    for v in optimizer.variables:
        if v is lr or "learning_rate" in v.name:
            continue
        v.assign(ops.zeros(v.shape, dtype=v.dtype))
