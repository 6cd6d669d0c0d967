"""Loading of the compiled kernels and the dispatch between them and the reference path.

The kernel cores are bound to each framework: TensorFlow custom ops
(TensorFlow backend), XLA FFI handlers (JAX backend) and ``torch.library``
custom ops (PyTorch backend, CPU tensors), on the CPU for every
op family and on CUDA GPUs for the families of `DISPATCH` (the JAX
handlers from a separate CUDA library, registered for the ``"CUDA"`` platform
under the same target names; the TensorFlow GPU kernels in the op library,
registered beside the CPU kernels). `load` builds and loads what the
active backend and its devices can use. `binding` returns a family's
wrapper module; [`custom_ops_available`][keras_trees.ops._library.custom_ops_available] says whether a family's calls
made here run the kernels, by the one table `DISPATCH` keyed by
(framework, device platform). On PyTorch the kernels serve CPU tensors (a
CUDA, MPS or XPU default device runs the ``keras.ops`` reference path).
"""

import contextlib
import os
import re
import threading
import warnings

import keras

from keras_trees._modes import thread_flag
from keras_trees.api_export import keras_trees_export

_DISABLE_ENV = "KERAS_TREES_DISABLE_CUSTOM_OPS"
# Which families' GPU kernels a GPU runs: "measured" (the default: every family
# with CUDA kernels except those measured slower than the jit-compiled keras.ops
# path on a GPU, _GPU_SLOWER, and none of a framework whose GPU kernels have
# never run on a GPU, _GPU_NEVER_RUN) or "all" (every family with CUDA kernels:
# the prepared GPU check, tests/gpu/, and benchmarks that time the kernels).
_GPU_KERNELS_ENV = "KERAS_TREES_GPU_KERNELS"
_GPU_KERNELS_CHOICES = ("measured", "all")
# Families whose CUDA kernels measured slower than the keras.ops path on the
# GPUs measured (docs/backends.md#gpu-kernels): the Tree Ensemble Layer and
# pruned routing, whose per-(sample, tree) walks lose to the dense path's
# matrix products there (the pruned references apply the same pruning rule
# densely: the same results, more memory).
_GPU_SLOWER = ("soft_tree", "pruned_routing")
# Frameworks whose GPU kernels are built and registered but have never run on
# a GPU (the GPU machines have no TensorFlow): the keras.ops path there.
_GPU_NEVER_RUN = ("tensorflow",)
# Backends with compiled kernels -> prefix of their wrapper modules.
_BINDINGS = {"tensorflow": "tf", "jax": "jax", "torch": "torch"}
# The oldest PyTorch whose stable C++ ABI the torch binding is built against
# (keras_trees/_build.py: TORCH_TARGET_VERSION).
_TORCH_MINIMUM = (2, 10)
# Every op family with compiled kernels; its wrapper module is
# keras_trees.ops._<prefix>_<family> ("check": the runtime input checks; under
# JAX it has no wrapper module: keras_trees/validation/tensors.py calls its FFI
# target KerasTreesCheck itself, so only the family's presence in DISPATCH
# counts there and the "_jax_check" names below are never imported).
FAMILIES = ("soft_tree", "hinge", "hard_routing", "loss_augmented", "pruned_routing", "check")
_GPU_FAMILIES = ("hinge", "hard_routing", "loss_augmented")
# The families bound to PyTorch (torch.library ops of custom_ops/torch/).
_TORCH_FAMILIES = ("hinge", "hard_routing", "soft_tree", "loss_augmented", "pruned_routing", "check")
# (framework, device platform) -> {op family: its binding module}. One wrapper
# module serves a framework's CPU and GPU: the op (TensorFlow) or FFI target
# (JAX) is the same, and the framework picks the kernel of the device.
DISPATCH = {
    ("tensorflow", "cpu"): {f: f"_tf_{f}" for f in FAMILIES},
    # The Tree Ensemble Layer on a GPU: TensorFlow GPU kernels of its
    # trace-free ops (the wrapper picks them there, _tf_soft_tree.py), XLA FFI
    # CUDA handlers under JAX; it and pruned routing run them only with
    # KERAS_TREES_GPU_KERNELS=all (_GPU_SLOWER), as does every TensorFlow GPU
    # kernel (_GPU_NEVER_RUN: they have not run on a GPU).
    ("tensorflow", "gpu"): {f: f"_tf_{f}" for f in (*_GPU_FAMILIES, "soft_tree", "pruned_routing")},
    ("jax", "cpu"): {f: f"_jax_{f}" for f in FAMILIES},
    ("jax", "gpu"): {f: f"_jax_{f}" for f in (*_GPU_FAMILIES, "soft_tree", "pruned_routing", "check")},
    ("torch", "cpu"): {f: f"_torch_{f}" for f in _TORCH_FAMILIES},
}
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
# The CPU emulation of the GPU kernels (custom_ops/xla/portable_ffi.cc), for
# tests: what runs under portable_bodies().
PORTABLE_TARGETS = (
    "KerasTreesSoftTreeEnsemble",
    "KerasTreesSoftTreeEnsembleGrad",
    "KerasTreesHingeForest",
    "KerasTreesHingeForestGrad",
    "KerasTreesHardRouting",
    "KerasTreesHardRoutingExperts",
    "KerasTreesLossAugmentedInference",  # xla/loss_augmented_portable_ffi.cc
)
# The handlers of the JAX CUDA library (symbol: the target name + "Cuda").
CUDA_TARGETS = (*PORTABLE_TARGETS, "KerasTreesCheck")
_lock = threading.Lock()
_state = {"loaded": None, "module": None, "error": None, "warned": False,
          "gpu": None, "gpu_error": None}
