"""Deprecated argument names: aliases for one release that warn naming the new name.

The vocabulary (docs/vocabulary.md; removals in CHANGELOG.md): ``max_depth`` for depth, ``steepness``
(bigger = harder) for the sigmoid-routed families, ``transition_width``
(bigger = softer) for the Tree Ensemble Layer's smooth-step. The names of
release 0.1.0 (``depth``, ``gamma``, ``max_gamma``) still work when passed by
hand, with a ``DeprecationWarning``; configurations saved by 0.1.0 load
silently (an old file is not its user's doing), through `renamed_config`.
"""

import os
import sys
import warnings

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message):
    """A ``DeprecationWarning`` attributed to the first caller outside keras_trees
    (the user's line that passed the old name)."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def renamed_argument(owner, kwargs, old, new, value, default=None):
    """The value of argument ``new``, taken from its deprecated name ``old`` when
    ``kwargs`` holds it (popped, with a warning naming ``new``).

    ``value`` is what the caller got for ``new``; passing ``old`` as well as a
    ``new`` different from its ``default`` is an error.
    """
    if old not in kwargs:
        return value
    old_value = kwargs.pop(old)
    if value is not default and value != default:
        raise ValueError(
            f"{owner}: got both {new}={value!r} and its deprecated name {old}={old_value!r}; "
            f"pass {new} only"
        )
    warn(
        f"{owner}: the argument {old!r} is deprecated and will be removed in the next "
        f"release; use {new!r} instead ({new}={old_value!r})."
    )
    return old_value


def renamed_config(config, renames):
    """A copy of a layer config with the keys of release 0.1.0 renamed (``renames``:
    ``old -> new``), silently: files saved by 0.1.0 load without warnings."""
    config = dict(config)
    for old, new in renames.items():
        if old in config and new not in config:
            config[new] = config.pop(old)
    return config
