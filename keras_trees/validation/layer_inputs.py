"""Static checks of what a layer is called with, made before Keras converts,
casts or builds (where a string input would fail with "Cast string to float is
not supported" and an input of unknown rank inside ``tf.function`` with
"as_list() is not defined on an unknown TensorShape").

`static_input` checks the type and the static shape of a layer's
features ``x``; the mixin `CheckedInputs` (put it first in a layer's
bases) runs it on the first argument of every call. Only attributes are read
(dtype and static shape, no values), so the check costs nothing measurable;
value checks (NaN/Inf) are `keras_trees.validation.tensors.finite`.
"""

import numpy as np

_REAL_KINDS = "biuf"  # NumPy kinds of bool, signed/unsigned integer and floating dtypes


def _owner(layer):
    return "" if layer is None else f"{type(layer).__name__} {layer.name!r}: "


def _dtype_name(x):
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return None
    name = getattr(dtype, "name", None) or str(dtype)
    return name.replace("torch.", "")


def _is_real_dtype(name):
    """Backend dtype names: everything but strings, objects and complex numbers
    (bfloat16 and float8 types included, which NumPy knows only as kind "V")."""
    if name is None:
        return True
    name = str(name).lower()
    return not any(kind in name for kind in ("str", "complex", "object", "unicode", "bytes"))


def _is_real_numpy(dtype):
    return dtype.kind in _REAL_KINDS or (dtype.kind == "V" and "float" in dtype.name)


def _describe(x, dtype_name):
    if isinstance(x, str):
        return f"the string {x!r}"
    return f"{type(x).__name__} of dtype {dtype_name}"


def static_input(x, name="x", layer=None, axis=-1):
    """Returns ``x``; fails unless it holds real numbers (bool, integer or
    floating) and, where its shape is static information (a tensor traced
    inside ``tf.function``), its rank and its size on ``axis`` (the features)
    are known.

    ``TypeError`` for strings, objects and complex numbers; ``ValueError`` for
    an unknown rank or feature dimension. ``layer`` (optional) is named in the
    message.
    """
    owner = _owner(layer)
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{owner}{name} must be real numbers, got {_describe(x, 'str')}")
    if isinstance(x, (list, tuple)):
        try:
            kind = np.asarray(x).dtype
        except (TypeError, ValueError):  # ragged nesting: Keras reports it
            return x
        if not _is_real_numpy(kind):
            raise TypeError(f"{owner}{name} must be real numbers, got a {type(x).__name__} of {kind} values")
        return x
    dtype = _dtype_name(x)
    if isinstance(x, np.ndarray):
        if not _is_real_numpy(x.dtype):
            raise TypeError(f"{owner}{name} must be real numbers, got {_describe(x, x.dtype)}")
        return x
    if not _is_real_dtype(dtype):
        raise TypeError(f"{owner}{name} must be real numbers, got {_describe(x, dtype)}")
    shape = getattr(x, "shape", None)
    if shape is None:
        return x
    rank = shape.rank if hasattr(shape, "rank") else len(shape)
    if rank is None:
        raise ValueError(
            f"{owner}{name} must have a known rank and a known last dimension (the number of "
            "features); got a tensor of unknown rank (give tf.function an input_signature "
            "with the rank and the last dimension, e.g. tf.TensorSpec([None, num_features]))"
        )
    dims = list(shape)
    if rank and -rank <= axis < rank:
        size = dims[axis]
        size = getattr(size, "value", size)  # TF1-style Dimension objects
        if size is None:
            where = "last dimension" if axis == -1 else f"dimension {axis}"
            raise ValueError(
                f"{owner}{name} must have a known {where} (the number of features); got shape "
                f"{tuple(getattr(d, 'value', d) for d in dims)} (give tf.function an input_signature "
                "with the last dimension, e.g. tf.TensorSpec([None, num_features]))"
            )
    return x


class CheckedInputs:
    """Mixin for layers: every call checks its first argument (the features
    ``x``) with `static_input` before Keras converts or builds it. A layer
    whose features lie on another axis sets ``_checked_input_axis``."""

    _checked_input_axis = -1

    def __call__(self, *args, **kwargs):
        if args:
            static_input(args[0], "x", self, self._checked_input_axis)
        elif "inputs" in kwargs:
            static_input(kwargs["inputs"], "x", self, self._checked_input_axis)
        return super().__call__(*args, **kwargs)