_local = threading.local()
# Pruned probabilistic routing: the CPU emulation of its GPU kernels
# (xla/pruned_routing_portable_ffi.cc, "<Target>Portable") and its CUDA handlers
# (cuda/xla_pruned_routing.cu, "<Target>Cuda"), under the CPU handlers' targets.
_PRUNED_TARGETS = (
    "KerasTreesPrunedRouting",
    "KerasTreesPrunedRoutingGrad",
    "KerasTreesPrunedLeafStatistics",
    "KerasTreesPrunedEmStatistics",
)
PORTABLE_TARGETS += _PRUNED_TARGETS
CUDA_TARGETS += _PRUNED_TARGETS


def _env_disabled():
    return os.environ.get(_DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def load():
    """Builds (if needed) and loads the kernels of the active Keras backend;
    returns True on success.

    Never raises: failures are recorded, reported once with a warning, and the
    library keeps working through the ``keras.ops`` reference path.
    """
    if _state["loaded"] is not None:  # no lock once decided (torch.compile traces this)
        return _state["loaded"]
    with _lock:
        if _state["loaded"] is not None:
            return _state["loaded"]
        backend = keras.backend.backend()
        if backend not in _BINDINGS:
            _state["error"] = (f"the Keras backend is {backend!r}; compiled kernels exist for TensorFlow, JAX "
                               "and PyTorch")
        elif _env_disabled():
            _state["error"] = f"{_DISABLE_ENV} is set"
        else:
            try:
                loader = {"tensorflow": _load_tensorflow, "jax": _load_jax, "torch": _load_torch}[backend]
                _state["module"] = loader()
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


def _gpu_wanted():
    """Whether the active framework sees a GPU; the CUDA kernels are built and
    loaded only then (and only with nvcc, keras_trees/_build.py)."""
    if keras.backend.backend() == "jax":
        import jax

        try:
            return bool(jax.devices("gpu"))
        except RuntimeError:  # no GPU backend
            return False
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def _cuda_build(framework):
    """The CUDA build's path, or None with the reason recorded in
    ``_state["gpu_error"]`` (one warning at load; the GPU then runs the
    reference path, the CPU the kernels)."""
    from keras_trees import _build

    if not _gpu_wanted():
        _state["gpu_error"] = "no GPU visible"
        return None
    if _build.find_nvcc() is None:
        _state["gpu_error"] = ("nvcc not found (set KERAS_TREES_NVCC or CUDA_HOME): the GPU runs the "
                               "keras.ops path")
        return None
    try:
        return _build.build(framework=framework, cuda=True)
    except Exception as exc:  # noqa: BLE001 - the CPU build still serves
        _state["gpu_error"] = f"building the CUDA kernels failed: {type(exc).__name__}: {exc}"
        return None


def _warn_gpu():
    error = _state["gpu_error"]
    if error and error != "no GPU visible" and not error.startswith("nvcc not found"):
        warnings.warn(f"keras-trees: GPU kernels unavailable, the GPU runs the keras.ops path ({error}).",
                      RuntimeWarning, stacklevel=4)
    elif error and error.startswith("nvcc not found"):
        warnings.warn(f"keras-trees: {error}.", RuntimeWarning, stacklevel=4)


def _load_tensorflow():
    """The op library: with the GPU kernels when a GPU is visible and nvcc
    builds them, else the CPU build."""
    import tensorflow as tf

    from keras_trees import _build

    path = _cuda_build("tensorflow")
    _state["gpu"] = path is not None
    module = tf.load_op_library(str(path or _build.build(framework="tensorflow")))
    _warn_gpu()
    _register_gradients()
    return module


def _load_jax():
    """Loads the XLA FFI library and registers its handlers for the CPU (the
    CPU emulation of the GPU kernels too), then the CUDA library's for the
    GPU when one is visible."""
    import ctypes

    import jax
    import jax.ffi

    from keras_trees import _build

    library = ctypes.cdll.LoadLibrary(str(_build.build(framework="jax")))
    for name in _FFI_TARGETS:
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(library, name)), platform="cpu")
    for name in PORTABLE_TARGETS:
        portable = name + "Portable"
        jax.ffi.register_ffi_target(portable, jax.ffi.pycapsule(getattr(library, portable)), platform="cpu")
    path = _cuda_build("jax")
    if path is not None:
        try:
            cuda = ctypes.cdll.LoadLibrary(str(path))
            for name in CUDA_TARGETS:
                jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(cuda, name + "Cuda")),
                                            platform="CUDA")
            _state["cuda_library"] = cuda
        except Exception as exc:  # noqa: BLE001 - the CPU kernels still serve
            _state["gpu_error"] = f"loading the CUDA kernels failed: {type(exc).__name__}: {exc}"
            path = None
    _state["gpu"] = path is not None
    _warn_gpu()
    return library


