"""Loading of the compiled kernels and the switch between them and the reference path.

Two bindings of the same kernel cores exist: TensorFlow custom ops (TensorFlow
backend) and XLA FFI handlers (JAX backend). :func:`load` builds and loads the
one of the active Keras backend; :func:`binding` returns the backend's wrapper
module of an op family (``keras_trees.ops._tf_<family>`` or ``_jax_<family>``).
The PyTorch backend runs the ``keras.ops`` reference path.
"""

import contextlib
import os
import re
import threading
import warnings

import keras

from keras_trees.api_export import keras_trees_export

_DISABLE_ENV = "KERAS_TREES_DISABLE_CUSTOM_OPS"
# Backends with compiled kernels -> prefix of their wrapper modules.
_BINDINGS = {"tensorflow": "tf", "jax": "jax"}
# The XLA FFI handlers exported by the JAX library (custom_ops/xla/).
_FFI_TARGETS = (
    "KerasTreesSoftTreeEnsemble",
    "KerasTreesSoftTreeEnsembleGrad",
    "KerasTreesHingeForest",
    "KerasTreesHingeForestGrad",
    "KerasTreesHardRouting",
    "KerasTreesHardRoutingExperts",
    "KerasTreesLossAugmentedInference",
    "KerasTreesPrunedRouting",
    "KerasTreesPrunedRoutingGrad",
    "KerasTreesPrunedLeafStatistics",
    "KerasTreesPrunedEmStatistics",
    "KerasTreesCheck",
)
_lock = threading.Lock()
_state = {"loaded": None, "module": None, "error": None, "warned": False}
_local = threading.local()


def _env_disabled():
    return os.environ.get(_DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def load():
    """Builds (if needed) and loads the kernels of the active Keras backend;
    returns True on success.

    Never raises: failures are recorded, reported once with a warning, and the
    library keeps working through the ``keras.ops`` reference path.
    """
    with _lock:
        if _state["loaded"] is not None:
            return _state["loaded"]
        backend = keras.backend.backend()
        if backend not in _BINDINGS:
            _state["error"] = f"the Keras backend is {backend!r}; compiled kernels exist for TensorFlow and JAX"
        elif _env_disabled():
            _state["error"] = f"{_DISABLE_ENV} is set"
        else:
            try:
                from keras_trees import _build

                path = _build.build(framework=backend)
                _state["module"] = _load_tensorflow(path) if backend == "tensorflow" else _load_jax(path)
            except Exception as exc:  # noqa: BLE001 - any failure means fall back
                _state["error"] = f"{type(exc).__name__}: {exc}"
        _state["loaded"] = _state["module"] is not None
        expected = _env_disabled() or backend not in _BINDINGS
        if not _state["loaded"] and not expected and not _state["warned"]:
            _state["warned"] = True
            warnings.warn(
                "keras-trees: compiled kernels unavailable, using the slower keras.ops reference "
                f"path ({_state['error']}).",
                RuntimeWarning,
                stacklevel=3,
            )
        return _state["loaded"]


def _load_tensorflow(path):
    import tensorflow as tf

    module = tf.load_op_library(str(path))
    _register_gradients()
    return module


def _load_jax(path):
    """Loads the XLA FFI library and registers its handlers for the CPU."""
    import ctypes

    import jax
    import jax.ffi

    library = ctypes.cdll.LoadLibrary(str(path))
    for name in _FFI_TARGETS:
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(library, name)), platform="cpu")
    return library


def _register_gradients():
    """Imports every TensorFlow wrapper module so its op gradients are registered
    (a SavedModel loaded after `import keras_trees` can then be differentiated)."""
    import importlib
    import pkgutil

    import keras_trees.ops as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_tf_"):
            importlib.import_module(f"keras_trees.ops.{info.name}")


@keras_trees_export("keras_trees.ops")
def load_error():
    """Why the library is not loaded (None when it is)."""
    return _state["error"]


def module():
    """The loaded TensorFlow op module or JAX ctypes library (raises if unavailable)."""
    if not load():
        raise RuntimeError(f"keras-trees custom ops are unavailable: {_state['error']}")
    return _state["module"]


def _in_xla_context():
    """True while TensorFlow traces a function for XLA (``jit_compile=True``)."""
    try:
        from tensorflow.python.framework import ops as tf_ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - private TF modules moved
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph()))


def _requested_device():
    """The innermost device scope ('' when none), eager or in a graph."""
    import tensorflow as tf

    if tf.executing_eagerly():
        from tensorflow.python.eager import context

        return context.context().device_name or ""
    from tensorflow.python.framework import ops as tf_ops

    stack = getattr(tf_ops.get_default_graph(), "_device_function_stack", None)
    try:
        specs = [s for s in stack.peek_objs() if isinstance(s, str)] if stack is not None else []
    except Exception:  # noqa: BLE001 - private API: no scope known
        specs = []
    return specs[-1] if specs else ""


def _visible_accelerators():
    import tensorflow as tf

    return [d for d in tf.config.list_logical_devices() if d.device_type not in ("CPU",)]


