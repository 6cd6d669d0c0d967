"""Helpers shared by the tree callbacks (not public)."""

import numbers

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


def ensure_built(model, layers, x):
    """Builds ``model`` on one sample of ``x`` when some of ``layers`` are not built yet
    (a subclassed model on TensorFlow is only built by the first training step,
    after ``on_train_begin``)."""
    if not all(layer.built for layer in layers):
        model(x[:1], training=False)
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


def effective_weights(sample_weight, class_weight, labels, name):
    """Per-sample weights ``(n,)`` (float64) or None when all samples weigh 1.

    ``labels`` are the integer classes (``class_weight`` needs a classifier).
    """
    if class_weight is not None:
        if labels is None:
            raise ValueError(f"{name}: class_weight needs a classification layer (num_classes=...)")
        weights = np.array([class_weight.get(int(c), 1.0) for c in range(int(labels.max()) + 1)])
        weights = weights[labels]
        if not weights.sum() > 0:
            raise ValueError(f"{name}: class_weight gives every sample weight zero")
        return weights
    return sample_weight


def weights_config(class_weight):
    """``class_weight`` for a JSON config (string keys)."""
    return None if class_weight is None else {str(k): v for k, v in class_weight.items()}


# ------------------------------------------------------- a layer's inputs
class _ReachedLayer(Exception):
    """Stops a forward pass at the layer whose input is wanted."""


def _children(layer):
    return list(layer._flatten_layers(include_self=False, recursive=False))


def _container_chain(container, layer):
    """``[model, sub_model, ...]``: the containers from ``container`` down to the one
    that holds ``layer`` directly, or None."""
    children = _children(container)
    if any(child is layer for child in children):
        return [container]
    for child in children:
        if _children(child):
            chain = _container_chain(child, layer)
            if chain is not None:
                return [container] + chain
    return None


def _single(tensors):
    tensors = list(tensors)
    return tensors[0] if len(tensors) == 1 else tensors


def _symbolic_step(container, inner):
    """Maps ``container``'s inputs to ``inner``'s inputs in ``container``'s graph:
    None for the identity, a callable, or False when there is no graph to use."""
    try:
        inputs = list(container.inputs)
    except (AttributeError, ValueError, TypeError):
        return False  # subclassed model or plain layer: no symbolic graph
    if not inputs or not all(keras.backend.is_keras_tensor(t) for t in inputs):
        return False
    for node in getattr(inner, "_inbound_nodes", []):
        targets = list(node.input_tensors)
        if not targets:
            continue
        if len(targets) == len(inputs) and all(t is i for t, i in zip(targets, inputs)):
            return None
        try:
            # A single input is passed as a tensor, not a one-element list: Keras
            # warns when the call structure differs from the model's inputs.
            sub = keras.Model(_single(inputs), _single(targets))
        except (ValueError, TypeError):
            continue  # a node of another graph (the layer is shared)
        return lambda x, sub=sub: sub(x, training=False)
    return False


def _capture_fn(model, layer):
    """Calls ``model`` and returns what ``layer`` receives, stopping the forward
    pass there (subclassed models and custom containers have no graph to cut)."""

    def fn(x):
        seen = {}

        def capture(inputs, *args, **kwargs):
            seen["inputs"] = inputs
            raise _ReachedLayer(layer.name)

        own = layer.__dict__.get("call")
        # object.__setattr__: not tracked by Keras (nor by torch.nn.Module).
        object.__setattr__(layer, "call", capture)
        try:
            model(x, training=False)
        except _ReachedLayer:
            pass
        finally:
            if own is None:
                object.__delattr__(layer, "call")
            else:
                object.__setattr__(layer, "call", own)
        if "inputs" not in seen:
            raise ValueError(
                f"calling {model.name!r} never reached layer {layer.name!r}: pass the "
                "layer's own inputs (x as the layer receives them) to the callback instead"
            )
        return seen["inputs"]

    return fn


def identity(x):
    """What :func:`layer_input_fn` returns for a layer that reads the model inputs."""
    return x


def layer_input_fn(model, layer):
    """A function mapping ``model``'s inputs to ``layer``'s inputs.

    The identity when the layer reads the model inputs. A layer inside nested
    Sequential/Functional sub-models is reached through their symbolic graphs,
    one sub-model after the other. Where no graph exists (a subclassed model, a
    custom layer wrapping the tree), the model is called and its forward pass
    stopped when it reaches the layer, returning that call's input. The
    function works eagerly and inside ``tf.function``/``jax.jit``.
    """
    if model is layer:
        return identity
    chain = _container_chain(model, layer)
    if chain is None:
        raise ValueError(f"layer {layer.name!r} is not part of model {model.name!r}")
    steps = []
    for container, inner in zip(chain, chain[1:] + [layer]):
        step = _symbolic_step(container, inner)
        if step is False:
            return _capture_fn(model, layer)
        if step is not None:
            steps.append(step)
    if not steps:
        return identity

    def fn(x):
        for step in steps:
            x = step(x)
        return x

    return fn


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

        return tf.function(fn, reduce_retracing=True)
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
