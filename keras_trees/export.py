"""Export helpers: every Keras export format works for models with keras-trees layers.

``model.export(path, format=...)`` of a model holding keras-trees layers:

- ``"tf_saved_model"`` (Keras' default): the SavedModel keeps the compiled
  custom ops (conditional computation, the fast path); ``import keras_trees``
  before ``tf.saved_model.load`` registers them. The ops' input checks stay
  in the graph: a NaN or Inf input fails the served call with
  ``InvalidArgumentError``. [`export_portable`][keras_trees.export.export_portable] writes a SavedModel of
  stock TensorFlow ops instead (loads anywhere; the same rejection, through
  ``tf.debugging.Assert``).
- ``"onnx"``, ``"litert"``, ``"openvino"``: these runtimes cannot hold the
  custom ops, so importing keras-trees wraps Keras' exporters of these
  formats (``keras.src.export.export_onnx``, ``export_litert``,
  ``export_openvino``, which ``Model.export`` dispatches to): while they
  trace a model that holds keras-trees layers, every layer traces its
  ``keras.ops`` reference path (`keras_trees.ops._library.portable_export`),
  the same math as the kernels up to float rounding. Those runtimes have no
  assertion either, so a traced keras-trees layer gives NaN in every output
  of a row whose input holds a NaN or Inf (hard routing would otherwise send
  such a row down a branch and return a finite prediction); the other rows
  of the batch are unaffected. Before tracing, the model's weights are
  checked (a NaN weight is refused with a ``ValueError`` naming the layer and
  the variable), and after writing, the file is checked to hold no
  keras-trees op: an exporter that traced them anyway raises
  ``RuntimeError`` and leaves no file, rather than writing one its runtime
  refuses.
"""

import functools
import os

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.layers._xla import XLACompatibility
from keras_trees.ops import _library
from keras_trees.ops._library import reference_only
from keras_trees.validation import models as _models

# Keras' exporter (an attribute of keras.src.export, what Model.export calls)
# -> the format whose runtime cannot hold the keras-trees custom ops.
PORTABLE_EXPORTERS = {"export_onnx": "onnx", "export_litert": "litert", "export_openvino": "openvino"}
# What every keras-trees TensorFlow op is named in a graph ("KerasTrees>Check", ...).
_OP_PREFIX = b"KerasTrees>"


@keras_trees_export("keras_trees")
def export_portable(model, filepath, verbose=False, **kwargs):
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

    ONNX, LiteRT and OpenVINO need nothing of this: ``model.export(path,
    format="onnx")`` (``"litert"``, ``"openvino"``) traces the reference path
    by itself (see `keras_trees.export`); passing ``format`` here does
    the same.

    Args:
        model: a built ``keras.Model``.
        filepath: the SavedModel directory (a string or ``os.PathLike``).
        verbose: print Keras' listing of the exported endpoints and their
            ``TensorSpec`` signatures (quiet by default).
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
        return model.export(filepath, verbose=bool(verbose), **kwargs)


def has_tree_layers(model):
    """True when ``model`` is, or holds (recursively), a keras-trees layer that
    may call the compiled ops."""
    if isinstance(model, XLACompatibility):
        return True
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None:
        return False
    return any(isinstance(layer, XLACompatibility) for layer in flatten(include_self=True, recursive=True))


def _written_files(filepath, format):
    """The files an exporter of ``format`` wrote for ``filepath``."""
    path = os.fspath(filepath)
    if format == "openvino":  # model.xml and its weights, model.bin
        stem = path[:-4] if path.endswith(".xml") else path
        return [p for p in (stem + ".xml", stem + ".bin") if os.path.isfile(p)]
    return [path] if os.path.isfile(path) else []


def check_no_custom_ops(filepath, format):
    """Raises ``RuntimeError`` (after removing the files) when the file an
    exporter of ``format`` wrote at ``filepath`` names a keras-trees op:
    its runtime would refuse it (ONNX Runtime: ``INVALID_GRAPH``; LiteRT:
    an unresolved custom op)."""
    files = _written_files(filepath, format)
    found = []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        start = data.find(_OP_PREFIX)
        while start >= 0:
            end = start + len(_OP_PREFIX)
            while end < len(data) and (data[end:end + 1].isalnum() or data[end:end + 1] == b"_"):
                end += 1
            found.append(data[start:end].decode("ascii", "replace"))
            start = data.find(_OP_PREFIX, end)
    if found:
        for path in files:
            os.remove(path)
        raise RuntimeError(
            f"the {format} export of {os.fspath(filepath)!r} traced keras-trees custom ops "
            f"({', '.join(sorted(set(found)))}) that its runtime cannot run; the file was removed. "
            f"Export inside `with keras_trees.ops.reference_only():`, and please report this.")


def _portable_exporter(original, format):
    """``original`` (Keras' exporter of ``format``) tracing keras-trees layers
    through their portable path (see the module docstring)."""

    @functools.wraps(original)
    def export(model, filepath, *args, **kwargs):
        if not has_tree_layers(model):
            return original(model, filepath, *args, **kwargs)
        _models.check_weights(model, f"the {format} export refuses a model that would serve NaN "
                                     "(its runtime cannot check values)")
        with _library.portable_export(format):
            result = original(model, filepath, *args, **kwargs)
        check_no_custom_ops(filepath, format)
        return result

    export.keras_trees_format = format
    return export


def install_keras_hooks():
    """Wraps Keras' exporters of the formats of `PORTABLE_EXPORTERS`
    (once; called when keras-trees is imported). Returns the formats wrapped."""
    try:
        import keras.src.export as keras_export
    except ImportError:  # pragma: no cover - a Keras without exporters
        return ()
    wrapped = []
    for name, format in PORTABLE_EXPORTERS.items():
        original = getattr(keras_export, name, None)
        if original is None:
            continue
        if getattr(original, "keras_trees_format", None) != format:
            setattr(keras_export, name, _portable_exporter(original, format))
        wrapped.append(format)
    return tuple(wrapped)


install_keras_hooks()