def _target_is_cpu():
    """Whether ops created here are placed on a CPU: no accelerator is visible,
    or the device scope names a CPU. The kernels have CPU implementations only;
    on a GPU they would run on the host with device-host copies, so the
    ``keras.ops`` path runs on the GPU instead."""
    if not _visible_accelerators():
        return True
    return "CPU" in _requested_device().upper()


def binding(family):
    """The active backend's wrapper module of an op family, e.g. ``binding("hinge")``
    is ``keras_trees.ops._tf_hinge`` on TensorFlow and ``_jax_hinge`` on JAX."""
    prefix = _BINDINGS[keras.backend.backend()]
    # The builtin __import__, not importlib: AutoGraph (inside tf.function)
    # leaves builtins alone but warns that it cannot convert importlib.
    return _Binding(__import__(f"keras_trees.ops._{prefix}_{family}", fromlist=["_"]))


class _Binding:
    """A wrapper module whose functions raise ``ValueError`` when an eager call
    is rejected by the kernels' input checks (``core/checks.h``), as the
    ``keras.ops`` path does: the kernels fail with ``InvalidArgumentError``
    (TensorFlow) or ``JaxRuntimeError`` (JAX), which inside ``tf.function``
    and ``jax.jit`` stay as they are (the values are only known when the
    graph runs)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args, **kwargs):
            return _eager_value_errors(attr, args, kwargs)

        return call


_TF_NOISE = re.compile(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:[^\]]*\].*$", re.DOTALL)


def _eager_value_errors(fn, args, kwargs):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except tf.errors.InvalidArgumentError as exc:
            raise ValueError(_TF_NOISE.sub("", exc.message).strip()) from None
    import jax

    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kwargs))):
        return fn(*args, **kwargs)
    try:
        return jax.block_until_ready(fn(*args, **kwargs))
    except jax.errors.JaxRuntimeError as exc:
        message = str(exc)
        if "INVALID_ARGUMENT" not in message:
            raise
        raise ValueError(message.split("INVALID_ARGUMENT:", 1)[-1].strip()) from None


def _jax_on_cpu():
    """The kernels have CPU handlers only: on a JAX GPU/TPU the reference runs there."""
    import jax

    return jax.default_backend() == "cpu"


def kernels_block_xla():
    """True when keras-trees layers call custom ops that XLA cannot compile: the
    TensorFlow backend with the op library loaded (layers then report
    ``supports_jit = False``, so Keras never turns XLA on for them)."""
    return keras.backend.backend() == "tensorflow" and load()


@keras_trees_export("keras_trees.ops")
def custom_ops_available():
    """True when op calls made here and now run the compiled kernels.

    That needs the TensorFlow or JAX backend, the loaded kernels and no
    :func:`reference_only` context. On TensorFlow also no XLA compilation in
    progress (inside ``tf.function(jit_compile=True)`` the XLA-compatible
    ``keras.ops`` path is traced instead) and CPU placement (on a GPU the
    ``keras.ops`` path runs on the GPU); on JAX the CPU as the default device
    (the XLA FFI handlers are CPU handlers; they compile under ``jax.jit``).
    :func:`execution_report` says the same in words.
    """
    if not load() or getattr(_local, "reference_only", False):
        return False
    if keras.backend.backend() == "jax":
        return _jax_on_cpu()
    return not _in_xla_context() and _target_is_cpu()


@keras_trees_export("keras_trees.ops")
def execution_report():
    """What runs where, as a dict (also a readable summary under ``"summary"``).

    Keys: ``backend``; ``library_loaded`` and ``load_error``; ``devices``, a map
    from each device TensorFlow or JAX sees (PyTorch: ``"default"``) to
    ``"kernels"`` (compiled CPU kernels) or ``"reference"`` (the ``keras.ops``
    path); ``xla`` ("reference path" on TensorFlow when XLA compiles, "native"
    elsewhere: the JAX kernels are XLA FFI calls).

    >>> from keras_trees import ops
    >>> sorted(ops.execution_report())
    ['backend', 'devices', 'library_loaded', 'load_error', 'summary', 'xla']
    """
    backend = keras.backend.backend()
    loaded = load()
    devices = {}
    if backend == "tensorflow":
        import tensorflow as tf

        for device in tf.config.list_logical_devices():
            kernels = loaded and device.device_type == "CPU" and not getattr(_local, "reference_only", False)
            devices[device.name] = "kernels" if kernels else "reference"
        xla = "reference path (custom ops cannot be XLA-compiled)" if loaded else "native"
    elif backend == "jax":
        import jax

        for device in jax.devices():
            kernels = loaded and device.platform == "cpu" and not getattr(_local, "reference_only", False)
            devices[str(device)] = "kernels" if kernels else "reference"
        xla = "native (the kernels are XLA FFI custom calls)"
    else:
        devices["default"] = "reference"
        xla = "native (the keras.ops path compiles like any layer)"
    parts = [f"{name}: {what}" for name, what in devices.items()]
    summary = f"keras-trees on {backend}: " + ", ".join(parts)
    if not loaded:
        summary += f" (custom ops not loaded: {_state['error']})"
    return {
        "backend": backend,
        "library_loaded": loaded,
        "load_error": _state["error"],
        "devices": devices,
        "xla": xla,
        "summary": summary,
    }


@keras_trees_export("keras_trees.ops")
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
