"""The contract of the layers stored on the heap topology of `keras_trees.topology`.

End-to-end trees and forests, convex polytope trees and non-greedy trees keep
their trees the same way (``node_state`` of shape ``(num_trees, 2**(D+1) - 1)``,
split parameters at the internal positions, leaves at their positions), so one
base class owns what follows from that:

* ``features(inputs)``: the rows the splits read, ``(rows, feature_dim)`` in
  the variable dtype (one flatten-and-cast for all families; a family may
  transform the inputs first through the ``_feature_inputs`` hook). Every
  computation of a layer starts here, so the checks live here too: ``x`` must
  be real numbers (``TypeError`` naming ``x`` otherwise), finite (``ValueError``
  "x contains NaN or Inf", or the backend's runtime error with that message
  inside ``tf.function``/``jax.jit``), of known rank and feature dimensions;
  the family's parameters (``_checked_parameters``) must be finite and
  ``node_state`` a valid topology (`keras_trees.validation`),
* inputs follow ``keras.layers.Dense``: the trees read the last axis and
  every leading axis is kept in the outputs (``(2, 4, 4)`` gives
  ``(2, 4, units)``), never turned into extra samples. A family whose samples
  may span several axes (``_whole_sample``: end-to-end trees, whose inputs
  may be images) reads all axes after the batch axis of the shape it was
  built on and keeps the axes in front of them: built on ``(None, 4)`` and
  called on ``(2, 4, 4)`` it gives ``(2, 4, units)``,
* ``is_split()``: which heap positions hold a split,
* ``route(inputs)``: the heap position of the leaf each sample reaches in each
  tree by deterministic routing, ``(batch, num_trees)`` int32 (leading axes
  kept), the same as ``layer.to_forest().apply(layer.forest_features(inputs))``
  for inputs of shape ``(batch, features)``,
* ``num_leaves()``, ``num_splits()``, ``tree_depths()`` and ``depth()`` read
  from ``node_state``.

A family implements one hook for routing, ``_routing_parameters()``: the
split parameters of the hard-routing op ([`keras_trees.ops.hard_routing.hard_route`][keras_trees.ops.hard_routing.hard_route]).

Counts of perfect-tree families are methods (``num_leaves()``); the property
spelling of release 0.1.0 still works for one release through
`DeprecatedCount` (an ``int`` that warns when used as a number and
returns the plain value when called).
"""

import warnings

import keras
import numpy as np
from keras import ops

from keras_trees import topology
from keras_trees.layers._forest_layer import ForestLayer, numpy
from keras_trees.ops import hard_routing
from keras_trees.validation import batched, tensors
from keras_trees.validation import topology as topology_checks
from keras_trees.validation import variables as variable_checks


class CallableInt(int):
    """An ``int`` that can also be called: ``n() == n`` (a plain ``int``).

    For sizes that are an attribute of some layers and a method of others
    (``NonGreedyTree.depth`` is its constructor argument and, its tree being
    perfect, also what ``depth()`` returns)."""

    def __call__(self):
        return int.__int__(self)

    def __reduce__(self):  # pickles and deep-copies as a plain int
        return int, (int.__int__(self),)


class DeprecatedCount(CallableInt):
    """What a deprecated count property returns: call it (``layer.num_leaves()``,
    the new spelling, no warning); used as a number it still works and warns
    (``FutureWarning`` naming the new spelling)."""

    def __new__(cls, value, message):
        self = super().__new__(cls, value)
        self._message = message
        return self

    def _warn(self):
        warnings.warn(self._message, FutureWarning, stacklevel=3)


def _warning_method(name):
    method = getattr(int, name)

    def wrapped(self, *args):
        self._warn()
        return method(self, *args)

    wrapped.__name__ = name
    return wrapped


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
              "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__and__", "__rand__", "__or__", "__ror__",
              "__xor__", "__rxor__", "__neg__", "__pos__", "__abs__", "__invert__", "__int__", "__float__",
              "__index__", "__bool__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__format__",
              "__str__", "__round__", "__trunc__", "__floor__", "__ceil__", "__divmod__", "__rdivmod__"):
    setattr(DeprecatedCount, _name, _warning_method(_name))
DeprecatedCount.__hash__ = int.__hash__
del _name


def deprecated_count(name, value_of):
    """A property ``name`` of a layer whose value is ``value_of(layer)`` (an int),
    kept for the old spelling ``layer.<name>`` of the method ``layer.<name>()``."""

    def get(self):
        return DeprecatedCount(
            value_of(self),
            f"{type(self).__name__}.{name} is a method now: call {name}() "
            f"(the property spelling {name!r} will be removed in the next release)",
        )

    get.__doc__ = f"``{name}()``: see the class docs (the property spelling is deprecated)."
    return property(get)


