"""Loading of the compiled op library and the switch between it and the reference path."""

import contextlib
import os
import threading
import warnings

import keras

_DISABLE_ENV = "KERAS_TREES_DISABLE_CUSTOM_OPS"
_lock = threading.Lock()
_state = {"loaded": None, "module": None, "error": None, "warned": False}
_local = threading.local()


def _env_disabled():
    return os.environ.get(_DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def load():
    """Builds (if needed) and loads the op library; returns True on success.

    Never raises: failures are recorded, reported once with a warning, and the
    library keeps working through the ``keras.ops`` reference path.
    """
    with _lock:
        if _state["loaded"] is not None:
            return _state["loaded"]
        if keras.backend.backend() != "tensorflow":
            _state["error"] = f"the Keras backend is {keras.backend.backend()!r}, not 'tensorflow'"
        elif _env_disabled():
            _state["error"] = f"{_DISABLE_ENV} is set"
        else:
            try:
                import tensorflow as tf

                from keras_trees import _build

                path = _build.build()
                _state["module"] = tf.load_op_library(str(path))
                _register_gradients()
            except Exception as exc:  # noqa: BLE001 - any failure means fall back
                _state["error"] = f"{type(exc).__name__}: {exc}"
        _state["loaded"] = _state["module"] is not None
        if not _state["loaded"] and not _env_disabled() and not _state["warned"]:
            _state["warned"] = True
            warnings.warn(
                "keras-trees: custom ops unavailable, using the slower keras.ops reference "
                f"path ({_state['error']}).",
                RuntimeWarning,
                stacklevel=3,
            )
        return _state["loaded"]


def _register_gradients():
    """Imports every TensorFlow wrapper module so its op gradients are registered
    (a SavedModel loaded after `import keras_trees` can then be differentiated)."""
    import importlib
    import pkgutil

    import keras_trees.ops as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_tf_"):
            importlib.import_module(f"keras_trees.ops.{info.name}")


def load_error():
    """Why the library is not loaded (None when it is)."""
    return _state["error"]


def module():
    """The loaded op module (raises if unavailable)."""
    if not load():
        raise RuntimeError(f"keras-trees custom ops are unavailable: {_state['error']}")
    return _state["module"]


def custom_ops_available():
    """True when calls will use the compiled custom ops."""
    return load() and not getattr(_local, "reference_only", False)


@contextlib.contextmanager
def reference_only(enabled=True):
    """Within this context (per thread), every op uses the keras.ops reference path.

    Useful for exporting a SavedModel made of stock TensorFlow ops only, or for
    comparing the two paths.
    """
    previous = getattr(_local, "reference_only", False)
    _local.reference_only = enabled
    try:
        yield
    finally:
        _local.reference_only = previous