def _load_torch():
    """Loads the torch.library ops (custom_ops/torch/, CPU kernels) and
    registers their fake kernels and autograd formulas (the ``_torch_*``
    wrapper modules). Needs neither TensorFlow nor JAX."""
    import torch

    from keras_trees import _build

    found = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    if found < _TORCH_MINIMUM:
        raise RuntimeError(f"the compiled kernels need PyTorch {'.'.join(map(str, _TORCH_MINIMUM))} or later "
                           f"(its stable C++ ABI), found {torch.__version__}: pip install 'torch>=2.10'")
    path = str(_build.build(framework="torch"))
    torch.ops.load_library(path)
    _state["gpu"] = False
    _state["gpu_error"] = None
    import importlib

    for name in DISPATCH[("torch", "cpu")].values():  # now: torch.compile cannot trace an import
        wrappers = importlib.import_module(f"keras_trees.ops.{name}")
        wrappers.register()
        _bindings[name] = _Binding(wrappers)
    return path


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


def _platform():
    """The device platform ops created here and now are placed on: "cpu" or
    "gpu" (another accelerator: its own name). TensorFlow: the innermost
    device scope, else the first visible accelerator; JAX: the default
    device's platform."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        platform = jax.default_backend()
        return "gpu" if platform in ("gpu", "cuda") else platform
    if backend == "torch":
        return _torch_platform()
    accelerators = _visible_accelerators()
    requested = _requested_device().upper()
    if not accelerators or "CPU" in requested:
        return "cpu"
    if "GPU" in requested or accelerators[0].device_type == "GPU":
        return "gpu"
    return accelerators[0].device_type.lower()


def _torch_platform():
    """The platform of the device Keras puts PyTorch tensors on ("cpu", "gpu"
    for CUDA, else the device type: "mps", "xpu")."""
    get_device = _state.get("torch_get_device")
    if get_device is None:  # imported once: torch.compile cannot trace an import
        from keras.src.backend.torch.core import get_device

        _state["torch_get_device"] = get_device
    kind = str(get_device()).split(":")[0].lower()
    return "gpu" if kind == "cuda" else kind


def gpu_kernels_choice():
    """``KERAS_TREES_GPU_KERNELS``: "measured" (default) or "all"; anything else
    raises ``ValueError`` naming the variable."""
    choice = os.environ.get(_GPU_KERNELS_ENV, "measured").strip().lower() or "measured"
    if choice not in _GPU_KERNELS_CHOICES:
        raise ValueError(f"{_GPU_KERNELS_ENV} must be one of {', '.join(map(repr, _GPU_KERNELS_CHOICES))}, "
                         f"got {os.environ[_GPU_KERNELS_ENV]!r}")
    return choice


def _compiled_families(backend, platform):
    """The op families whose compiled kernels run on ``platform`` (after load()).
    On a GPU, the families of _GPU_SLOWER, and every family of the frameworks
    of _GPU_NEVER_RUN, run the keras.ops path unless
    ``KERAS_TREES_GPU_KERNELS=all``."""
    if not _state["loaded"]:
        return ()
    if platform == "gpu" and not _state["gpu"]:
        return ()
    families = tuple(DISPATCH.get((backend, platform), {}))
    if platform == "gpu" and gpu_kernels_choice() != "all":
        if backend in _GPU_NEVER_RUN:
            return ()
        families = tuple(f for f in families if f not in _GPU_SLOWER)
    return families


def binding(family):
    """The active backend's wrapper module of an op family, e.g. ``binding("hinge")``
    is ``keras_trees.ops._tf_hinge`` on TensorFlow and ``_jax_hinge`` on JAX
    (the module `DISPATCH` names for the family on the CPU; a framework's
    GPU kernels share it)."""
    name = DISPATCH[(keras.backend.backend(), "cpu")][family]
    found = _bindings.get(name)
    if found is None:  # imported once: torch.compile cannot trace an import
        # The builtin __import__, not importlib: AutoGraph (inside tf.function)
        # leaves builtins alone but warns that it cannot convert importlib.
        found = _bindings[name] = _Binding(__import__(f"keras_trees.ops.{name}", fromlist=["_"]))
    return found


_bindings = {}


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
    if backend == "torch":
        # A failed check of the kernels raises ValueError itself (the adapters
        # throw std::invalid_argument), eager and under torch.compile.
        return fn(*args, **kwargs)
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


def kernels_block_xla():
    """True when keras-trees layers call custom ops that XLA cannot compile: the
    TensorFlow backend with the op library loaded (layers then report
    ``supports_jit = False``, so Keras never turns XLA on for them)."""
    return keras.backend.backend() == "tensorflow" and load()


@keras_trees_export("keras_trees.ops")
def custom_ops_available(family=None):
    """True when op calls made here and now run the compiled kernels.

    Args:
        family: an op family (``"soft_tree"``, ``"hinge"``, ``"hard_routing"``,
            ``"loss_augmented"``, ``"pruned_routing"``, ``"check"``): whether
            that family's calls run its kernels. ``None``: whether every
            family's do.

    That needs the loaded kernels, no [`reference_only`][keras_trees.ops._library.reference_only] context, and
    kernels of the family for the device the call runs on (`DISPATCH`):
    every family on the CPU (PyTorch: CPU tensors); hinge forests and ferns,
    hard routing and loss-augmented inference also on CUDA GPUs under JAX
    (and ``"check"``), when nvcc built them; the Tree Ensemble Layer
    (``"soft_tree"``) and pruned routing there only with
    ``KERAS_TREES_GPU_KERNELS=all`` (`gpu_kernels_choice`: measured slower than
    the ``keras.ops`` path), and under TensorFlow every family's GPU kernels
    only with ``KERAS_TREES_GPU_KERNELS=all`` (built, never run on a GPU). The device is
    TensorFlow's placement (the innermost device scope, else the GPU when one
    is visible), JAX's default device or the device Keras puts PyTorch
    tensors on. On TensorFlow
    also no XLA compilation in progress (inside ``tf.function(jit_compile=True)``
    the XLA-compatible ``keras.ops`` path is traced instead); on JAX the
    kernels are XLA FFI calls and compile under ``jax.jit``.
    [`execution_report`][keras_trees.ops._library.execution_report] says the same in words.
    """
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES} or None, got {family!r}")
    if not load() or getattr(_local, "reference_only", False):
        return False
    backend = keras.backend.backend()
    if backend == "tensorflow" and _in_xla_context():
        return False
    families = _compiled_families(backend, _platform())
    return family in families if family is not None else set(families) >= set(FAMILIES)


def _device_families(backend, platform):
    """{family: "kernels" or "reference"} for a device of ``platform``."""
    off = getattr(_local, "reference_only", False)
    compiled = () if off else _compiled_families(backend, platform)
    return {f: "kernels" if f in compiled else "reference" for f in FAMILIES}


def _summarize(families):
    compiled = [f for f, what in families.items() if what == "kernels"]
    if len(compiled) == len(families):
        return "kernels"
    if not compiled:
        return "reference"
    return "kernels for " + ", ".join(compiled) + "; reference otherwise"


@keras_trees_export("keras_trees.ops")
def execution_report():
    """What runs where, as a dict (also a readable summary under ``"summary"``).

    Keys: ``backend``; ``library_loaded`` and ``load_error``; ``devices``, a map
    from each device TensorFlow or JAX sees (PyTorch: the device type Keras
    puts tensors on, e.g. ``"cpu"``) to
    ``"kernels"`` (compiled kernels for every op family), ``"reference"`` (the
    ``keras.ops`` path) or ``"kernels for <families>; reference otherwise"``
    (a GPU: the families whose CUDA kernels run there, see
    [`custom_ops_available`][keras_trees.ops._library.custom_ops_available]); ``families``, the same per op
    family (``{device: {family: "kernels" or "reference"}}``); ``gpu_error``,
    why GPU kernels are not loaded (None when they are, or when no GPU is
    visible); ``xla`` ("reference path" on TensorFlow when XLA compiles,
    "native" elsewhere: the JAX kernels are XLA FFI calls).

    >>> from keras_trees import ops
    >>> sorted(ops.execution_report())
    ['backend', 'devices', 'families', 'gpu_error', 'library_loaded', 'load_error', 'summary', 'xla']
    """
    backend = keras.backend.backend()
    loaded = load()
    families = {}
    if backend == "tensorflow":
        import tensorflow as tf

        for device in tf.config.list_logical_devices():
            families[device.name] = _device_families(backend, device.device_type.lower())
        xla = "reference path (custom ops cannot be XLA-compiled)" if loaded else "native"
    elif backend == "jax":
        import jax

        for device in jax.devices():
            platform = "gpu" if device.platform in ("gpu", "cuda") else device.platform
            families[str(device)] = _device_families(backend, platform)
        xla = "native (the kernels are XLA FFI custom calls)"
    elif backend == "torch":
        platform = _torch_platform()
        families[platform if platform != "gpu" else "cuda"] = _device_families(backend, platform)
        xla = "not used (torch.compile traces the kernels as custom ops)"
    else:
        families["default"] = {f: "reference" for f in FAMILIES}
        xla = "native (the keras.ops path compiles like any layer)"
    devices = {name: _summarize(per) for name, per in families.items()}
    parts = [f"{name}: {what}" for name, what in devices.items()]
    summary = f"keras-trees on {backend}: " + ", ".join(parts)
    if not loaded:
        summary += f" (custom ops not loaded: {_state['error']})"
    gpu_error = _state["gpu_error"] if _state["gpu_error"] != "no GPU visible" else None
    if loaded and gpu_error:
        summary += f" (GPU kernels not loaded: {gpu_error})"
    return {
        "backend": backend,
        "library_loaded": loaded,
        "load_error": _state["error"],
        "devices": devices,
        "families": families,
        "gpu_error": gpu_error,
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
    with thread_flag(_local, "reference_only", enabled):
        yield


@keras_trees_export("keras_trees.ops")
def check_gpu_errors(*results):
    """Raises the error of a keras-trees GPU call that has not been raised yet.

    On a GPU, the JAX kernels of the hinge forest and fern do not wait for
    their input checks (unless ``KERAS_TREES_GPU_CHECKS=sync``): a call with
    a bad input (a feature index out of range, NaN or Inf in ``x`` or a
    parameter) returns NaN outputs at once, and its ``ValueError`` is raised
    by the next such call on that GPU, or here. This waits for ``results``
    (arrays of the calls to check), then for the checks of every call the GPUs
    have run, and raises ``ValueError`` with the first message not raised yet
    (prefixed with "an earlier keras-trees call on this GPU failed"); it
    returns None when there is none. On the CPU, on TensorFlow and on PyTorch
    every call raises its own errors and this does nothing.
    """
    if keras.backend.backend() != "jax" or not load():
        return None
    import ctypes

    import jax

    jax.block_until_ready(results)
    libraries = [_state.get("module"), _state.get("cuda_library")]
    buffer = ctypes.create_string_buffer(4096)
    for library in libraries:
        check = getattr(library, "KerasTreesGpuErrors", None)
        if check is None:
            continue
        length = check(ctypes.c_int(1), buffer, ctypes.c_int(len(buffer)))
        if length < 0:
            raise RuntimeError(f"keras-trees GPU checks: {buffer.value.decode(errors='replace')}")
        if length > 0:
            raise ValueError(buffer.value.decode(errors="replace"))
    return None


@contextlib.contextmanager
def portable_export(format):
    """Within this context (per thread), keras-trees layers are traced for an
    export format that cannot hold the custom ops (``"onnx"``, ``"litert"``,
    ``"openvino"``): every op takes the ``keras.ops`` reference path (as in
    [`reference_only`][keras_trees.ops._library.reference_only]) and every keras-trees layer gives NaN outputs
    for the rows whose input holds a NaN or Inf (the target runtimes have no
    assertion to reject them). `keras_trees.export` enters it around
    Keras' exporters of those formats."""
    previous = getattr(_local, "reference_only", False), getattr(_local, "export_format", None)
    _local.reference_only, _local.export_format = True, format
    try:
        yield
    finally:
        _local.reference_only, _local.export_format = previous


