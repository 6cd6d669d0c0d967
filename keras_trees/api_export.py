"""The public API of keras-trees, declared where each object is defined.

Every public class and function carries ``@keras_trees_export(package)``, the
package it is public in (``"keras_trees.layers"``, ``"keras_trees.ops"``, ...).
The package's ``__init__`` imports its modules and ends with
``__all__ = public_api(__name__)``, which binds the exported objects as the
package's attributes and returns their names: each name is written once, at the
definition.

Keras objects (layers, models, callbacks, losses, metrics, regularizers,
constraints, initializers, optimizers, schedules), and any class exported with
``serializable=True``, are also registered for Keras serialization as
``"keras_trees>ClassName"``, the names every earlier release saved them under:
``.keras`` files keep loading after ``import keras_trees``. A new layer::

    @keras_trees_export("keras_trees.layers")
    class MyTree(keras.layers.Layer):
        ...

is then ``keras_trees.layers.MyTree``, in ``keras_trees.layers.__all__`` and
saved as ``"keras_trees>MyTree"``; ``tests/test_layer_contract.py`` asks it for
one ``Case`` and ``tests/test_public_api.py`` for its registered name.
"""

import sys
import types

import keras

# The package of every registered name ("keras_trees>ClassName"); never change it,
# saved .keras files refer to it.
SERIALIZATION_PACKAGE = "keras_trees"

_SERIALIZABLE_BASES = (
    keras.layers.Layer,  # layers and models
    keras.callbacks.Callback,
    keras.losses.Loss,
    keras.metrics.Metric,
    keras.regularizers.Regularizer,
    keras.constraints.Constraint,
    keras.initializers.Initializer,
    keras.optimizers.Optimizer,
    keras.optimizers.schedules.LearningRateSchedule,
)

# package -> {public name: object}, in definition order.
_EXPORTS = {}


def _is_serializable(symbol, serializable):
    if serializable is not None:
        return serializable
    return isinstance(symbol, type) and issubclass(symbol, _SERIALIZABLE_BASES)


def _same_definition(a, b):
    """``a is b``, or the same definition run again (``importlib.reload``)."""
    return a is b or (
        getattr(a, "__qualname__", None) is not None
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
        and getattr(a, "__module__", None) == getattr(b, "__module__", None)
    )


def _record(package, name, symbol):
    if package != "keras_trees" and not package.startswith("keras_trees."):
        raise ValueError(f"keras-trees exports to keras_trees.*, got package {package!r}")
    exports = _EXPORTS.setdefault(package, {})
    if name in exports and not _same_definition(exports[name], symbol):
        raise ValueError(f"{package}.{name} is exported twice: {exports[name]!r} and {symbol!r}")
    exports[name] = symbol


def keras_trees_export(package, name=None, serializable=None):
    """Decorator: makes a class or function public in ``package``.

    Args:
        package: the package the object is public in, e.g. ``"keras_trees.layers"``.
        name: its public name (default: its ``__name__``).
        serializable: register the class for Keras serialization as
            ``"keras_trees>" + cls.__name__`` (default: for subclasses of the Keras
            serializable bases; ``True`` for plain classes with
            ``get_config``/``from_config``).
    """

    def decorator(symbol):
        _record(package, name or symbol.__name__, symbol)
        if _is_serializable(symbol, serializable):
            keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)(symbol)
        return symbol

    return decorator


def export_constants(package, namespace, *names):
    """Makes module-level constants public in ``package``: ``export_constants(
    "keras_trees.topology", globals(), "ABSENT", "LEAF", "SPLIT")``."""
    for constant in names:
        _record(package, constant, namespace[constant])


def packages():
    """The packages something was exported to so far."""
    return sorted(_EXPORTS)


def exports(package):
    """``{name: object}`` exported to ``package`` so far (a copy)."""
    return dict(_EXPORTS.get(package, {}))


def public_api(package):
    """Binds what was exported to ``package`` as attributes of its module and
    returns the sorted names for its ``__all__``; a public submodule (one that
    objects are exported to, e.g. ``keras_trees.layers``) that the package has
    imported is listed too."""
    module = sys.modules[package]
    names = []
    for name, symbol in _EXPORTS.get(package, {}).items():
        bound = vars(module).get(name, symbol)
        # A submodule of the same name (losses.leaf_variance) gives way to the
        # function it defines, as ``from .leaf_variance import leaf_variance`` would.
        shadowed = isinstance(bound, types.ModuleType) and bound.__name__ == f"{package}.{name}"
        if not (shadowed or _same_definition(bound, symbol)):
            raise ValueError(f"{package}.{name} is already bound to {bound!r}, cannot export {symbol!r}")
        setattr(module, name, symbol)
        names.append(name)
    for name, value in vars(module).items():
        if (
            isinstance(value, types.ModuleType)
            and not name.startswith("_")
            and value.__name__ == f"{package}.{name}"
            and value.__name__ in _EXPORTS
        ):
            names.append(name)
    return sorted(names)
