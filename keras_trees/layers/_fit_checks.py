"""Setups that train nothing, silently: each tree layer looks for them once,
when a ``Model.fit`` first trains it, and warns (``UserWarning``).

* Output kind against the compiled loss: a layer built with ``num_classes=``
  outputs class probabilities, one built with ``units=`` raw values. Keras'
  cross-entropy losses (``SparseCategoricalCrossentropy``,
  ``CategoricalCrossentropy``, ``BinaryCrossentropy``, the focal ones, as
  objects, functions or string names) expect probabilities unless
  ``from_logits=True``. When the layer's output is an output of the model
  being fitted and its loss expects the other kind, the layer warns: softmax
  probabilities read as logits train poorly, and raw values read as
  probabilities are clipped to ``[eps, 1 - eps]``, so the loss hardly moves.
* Families add their own checks (`FitChecks._fit_warnings`), e.g. the
  end-to-end trees' ``leaf_learning="em"`` without ``EMLeafUpdate``.

The model being fitted is found on the Python call stack (the innermost
``keras.Model.fit`` frame): the layer's first training call runs there on every
backend (traced by ``tf.function`` or ``jax.jit``, or eagerly on PyTorch).
Training outside ``fit`` (custom loops, ``train_on_batch``) is not checked.
The checks run in Python only; nothing is added to the compiled step.
"""

import functools
import inspect
import sys
import warnings

import keras

# Keras' losses that read predictions as probabilities unless from_logits=True.
_CLASS_LOSSES = frozenset({
    "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
    "binary_focal_crossentropy", "categorical_focal_crossentropy",
})
_MAX_FRAMES = 200


def fitting_model():
    """The ``keras.Model`` whose ``fit`` is running on this thread's call stack
    (the innermost one), or None."""
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        if frame.f_code.co_name == "fit":
            owner = frame.f_locals.get("self")
            if isinstance(owner, keras.Model):
                return owner
        frame = frame.f_back
    return None


def _producer(tensor):
    history = getattr(tensor, "_keras_history", None)
    return getattr(history, "operation", None)


def output_index(model, layer):
    """Index of ``layer``'s output among the outputs of ``model`` (a
    ``Sequential`` or functional model, nested ones included), or None when
    it is not a model output or the model does not say (subclassed models)."""
    if isinstance(model, keras.Sequential):
        if not model.layers:
            return None
        last = model.layers[-1]
        if last is layer:
            return 0
        if isinstance(last, keras.Model) and output_index(last, layer) == 0 and _num_outputs(last) == 1:
            return 0
        return None
    try:
        outputs = keras.tree.flatten(model.outputs)
    except (AttributeError, ValueError, TypeError):
        return None
    for i, tensor in enumerate(outputs):
        producer = _producer(tensor)
        if producer is layer:
            return i
        if (isinstance(producer, keras.Model) and producer is not model and _num_outputs(producer) == 1
                and output_index(producer, layer) == 0):
            return i
    return None


def _num_outputs(model):
    try:
        return len(keras.tree.flatten(model.outputs))
    except (AttributeError, ValueError, TypeError):
        return 1 if isinstance(model, keras.Sequential) else None


def output_loss(model, index):
    """The loss the user compiled for output ``index`` of ``model`` (as passed
    to ``compile``: an object, function or name), or None."""
    loss = getattr(model, "loss", None)
    if loss is None:
        return None
    count = _num_outputs(model)
    if isinstance(loss, dict):
        names = list(getattr(model, "output_names", None) or [])
        return loss.get(names[index]) if index < len(names) else None
    if isinstance(loss, (list, tuple)):
        return loss[index] if len(loss) == count and index < len(loss) else None
    return loss if count == 1 else None


def loss_expects(loss):
    """``"logits"`` or ``"probabilities"`` for Keras' cross-entropy losses
    (object, function, string name or config dict), None for every other loss."""
    if isinstance(loss, (str, dict)):
        try:
            loss = keras.losses.get(loss)
        except (ValueError, TypeError, KeyError):
            return None
    kwargs = {}
    if isinstance(loss, keras.losses.Loss):
        kwargs = dict(getattr(loss, "_fn_kwargs", None) or {})
        loss = getattr(loss, "fn", None)
    if isinstance(loss, functools.partial):
        kwargs = {**loss.keywords, **kwargs}
        loss = loss.func
    if getattr(loss, "__name__", None) not in _CLASS_LOSSES:
        return None
    if "from_logits" not in kwargs:
        try:
            kwargs["from_logits"] = inspect.signature(loss).parameters["from_logits"].default
        except (KeyError, TypeError, ValueError):
            return None
    return "logits" if kwargs["from_logits"] else "probabilities"


def describe_loss(loss):
    if isinstance(loss, str):
        return repr(loss)
    if isinstance(loss, keras.losses.Loss):
        args = getattr(loss, "_fn_kwargs", None) or {}
        shown = f"from_logits={bool(args.get('from_logits', False))}"
        return f"{type(loss).__name__}({shown})"
    return getattr(loss, "__name__", type(loss).__name__)


def warn(layer, message):
    warnings.warn(f"{type(layer).__name__} {layer.name!r}: {message}", UserWarning, stacklevel=4)


def check_output_kind(layer, model):
    """Warns when ``layer``'s output is an output of ``model`` and its compiled
    loss expects logits where the layer outputs probabilities, or the reverse."""
    index = output_index(model, layer)
    if index is None:
        return
    loss = output_loss(model, index)
    expects = loss_expects(loss)
    if expects is None:
        return
    shown = describe_loss(loss)
    num_classes = getattr(layer, "num_classes", None)
    if num_classes is not None and expects == "logits":
        fix = ("compile the loss with from_logits=False (the default), e.g. "
               "keras.losses.SparseCategoricalCrossentropy()")
        if layer._units_are_logits:
            fix += f", or build the layer with units={num_classes} instead to output logits"
        warn(layer, f"the layer outputs class probabilities (num_classes={num_classes}), but the model is "
                    f"trained with {shown}, which expects logits: it takes the probabilities for logits "
                    f"and trains poorly. Fix: {fix}.")
    elif num_classes is None and expects == "probabilities":
        units = layer.units
        fix = (f"build the layer with num_classes={max(units, 2)} to output class probabilities "
               f"(and keep from_logits=False)")
        if layer._units_are_logits:
            fix += ", or compile the loss with from_logits=True to train the raw values as logits"
        else:
            fix += f"; {type(layer).__name__}'s units= outputs regression values"
        warn(layer, f"the layer outputs raw values (units={units}), but the model is trained with {shown}, "
                    f"which expects probabilities (from_logits=False): it clips the raw values to (0, 1) "
                    f"and the model trains (almost) nothing. Fix: {fix}.")


class FitChecks:
    """Mixin of the tree layers: call `_check_fit` from ``call``. The
    first training call inside a ``Model.fit`` runs the checks (once per
    layer, in Python: on TensorFlow and JAX when the step is traced)."""

    # ``units=`` outputs logits (Tree Ensemble Layer, hinge forests and ferns)
    # or regression values (the families whose units= means regression).
    _units_are_logits = False
    _fit_checked = False

    def _check_fit(self, training):
        if not training or self._fit_checked:
            return
        model = fitting_model()
        if model is None:
            return
        self._fit_checked = True
        self._fit_warnings(model)

    def _fit_warnings(self, model):
        check_output_kind(self, model)
