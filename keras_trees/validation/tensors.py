"""Runtime checks of tensor values, written once for every backend and mode.

Each check takes the tensor and the argument's name and returns the tensor
(converted where the check says so). The rule for where a check runs:

- concrete values (NumPy, eager TensorFlow, eager JAX, PyTorch): the condition
  is evaluated at once and a ``ValueError``/``TypeError`` is raised;
- inside ``tf.function``: a ``tf.debugging.Assert`` op (stateful, so
  ``tf.function`` always runs it) fails with ``InvalidArgumentError`` carrying
  the same message. The checks of one layer call gathered by
  `collected` become one op of the compiled library instead
  (``KerasTrees>Check``, see `keras_trees.validation.batched.require_all`),
  which scans the tensors that must be finite itself;
- inside ``jax.jit``/``jax.grad`` tracing: the reduced condition goes to an
  XLA custom call of the compiled library (``KerasTreesCheck``), or without
  it to a ``jax.debug.callback``, which fails the compiled function with the
  message when it runs (``JaxRuntimeError``), see `jax_check`;
- inside ``torch.compile`` tracing: the conditions go to one op of the
  compiled library (``keras_trees::check``) that fails the compiled call with
  the message when it runs (``ValueError``), see `torch_check`, instead
  of a graph break on every ``bool(tensor)``;
- symbolic Keras tensors (functional model construction) have no values: only
  dtype and shape checks apply.

Under XLA compilation of TensorFlow graphs (``jit_compile=True``) assertions
are dropped by XLA itself; the compiled kernels keep their own checks.
"""

import contextlib
import math
import threading

import numpy as np
import keras
from keras import ops
from keras_trees._arrays import to_numpy
from keras_trees._modes import thread_flag

_collectors = threading.local()

_FLOAT_KINDS = ("float16", "bfloat16", "float32", "float64")


def backend():
    return keras.backend.backend()


def is_keras_symbolic(x):
    return keras.backend.is_keras_tensor(x) or isinstance(x, keras.KerasTensor)


def _tf_graph(x):
    if backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly() or (tf.is_tensor(x) and not hasattr(x, "numpy"))


def _jax_traced(x):
    if backend() != "jax":
        return False
    import jax

    return isinstance(x, jax.core.Tracer)


def _torch_compiling(x):
    """True while ``torch.compile`` traces ``x`` (a tensor of the PyTorch backend)."""
    if backend() != "torch":
        return False
    import torch

    return isinstance(x, torch.Tensor) and torch.compiler.is_compiling()


def _raise_if_false(ok, message, error):
    if not bool(np.asarray(ok)):
        raise error(message)


def require(ok, message, error=ValueError):
    """Fails with ``message`` unless the scalar boolean ``ok`` is true.

    ``ok`` is a Python bool or a scalar boolean tensor of the active backend
    (computed from the tensor being checked, so its kind tells the mode).
    Returns the ``tf.debugging.Assert`` op inside ``tf.function`` (see
    `after`), None otherwise.
    """
    if isinstance(ok, (bool, np.bool_)):
        if not ok:
            raise error(message)
        return
    if is_keras_symbolic(ok):
        return
    stack = getattr(_collectors, "stack", None)
    if stack and (_tf_graph(ok) or _jax_traced(ok) or _torch_compiling(ok)):
        stack[-1].append((ok, message, error))
        return
    if _tf_graph(ok):
        import tensorflow as tf

        return tf.debugging.Assert(ok, [message], name="keras_trees_check")
    if _jax_traced(ok):
        jax_check([ok], [message], error)
        return
    if _torch_compiling(ok):
        torch_check([ok], [message], error)
        return
    _raise_if_false(to_numpy(ok), message, error)


@contextlib.contextmanager
def collected():
    """Within the block, checks of values known only when a compiled graph runs
    (``tf.function``, ``jax.jit``) are gathered, not issued; the block yields
    the list of ``(ok, message, error)`` for
    `keras_trees.validation.batched.require_all`, which issues them as
    one check that a tensor depends on. Concrete values still raise at once.
    Per thread; blocks nest (the inner one gathers)."""
    stack = getattr(_collectors, "stack", None)
    if stack is None:
        stack = _collectors.stack = []
    pending = []
    stack.append(pending)
    try:
        yield pending
    finally:
        stack.pop()