def exporting_portable():
    """The format of the `portable_export` in progress on this thread, else None."""
    return getattr(_local, "export_format", None)


@contextlib.contextmanager
def portable_bodies(enabled=True):
    """Within this context (per thread), the families with GPU kernels run
    their CPU emulation on the CPU: the portable bodies the GPU runs, on the
    CPU launcher, instead of the CPU engines. JAX: every such family
    (``KerasTrees<Op>Portable`` targets); TensorFlow: the Tree Ensemble Layer
    (the trace-free ops, whose CPU kernels run the GPU pipeline). For the
    tests of the GPU kernels' bodies."""
    with thread_flag(_local, "portable", enabled):
        yield


def trace_free():
    """Whether the TensorFlow Tree Ensemble Layer calls made here and now use
    the trace-free ops (custom_ops/tensorflow/tree_ensemble_kernels.h): on a
    GPU (their GPU kernels: the traced op's data-dependent trace has no GPU
    kernel) and inside `portable_bodies` (their CPU kernels, the CPU
    emulation of the GPU kernels)."""
    return getattr(_local, "portable", False) or _platform() == "gpu"


def target(name):
    """The XLA FFI target a JAX wrapper calls for ``name``: its CPU emulation
    inside `portable_bodies`, else ``name`` itself."""
    if getattr(_local, "portable", False) and name in PORTABLE_TARGETS:
        return name + "Portable"
    return name