def const(value):
    """An initializer returning a fixed array, broadcast to the variable's shape
    (the heap layers' topology, masks and drawn parameters)."""

    def init(shape, dtype=None):
        return ops.convert_to_tensor(np.array(np.broadcast_to(np.asarray(value), shape)), dtype=dtype)

    return init


_ROUTERS = {}


def _host_router():
    """Hard routing of NumPy arrays, compiled once per backend (``jax.jit`` on
    JAX, where op-by-op execution would compile every operation; the
    TensorFlow op and PyTorch run eagerly)."""
    backend = keras.backend.backend()
    if backend not in _ROUTERS:
        def route(x, w, b, is_split, kwargs):
            return hard_routing.hard_route(x, w, b, is_split, with_path_values=False, **kwargs)[0]

        if backend == "jax":
            import jax

            route = jax.jit(route)
        _ROUTERS[backend] = route
    return _ROUTERS[backend]


class HeapTreeLayer(ForestLayer, keras.layers.Layer):
    """Base class of the tree layers routed on the heap (see the module docs).

    Subclasses set ``num_trees`` (or inherit 1), ``max_depth``, the task
    (``num_classes`` or ``units``), in ``build`` ``feature_dim`` and the
    ``node_state`` variable, and implement ``_routing_parameters``.
    """

    num_trees = 1
    # Families that are one tree by construction report per-tree counts as ints.
    single_tree = False

    # ------------------------------------------------------------- sizes
    @property
    def is_classifier(self):
        return self.num_classes is not None

    @property
    def output_dim(self):
        return self.num_classes if self.is_classifier else self.units

    @property
    def num_internal(self):
        """Heap positions that can hold a split: ``2**max_depth - 1``."""
        return topology.num_internal(self.max_depth)

    @property
    def num_positions(self):
        """All heap positions: ``2**(max_depth + 1) - 1``."""
        return topology.num_positions(self.max_depth)

    # ---------------------------------------------------------- features
    def _feature_inputs(self, inputs, training=None):
        """Hook: what the splits read before flattening (default: the inputs)."""
        return inputs

    # Whether one sample's inputs are all axes after the batch axis of the
    # build shape (images, a feature model's inputs) instead of the last axis
    # (keras.layers.Dense, the default).
    _whole_sample = False

    def _record_input_shape(self, input_shape):
        """Called by ``build``: one sample's input shape (``input_shape[-1:]``,
        or ``input_shape[1:]`` for ``_whole_sample`` families) tells at every
        later call which axes are leading axes; the input spec asks for at
        least that rank and those dimensions."""
        sample = tuple(input_shape[1:]) if self._whole_sample else tuple(input_shape[-1:])
        self.input_sample_shape = sample
        self.input_sample_rank = len(sample)
        axes = {i - len(sample): int(d) for i, d in enumerate(sample) if d is not None}
        self.input_spec = keras.layers.InputSpec(min_ndim=len(sample) + 1, axes=axes)

    def _sample_rank(self, input_rank=None):
        """Trailing axes that hold one sample's inputs (fixed at build)."""
        rank = getattr(self, "input_sample_rank", None)
        if rank is not None:
            return rank
        if self._whole_sample and input_rank is not None:  # will be built on this shape
            return max(input_rank - 1, 1)
        return 1

    # Whether the trailing (sample) dimensions of ``x`` must be known when the
    # layer is called (False where a feature model reads the inputs).
    _known_sample_dims = True

    def _check_input_structure(self, inputs):
        """Static checks of ``x`` (strings, unknown rank or feature dimensions):
        a ``TypeError``/``ValueError`` naming ``x`` at once, also while
        ``tf.function`` traces (not a backend's cast or shape error)."""
        if isinstance(inputs, (dict, list, tuple)):
            return  # several inputs: a feature model reads them
        if isinstance(inputs, str) or (isinstance(inputs, np.ndarray) and tensors.is_text_dtype(inputs.dtype)) \
                or "string" in str(getattr(inputs, "dtype", "")):
            tensors.as_tensor(inputs, "x")  # raises the TypeError naming x
        shape = getattr(inputs, "shape", None)
        if shape is None:
            return
        if getattr(shape, "rank", 0) is None:
            raise ValueError(f"{self._label()}: x must have a known rank (inputs of shape "
                             f"(batch, ..., features)), got a tensor of unknown rank")
        shape = tuple(shape)
        rank = self._sample_rank(len(shape))
        if len(shape) < rank + 1:
            return  # the input spec says what rank is expected
        if self._known_sample_dims and any(d is None for d in shape[len(shape) - rank:]):
            raise ValueError(f"{self._label()}: x must have known feature dimensions (the last "
                             f"{'axis' if rank == 1 else f'{rank} axes'}), got shape {shape}")

    def _label(self):
        return f"{type(self).__name__} {self.name!r}"

    def __call__(self, *args, **kwargs):
        if args:
            self._check_input_structure(args[0])
        elif "inputs" in kwargs:
            self._check_input_structure(kwargs["inputs"])
        return super().__call__(*args, **kwargs)

    def _leading_shape(self, inputs):
        """The leading axes of ``inputs`` (all but one sample's feature axes):
        ``(batch,)`` for ``(batch, features)``, ``(2, 4)`` for ``(2, 4, features)``;
        None for several inputs (a feature model's: one batch axis)."""
        if isinstance(inputs, (dict, list, tuple)) or not hasattr(inputs, "shape"):
            return None
        rank = len(inputs.shape)
        return tuple(ops.shape(inputs)[: rank - self._sample_rank(rank)])

    @staticmethod
    def _with_leading(out, lead):
        """Per-row results ``(rows, ...)`` reshaped to ``lead + (...)``."""
        if lead is None or len(lead) == 1:
            return out
        return ops.reshape(out, (*lead, *out.shape[1:]))

    def _checked_parameters(self):
        """Hook: ``[(variable or tensor, name)]``, the floating parameters every
        computation reads; `features` checks them finite and
        ``node_state`` a valid topology (default: nothing checked)."""
        return []

    def _check_parameters(self):
        """Fails (naming the layer and the variable) unless the parameters of
        `_checked_parameters` are finite and ``node_state`` is a valid
        topology; eagerly a ``ValueError``, inside ``tf.function``/``jax.jit``
        the backend's runtime error with the same message."""
        checked = self._checked_parameters()
        for value, name in checked:
            variable_checks.finite(self, value, name)
        if checked:
            topology_checks.node_state(self.node_state, variable_checks.label(self, "node_state"))

    def _rows(self, inputs):
        """``inputs`` with their leading axes flattened into one batch axis (a
        feature model sees ``(rows, *sample_shape)``)."""
        if isinstance(inputs, (dict, list, tuple)) or not hasattr(inputs, "shape"):
            return inputs
        rank = len(inputs.shape)
        sample = self._sample_rank(rank)
        if rank == sample + 1:
            return inputs
        dims = [d if d is not None else ops.shape(inputs)[rank - sample + i]
                for i, d in enumerate(tuple(inputs.shape)[rank - sample:])]
        return ops.reshape(inputs, (-1, *dims))

    def features(self, inputs, training=None):
        """Split features ``(rows, feature_dim)``: the inputs (through
        ``_feature_inputs``) flattened per sample, in the variable dtype; rows
        are the samples of all leading axes (``(2, 4, q)`` gives 8 rows).

        Routing runs in the variable dtype (float32 under mixed precision):
        float16 split values overflow and bfloat16 ones are too coarse.

        Checks ``x`` (real, finite, known rank and feature dimensions) and the
        parameters (`_check_parameters`) on every path: eagerly, inside
        ``tf.function`` (everything computed from the features waits for the
        checks) and inside ``jax.jit``."""
        self._check_input_structure(inputs)
        hint = f"{self._label()} needs finite inputs"
        plain = getattr(self, "split_features", None) is None
        if not isinstance(inputs, (dict, list, tuple)):
            inputs = tensors.as_tensor(inputs, "x")
            if plain:
                inputs = tensors.floating(inputs, "x", self.variable_dtype)
            elif tensors.dtype_name(inputs).startswith("complex"):
                tensors.floating(inputs, "x")  # the TypeError naming x
            else:  # a feature model reads x in its own dtype
                tensors.finite(inputs, "x", hint)
        x = self._feature_inputs(self._rows(inputs), training=training)
        if not plain:
            x = tensors.floating(x, "the split features", self.variable_dtype)
        x = ops.reshape(x, (-1, self.feature_dim))

        def checks():
            self._check_parameters()
            if plain:
                tensors.finite(x, "x", hint)
            else:
                tensors.finite(x, "the split features (split_features output)",
                               "did the feature model diverge, or do its inputs hold NaN or Inf?")

        return batched.checked(checks, x)  # one check in compiled graphs; x waits for it

    def forest_features(self, inputs):
        """The rows the splits of `to_forest` read: `features` as NumPy."""
        return numpy(self.features(inputs, training=False))

    # ------------------------------------------------------------ routing
    def is_split(self):
        """``(num_trees, 2**max_depth - 1)`` booleans: which internal heap
        positions hold a split now (the ``is_split`` input of the hard-routing op)."""
        return hard_routing.split_mask(self.node_state)

    def _routing_parameters(self):
        """Hook: ``(split_weights, split_bias, kwargs)`` of
        [`keras_trees.ops.hard_routing.hard_route`][keras_trees.ops.hard_routing.hard_route] (``kwargs`` holds
        ``expert_weights`` and ``threshold`` for noisy-OR splits)."""
        raise NotImplementedError

    def _route_features(self, feats, parameters=None):
        """[`route`][keras_trees.topology.route] of rows that are already `features`."""
        w, b, kwargs = self._routing_parameters() if parameters is None else parameters
        return hard_routing.route_to_leaves(feats, w, b, self.node_state, **kwargs)

    def route(self, inputs):
        """``(batch, num_trees)`` int32 heap position of the leaf each sample
        reaches in each tree (deterministic routing; the same as
        ``to_forest().apply(forest_features(inputs))``). Leading axes are kept:
        inputs ``(2, 4, features)`` give ``(2, 4, num_trees)``."""
        node = self._route_features(self.features(inputs, training=False))
        return self._with_leading(node, self._leading_shape(inputs))

    def route_rows(self, feats, is_split=None, batch_size=4096):
        """[`route`][keras_trees.topology.route] of NumPy feature rows on the host, in batches:
        ``(rows, num_trees)`` int64. ``is_split`` ``(num_trees, 2**max_depth - 1)``
        routes as if those positions were the splits (growth routes through its
        candidate stumps); default `is_split`."""
        self._check_parameters()
        w, b, kwargs = self._routing_parameters()
        w, b, kwargs = numpy(w), numpy(b), {k: numpy(v) for k, v in kwargs.items()}
        mask = numpy(self.is_split()) if is_split is None else np.asarray(is_split, bool)
        route = _host_router()
        out = self._map_rows(lambda rows: route(rows, w, b, mask, kwargs),
                             np.asarray(feats).astype(w.dtype, copy=False), batch_size)
        return np.concatenate([np.zeros((0, mask.shape[0]), np.int64)] + out).astype(np.int64)

    @staticmethod
    def _map_rows(fn, x, batch_size):
        """``fn`` over the rows of ``x`` in batches: a list of NumPy results. On
        JAX every batch is padded to ``batch_size`` rows: one shape, so one
        compilation of ``fn`` per layer (greedy growth maps the rows of each
        level's nodes, a different number every level; padding to powers of
        two compiled the split values again for each, 0.26 s apiece)."""
        pad = keras.backend.backend() == "jax"
        out = []
        for start in range(0, len(x), batch_size):
            rows = x[start: start + batch_size]
            n = len(rows)
            size = batch_size
            if pad and n < size:
                rows = np.concatenate([rows, np.repeat(rows[:1], size - n, axis=0)])
            out.append(numpy(fn(rows))[:n])
        return out

    # ---------------------------------------------------------- topology
    def _state(self):
        return numpy(self.node_state)

    def _per_tree(self, values):
        return int(values[0]) if self.single_tree else values

    def num_leaves(self):
        """Leaves per tree: a ``(num_trees,)`` int array (``to_forest().num_leaves()``),
        a plain int for the single-tree families (``single_tree``)."""
        return self._per_tree(topology.num_leaves(self._state()))

    def num_splits(self):
        """Splits per tree, as [`num_leaves`][keras_trees.topology.num_leaves]."""
        return self._per_tree((self._state() == topology.SPLIT).sum(axis=1))

    def tree_depths(self):
        """Depth of each tree's deepest leaf: a ``(num_trees,)`` int array."""
        state = self._state()
        return np.array([topology.tree_depth(state, t) for t in range(state.shape[0])])

    def depth(self):
        """Depth of the deepest leaf of all trees (an int; 0 for root leaves)."""
        return int(self.tree_depths().max())

    def split_evaluations(self, inputs):
        """Mean number of split functions evaluated per sample at inference (all trees)."""
        node = numpy(self.route(inputs))
        return float(topology.position_depth(node.reshape(-1, node.shape[-1])).sum(axis=1).mean())


def __getattr__(name):
    if name == "HeapTreeMixin":  # the former sizes-only mixin
        warnings.warn("keras_trees.layers._heap.HeapTreeMixin is now the base class HeapTreeLayer",
                      FutureWarning, stacklevel=2)
        return HeapTreeLayer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