@contextlib.contextmanager
def jit_gathered():
    """On the JAX backend, `collected`: the checks of traced values made
    in the block are gathered, for the caller to hand to
    `keras_trees.validation.batched.require_all` with the tensor it goes
    on with (``x = require_all(pending, output=x)``). Under ``jax.jit`` they
    then become one check call that ``x`` depends on: microseconds, no side
    effect, so JAX keeps its fast dispatch (a check issued alone is a
    ``jax.debug.callback``, an effect that sends every call of the compiled
    function through JAX's slow Python dispatch). Other backends: gathers
    nothing (yields an empty list); their checks are issued as before."""
    if backend() != "jax":
        yield []
        return
    with collected() as pending:
        yield pending


class KernelCheck:
    """A pending check of a whole tensor in a TensorFlow graph, in a
    `collected` list next to ``(ok, message, error)`` entries: on the
    compiled kernels `keras_trees.validation.batched.require_all` hands
    ``x`` to its one check op (``kind`` says what the op checks); elsewhere
    `condition` gives the ``(ok, message, error)`` of ``keras.ops``."""

    __slots__ = ("x", "message")
    kind = None

    def __init__(self, x, message):
        self.x, self.message = x, message

    def condition(self):
        raise NotImplementedError


class FiniteCheck(KernelCheck):
    """``x`` (floating) holds only finite values."""

    kind = "finite"

    def condition(self):
        return (ops.all(ops.isfinite(self.x)), self.message, ValueError)


def defer(check):
    """Inside a `collected` block, while tracing a TensorFlow graph:
    appends ``check`` (a `KernelCheck`) to the block's list and returns
    True; otherwise returns False (the caller checks ``check.x`` itself)."""
    stack = getattr(_collectors, "stack", None)
    if stack and _tf_graph(check.x):
        stack[-1].append(check)
        return True
    return False


def finite_check(x, message):
    """The check that floating ``x`` is finite, as an entry of
    `keras_trees.validation.batched.require_all`: a `FiniteCheck`
    in a TensorFlow graph, ``(ok, message)`` elsewhere."""
    if _tf_graph(x):
        return FiniteCheck(x, message)
    return (ops.all(ops.isfinite(x)), message)


def _raise_first(oks, messages, error):
    for ok, message in zip(np.asarray(oks).reshape(-1), messages):
        if not bool(ok):
            raise error(message)


@contextlib.contextmanager
def unchecked_for_timing():
    """For benchmarks only: functions traced for ``jax.jit`` within this context
    (per thread) carry none of the runtime checks of `jax_check`, so a
    benchmark can time the ``keras.ops`` path with and without the cost of its
    checks (on the reference path each check is a ``lax.cond``, which a GPU
    decides on the host). Bad input then passes silently: never for user code."""
    with thread_flag(_collectors, "unchecked"):
        yield


def jax_check(oks, messages, error=ValueError, output=None):
    """Inside ``jax.jit``: fails the compiled call with the message of the first
    false condition of ``oks`` (scalar booleans). Returns ``output``.

    Given ``output`` (and the compiled kernels loaded), this is one XLA custom
    call (``KerasTreesCheck``) whose boolean result ``output`` is made to
    depend on (`depend`): a few microseconds, no side effect, so JAX keeps
    its fast dispatch and SPMD partitioning works. Without ``output`` nothing
    would read the custom call's result, and a side-effecting custom call
    would both slow JAX's dispatch and break sharded (multi-device) programs:
    a ``jax.debug.callback`` taken only when a condition is false reports
    instead (a host round trip per call). Hot paths (the layers'
    calls) pass ``output``.
    """
    import jax
    import jax.numpy as jnp

    from keras_trees.ops import _library

    if getattr(_collectors, "unchecked", False):
        return output
    stacked = jnp.stack([jnp.asarray(ok, dtype=bool).reshape(()) for ok in oks])
    messages = tuple(str(m).replace("\n", " ") for m in messages)
    if output is not None and _library.custom_ops_available("check"):
        call = jax.ffi.ffi_call("KerasTreesCheck", jax.ShapeDtypeStruct((), jnp.bool_),
                                vmap_method="sequential")
        token = call(stacked, messages="".join(m + "\n" for m in messages))
        return depend(output, token)

    def fail(stacked):
        jax.debug.callback(_raise_first, stacked, messages, error)

    jax.lax.cond(jnp.all(stacked), lambda stacked: None, fail, stacked)
    return output


