"""What a layer inside a model receives when the model is called: the inputs
of tree layers for callbacks (growth, EM leaves) and inspection (export,
statistics)."""

import keras


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
    """What `layer_input_fn` returns for a layer that reads the model inputs."""
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