def torch_check(oks, messages, error=ValueError, output=None):
    """Inside ``torch.compile``: fails the compiled call with the message of
    the first false condition of ``oks`` (scalar booleans). Returns ``output``.

    With the compiled kernels loaded this is one op (``keras_trees::check``,
    kept by the compiler even when nothing reads it) that raises
    ``ValueError`` when the compiled call runs; given ``output``, the result
    is made to depend on it. Without the kernels the conditions are read at
    once (a graph break) and ``error`` is raised."""
    from keras_trees.ops import _library

    if _library.custom_ops_available("check"):
        token = _library.binding("check").check(oks, messages)
        return output if output is None else _library.binding("check").depend(output, token)
    _raise_first(np.asarray([bool(ok) for ok in oks]), messages, error)
    return output


def depend(x, token):
    """``x``, computed only once the boolean ``token`` (the result of a check
    under ``jax.jit``) is: an elementwise select XLA cannot fold away, fused
    into whatever produces ``x``."""
    import jax.numpy as jnp

    x = jnp.asarray(x)
    other = jnp.nan if jnp.issubdtype(x.dtype, jnp.inexact) else 0
    return jnp.where(token, x, jnp.asarray(other, x.dtype))


def after(check, x):
    """``x``, computed after ``check`` (what `require` returned) inside
    ``tf.function``: ops that read ``x`` (a gather by ids) then run only once
    the check passed, so its message, not theirs, reports a bad value. Other
    modes need nothing (eager checks raise at once; ``jax.jit`` gathers clamp
    and the callback reports)."""
    if check is None:
        return x
    import tensorflow as tf

    with tf.control_dependencies([check]):
        return tf.identity(x)


def is_text_dtype(dtype):
    """True for NumPy text, object and record dtypes (not for bfloat16, whose
    NumPy kind is also "V")."""
    kind = getattr(dtype, "kind", None)
    if kind in ("U", "S", "O"):
        return True
    if kind != "V":
        return False
    try:
        keras.backend.standardize_dtype(dtype)
    except ValueError:
        return True
    return False


def _dtype_or_none(x):
    """`dtype_name`, or None for Python values and unknown dtypes."""
    try:
        return dtype_name(x)
    except (AttributeError, TypeError, ValueError):
        return None


def dtype_name(x):
    """Keras's name of ``x``'s dtype; ``"string"`` for text and object arrays
    (which Keras has no name for), so callers refuse them by name."""
    if is_text_dtype(x.dtype):
        return "string"
    return keras.backend.standardize_dtype(x.dtype)


def as_tensor(x, name):
    """``x`` as a tensor of the active backend; strings and objects are refused
    with a ``TypeError`` naming ``name`` (not a backend's cast error)."""
    if isinstance(x, str) or (isinstance(x, np.ndarray) and is_text_dtype(x.dtype)):
        raise TypeError(f"{name} must be numeric, got {_describe(x)}")
    if is_keras_symbolic(x):
        return x
    try:
        t = ops.convert_to_tensor(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric array, got {_describe(x)} ({exc})") from None
    dtype = getattr(t, "dtype", None)
    if dtype is not None and "string" in str(dtype):
        raise TypeError(f"{name} must be numeric, got a string tensor")
    return t


def _describe(x):
    if isinstance(x, str):
        return f"the string {x!r}"
    dtype = getattr(x, "dtype", None)
    return f"{type(x).__name__} of dtype {dtype}" if dtype is not None else type(x).__name__


def floating(x, name, dtype=None):
    """``x`` as a floating tensor: floating inputs keep their dtype (or are cast
    to ``dtype``); integer and boolean inputs are cast to ``dtype`` or floatx;
    strings and complex numbers are refused with a ``TypeError``."""
    x = as_tensor(x, name)
    kind = dtype_name(x)
    if kind.startswith("complex") or kind == "string":
        raise TypeError(f"{name} must be real numbers, got dtype {kind}")
    target = dtype or (kind if kind in _FLOAT_KINDS else keras.config.floatx())
    return x if kind == target else ops.cast(x, target)


def rank(x, expected, name, layout=""):
    """Static rank check (``expected`` an int or a tuple of allowed ranks)."""
    allowed = (expected,) if isinstance(expected, int) else tuple(expected)
    shape = static_shape(x)
    if shape is None or len(shape) not in allowed:
        want = " or ".join(str(r) for r in allowed)
        got = "unknown rank" if shape is None else f"shape {shape}"
        raise ValueError(f"{name} must have rank {want}{' ' + layout if layout else ''}, got {got}")
    return x


def static_shape(x):
    """The static shape of ``x`` as a tuple (None for unknown dimensions), or
    None when even the rank is unknown (a ``tf.TensorSpec(shape=None)``)."""
    shape = getattr(x, "shape", None)
    if shape is None or getattr(shape, "rank", 0) is None:
        return None
    return tuple(None if d is None else int(d) for d in shape)


def features(x, name="x", dtype=None, layout="(batch, input_dim)", like=None):
    """Feature rows: ``x`` as a floating tensor (`floating`) of rank 2
    whose last dimension (the number of features) is known when traced; the
    ops size their parameters by it. Unknown rank or an unknown last
    dimension (``tf.function`` with a loose ``input_signature``) is a
    ``ValueError`` naming ``name``.

    Integer and boolean ``x`` take the floating dtype of ``like`` (the op's
    parameters), so integer features of a float64 model are computed in
    float64 as the same features written as floats would be; floatx without
    one."""
    if dtype is None and like is not None:
        x_kind, like_kind = _dtype_or_none(x), _dtype_or_none(like)
        if like_kind in _FLOAT_KINDS and x_kind not in (None, "string", *_FLOAT_KINDS):
            dtype = like_kind
    x = floating(x, name, dtype)
    rank(x, 2, name, layout)
    if static_shape(x)[-1] is None:
        raise ValueError(
            f"{name} must have a known last dimension (the number of features) when traced, got shape "
            f"{static_shape(x)}; give tf.function an input_signature with the feature dimension")
    return x


def finite(x, name, hint=""):
    """Fails unless every value of floating ``x`` is finite."""
    if is_keras_symbolic(x) or not _is_floating(x):
        return x
    message = f"{name} contains NaN or Inf{'; ' + hint if hint else ''}"
    if defer(FiniteCheck(x, message)):
        return x
    require(ops.all(ops.isfinite(x)), message)
    return x


def nonnegative(x, name, hint=""):
    """Fails unless every value is finite and >= 0."""
    if is_keras_symbolic(x):
        return x
    ok = ops.all(x >= 0)
    if _is_floating(x):
        ok = ops.logical_and(ok, ops.all(ops.isfinite(x)))
    require(ok, f"{name} must be finite and >= 0{'; ' + hint if hint else ''}")
    return x


def positive_scalar(value, name):
    """A scalar that must be finite and > 0 (e.g. a steepness or a width):
    Python numbers are checked at once, tensors (variables) at run time."""
    if value is None:
        raise TypeError(f"{name} must be a finite number > 0, got None")
    if isinstance(value, (bool, np.bool_)) or isinstance(value, str):
        raise TypeError(f"{name} must be a finite number > 0, got {value!r}")
    if isinstance(value, (int, float, np.number)):
        # math, not NumPy: torch.compile traces np.isfinite as a tensor op.
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
        return value
    t = as_tensor(value, name)
    if is_keras_symbolic(t):
        return value
    if len(t.shape) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {tuple(t.shape)}")
    if _is_floating(t):
        require(ops.logical_and(ops.isfinite(t), t > 0), f"{name} must be a finite number > 0")
    else:
        require(t > 0, f"{name} must be a finite number > 0")
    return value


def host_domain(value, name, expected, ok):
    """The rule of the public math helpers (``keras_trees.ops``): a value given as
    a Python number, a list of them or a NumPy array is checked at once and
    refused with a ``ValueError`` naming ``name`` and ``expected`` unless
    ``ok(array)`` holds at every element (NaN fails every domain; ``ok`` uses
    comparisons only, so that it takes a float as well); a tensor of a
    backend is not read (that would cost a device sync or a graph check in every
    layer that calls the helper) and gives what the formula gives in IEEE
    arithmetic. Returns ``value`` unchanged."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, list, tuple, np.ndarray, np.number)):
        return value
    if isinstance(value, (int, float)):
        # math, not NumPy: torch.compile traces NumPy calls on Python numbers as tensor ops.
        good = not math.isnan(value) and bool(ok(float(value)))
        if not good:
            raise ValueError(f"{name} must be {expected}, got {value!r}")
        return value
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):
        return value
    if a.dtype.kind not in "iuf" or not a.size:
        return value
    a = a.astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = np.isnan(a) | ~np.asarray(ok(a), bool)
    if np.any(bad):
        first = a[bad].flat[0]
        raise ValueError(f"{name} must be {expected}, got {first!r} ({int(bad.sum())} of {a.size} values outside)")
    return value


def indices(x, name, upper, lower=0, dtype="int32"):
    """Integer ids in ``[lower, upper)`` as ``dtype``; checked *before* the cast,
    so int64 values beyond int32 and fractional floats are refused, never
    wrapped or truncated. ``upper`` may be None (only the lower bound)."""
    if not _is_backend_tensor(x):
        # NumPy and Python values are checked as they are: converting first could
        # wrap int64 ids (JAX without x64) before the check sees them.
        _numpy_indices(x, name, upper, lower)
    x = as_tensor(x, name)
    if is_keras_symbolic(x):
        return ops.cast(x, dtype) if dtype_name(x) != dtype else x
    kind = dtype_name(x)
    if kind == "bool" or kind.startswith("complex"):
        raise TypeError(f"{name} must be integer ids, got dtype {kind}")
    span = f"[{lower}, {upper})" if upper is not None else f">= {lower}"
    checks = []
    with jit_gathered() as pending:
        if _is_floating(x):
            ok = ops.logical_and(ops.all(ops.isfinite(x)), ops.all(ops.equal(x, ops.floor(x))))
            checks.append(require(ok, f"{name} must hold integer ids (whole numbers), got fractional, NaN or Inf "
                                      "values"))
        ok = ops.all(x >= lower)
        if upper is not None:
            ok = ops.logical_and(ok, ops.all(x < upper))
        checks.append(require(ok, f"{name} must lie in {span} (an id is out of range)"))
    x = ops.cast(x, dtype) if dtype_name(x) != dtype else x
    for check in checks:
        x = after(check, x)
    if pending:  # under jax.jit: the ids depend on one check call
        x = jax_check([ok for ok, _, _ in pending], [m for _, m, _ in pending], pending[0][2], output=x)
    return x


def is_backend_tensor(x):
    """True for tensors and variables of a backend (not NumPy, not Python values)."""
    return hasattr(x, "dtype") and not isinstance(x, (np.ndarray, np.generic))


_is_backend_tensor = is_backend_tensor


def _numpy_indices(x, name, upper, lower):
    if isinstance(x, str):
        raise TypeError(f"{name} must be integer ids, got the string {x!r}")
    a = np.asarray(x)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be integer ids, got dtype {a.dtype}")
    if a.dtype.kind == "f" and not (np.all(np.isfinite(a)) and np.all(a == np.floor(a))):
        raise ValueError(f"{name} must hold integer ids (whole numbers), got fractional, NaN or Inf values")
    span = f"[{lower}, {upper})" if upper is not None else f">= {lower}"
    if a.size and (a.min() < lower or (upper is not None and a.max() >= upper)):
        raise ValueError(f"{name} must lie in {span}, got values in [{a.min()}, {a.max()}] (out of range)")


def _is_floating(x):
    return dtype_name(x) in _FLOAT_KINDS
