"""Random hinge forests and ferns (Lay, Harrison, Schreiber, Dawer and Barbu, 2018)."""

import keras
import numpy as np
from keras import ops

from keras_trees import _deprecation, topology
from keras_trees import ops as tree_ops
from keras_trees.api_export import keras_trees_export
from keras_trees.forest import Forest, heap_leaves
from keras_trees.layers import _validation
from keras_trees.layers._fit_checks import FitChecks
from keras_trees.layers._forest_layer import ForestLayer, numpy
from keras_trees.layers._heap import deprecated_count
from keras_trees.layers._random import check_seed, numpy_generator
from keras_trees.layers._rows import from_rows, to_rows
from keras_trees.layers._xla import XLACompatibility
from keras_trees.validation import batched, tensors, variables
from keras_trees.validation.layer_inputs import CheckedInputs
from keras_trees.validation.variables import CheckedLoading
from keras_trees._arrays import to_numpy

MAX_DEPTH = 24
REDUCTIONS = ("none", "mean", "sum")


def random_feature_indices(num_trees, num_vertices, num_features, features_per_tree=None, seed=None):
    """Random feature index of every vertex, ``(num_trees, num_vertices)`` int32.

    ``features_per_tree=None`` draws every vertex's feature uniformly from all
    ``num_features`` inputs (Algorithm 1 of the paper). An integer ``k`` gives
    each tree its own random subset of ``k`` distinct inputs, spread over its
    vertices as evenly as possible in random order: a tree with at least ``k``
    vertices uses every one of its ``k`` features, and a fern of depth ``D`` with
    ``k >= D`` tests ``D`` different features.
    """
    rng = numpy_generator(seed)
    if features_per_tree is None:
        return rng.integers(0, num_features, size=(num_trees, num_vertices)).astype(np.int32)
    if features_per_tree > num_features:
        raise ValueError(
            f"features_per_tree={features_per_tree} is more than the {num_features} input "
            "features that exist"
        )
    out = np.empty((num_trees, num_vertices), dtype=np.int32)
    for m in range(num_trees):
        subset = rng.choice(num_features, size=features_per_tree, replace=False)
        out[m] = subset[rng.permutation(num_vertices) % features_per_tree]
    return out


class _HingeEnsemble(CheckedLoading, CheckedInputs, XLACompatibility, FitChecks, ForestLayer, keras.layers.Layer):
    """Shared implementation of HingeForest and HingeFern (see their docstrings)."""

    _fern = False
    _units_are_logits = True  # FitChecks: units= outputs logits

    def __init__(
        self,
        num_trees,
        max_depth=None,
        units=None,
        reduction=None,
        features_per_tree=None,
        threshold_initializer=None,
        leaf_initializer=None,
        threshold_regularizer=None,
        leaf_regularizer=None,
        threshold_constraint=None,
        leaf_constraint=None,
        seed=None,
        num_classes=None,
        **kwargs,
    ):
        max_depth = _deprecation.renamed_argument(type(self).__name__, kwargs, "depth", "max_depth", max_depth)
        super().__init__(**kwargs)
        self.num_trees = _validation.positive_int("num_trees", num_trees)
        self.max_depth = _validation.positive_int("max_depth", max_depth, maximum=MAX_DEPTH)
        self.depth = self.max_depth  # the name of 0.1, read by older code
        self.num_classes, self.units = _validation.task(
            num_classes, units, units_meaning="raw outputs: logits for from_logits=True, or regression values"
        )
        normalized = "none" if reduction is None else reduction
        if normalized not in REDUCTIONS:
            raise ValueError(
                f"reduction must be None, 'none', 'mean' or 'sum', got {reduction!r}"
            )
        self.reduction = normalized
        self.features_per_tree = (
            None
            if features_per_tree is None
            else _validation.positive_int("features_per_tree", features_per_tree)
        )
        self.seed = check_seed(seed)
        derived = (lambda i: None) if self.seed is None else (lambda i: self.seed + i)  # noqa: E731
        self.threshold_initializer = keras.initializers.get(
            threshold_initializer or keras.initializers.RandomUniform(-3.0, 3.0, seed=derived(1))
        )
        self.leaf_initializer = keras.initializers.get(
            leaf_initializer or keras.initializers.RandomNormal(0.0, 0.01, seed=derived(2))
        )
        self.threshold_regularizer = keras.regularizers.get(threshold_regularizer)
        self.leaf_regularizer = keras.regularizers.get(leaf_regularizer)
        self.threshold_constraint = keras.constraints.get(threshold_constraint)
        self.leaf_constraint = keras.constraints.get(leaf_constraint)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    @property
    def output_dim(self):
        """Values per output (and per leaf): ``units`` or ``num_classes``."""
        return self.units if self.num_classes is None else self.num_classes

    @property
    def num_vertices(self):
        """Decisions per tree: ``2**max_depth - 1`` for a tree, ``max_depth`` for a fern."""
        return self.depth if self._fern else 2**self.depth - 1

    # ``num_leaves()``: leaves per tree, ``2**depth`` (``layer.num_leaves``
    # without the call is deprecated).
    num_leaves = deprecated_count("num_leaves", lambda self: 2**self.depth)

    def build(self, input_shape):
        name = type(self).__name__
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                f"{name} needs a known last input dimension, got input shape {tuple(input_shape)}"
            )
        if self.features_per_tree is not None and self.features_per_tree > input_dim:
            raise ValueError(
                f"{name}: features_per_tree={self.features_per_tree} is more than the "
                f"{input_dim} input features that exist"
            )
        itemsize = 8 if keras.backend.standardize_dtype(self.variable_dtype) == "float64" else 4
        _validation.check_parameter_memory(
            self.num_trees * (self.num_vertices * 2 + self.num_leaves() * self.output_dim),
            itemsize,
            f"{name}(num_trees={self.num_trees}, max_depth={self.max_depth}, "
            + (f"units={self.units})" if self.num_classes is None else f"num_classes={self.num_classes})"),
            "use a smaller max_depth, fewer trees or fewer " + ("units." if self.num_classes is None else "classes."),
        )
        indices = random_feature_indices(
            self.num_trees, self.num_vertices, int(input_dim), self.features_per_tree, self.seed
        )
        # Fixed at random, never trained, saved with the model.
        self.feature_indices = self.add_weight(
            name="feature_indices",
            shape=(self.num_trees, self.num_vertices),
            dtype="int32",
            initializer=lambda shape, dtype=None: ops.convert_to_tensor(indices, dtype="int32"),
            trainable=False,
        )
        self.thresholds = self.add_weight(
            name="thresholds",
            autocast=False,
            shape=(self.num_trees, self.num_vertices),
            initializer=self.threshold_initializer,
            regularizer=self.threshold_regularizer,
            constraint=self.threshold_constraint,
        )
        self.leaf_weights = self.add_weight(
            name="leaf_weights",
            autocast=False,
            shape=(self.num_trees, self.num_leaves(), self.output_dim),
            initializer=self.leaf_initializer,
            regularizer=self.leaf_regularizer,
            constraint=self.leaf_constraint,
        )
        self.input_dim = int(input_dim)
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})

    def load_own_variables(self, store):
        """Loads the weights (``CheckedLoading``: floats must be finite) and
        checks the loaded ``feature_indices`` lie in ``[0, input_dim)``."""
        super().load_own_variables(store)
        tensors.indices(
            np.asarray(to_numpy(self.feature_indices)),
            f"{variables.label(self, 'feature_indices')} loaded from the file",
            upper=self.input_dim,
        )

    def _check_variables(self, x):
        """Fails (eagerly, in ``tf.function`` and under ``jax.jit``; in TensorFlow
        graphs on the compiled kernels the kernel's own check, naming the
        argument, see `keras_trees.validation.batched.kernels_check`) unless the
        thresholds are finite; the message names the layer and the variable.
        (The feature indices are checked by the ops, which read them.)

        The leaves are checked by the op (the kernel's one-pass scan, or the
        reference's check) and on loading. Returns ``x``, computed after the
        checks in compiled graphs."""
        if batched.kernels_check(x):
            return x  # the kernel checks x, the thresholds, the ids and the leaves itself
        return batched.finite_variables(self, [self.thresholds], output=x)

    def _flatten(self, inputs):
        # Margins and leaf sums in the variable dtype (float32 under mixed precision).
        inputs = ops.cast(ops.convert_to_tensor(inputs), self.variable_dtype)
        return to_rows(inputs)

    def call(self, inputs, training=None):
        self._check_fit(training)
        x, lead = self._flatten(inputs)
        x = self._check_variables(x)  # before the kernel, which checks thresholds in its own words
        out = tree_ops.hinge_forest(
            x, self.thresholds, self.feature_indices, self.leaf_weights, fern=self._fern
        )
        if self.reduction == "mean":
            out = ops.mean(out, axis=1)
        elif self.reduction == "sum":
            out = ops.sum(out, axis=1)
        if self.num_classes is not None:  # class probabilities (of every tree without a reduction)
            out = ops.softmax(out, axis=-1)
        tail = (self.num_trees, self.output_dim) if self.reduction == "none" else (self.output_dim,)
        return ops.cast(from_rows(out, lead, *tail), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        if self.reduction == "none":
            return (*input_shape[:-1], self.num_trees, self.output_dim)
        return (*input_shape[:-1], self.output_dim)

    def traverse(self, inputs):
        """Algorithm 3 for every sample and tree: a dict of ``(..., num_trees)`` tensors.

        ``leaf``: the leaf reached (int32, left to right); ``margin``: the signed
        margin ``r*`` of smallest magnitude on the path; ``vertex``: the deciding
        vertex ``v*`` (heap index for trees, level for ferns).
        """
        x, lead = self._flatten(inputs)
        x = self._check_variables(x)
        leaf, margin, vertex = tree_ops.hinge_forest_traversal(
            x, self.thresholds, self.feature_indices, fern=self._fern
        )
        return {
            "leaf": from_rows(leaf, lead, self.num_trees),
            "margin": from_rows(margin, lead, self.num_trees),
            "vertex": from_rows(vertex, lead, self.num_trees),
        }

    def _forest(self):
        feature, threshold = numpy(self.feature_indices), numpy(self.thresholds)
        if self._fern:  # one decision per level: every position of level k uses it
            level = topology.position_depth(np.arange(topology.num_internal(self.depth)))
            feature, threshold = feature[:, level], threshold[:, level]
        return Forest(
            family="hinge_fern" if self._fern else "hinge_forest",
            node_state=topology.perfect(self.num_trees, self.depth),
            split_kind="axis_aligned",
            feature=feature,
            threshold=threshold,
            leaves=heap_leaves(numpy(self.leaf_weights)),
            aggregation=self.reduction,
            leaf_output="multiplied by |r*|, the smallest margin |x[feature] - threshold| on the path"
            + ("; the layer outputs the softmax over classes (class probabilities)" if self.num_classes else ""),
            input_dim=self.input_dim,
            leaf_prediction=False,
        )

    def get_config(self):
        config = super().get_config()
        ser = keras.saving.serialize_keras_object
        config.update(
            {
                "num_trees": self.num_trees,
                "max_depth": self.max_depth,
                "units": self.units,
                "num_classes": self.num_classes,
                "reduction": self.reduction,
                "features_per_tree": self.features_per_tree,
                "threshold_initializer": ser(self.threshold_initializer),
                "leaf_initializer": ser(self.leaf_initializer),
                "threshold_regularizer": ser(self.threshold_regularizer),
                "leaf_regularizer": ser(self.leaf_regularizer),
                "threshold_constraint": ser(self.threshold_constraint),
                "leaf_constraint": ser(self.leaf_constraint),
                "seed": self.seed,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**_deprecation.renamed_config(config, {"depth": "max_depth"}))


_COMMON_ARGS = """
    Args:
        num_trees: number of {kind}s ``M``.
        max_depth: depth ``D`` (``2**D`` leaves per {kind}), 1 to 24. Its
            deprecated name ``depth`` still works, with a warning.
        units: size of each leaf's weight vector: raw outputs, logits for a
            classification loss with ``from_logits=True`` or regression targets; or
        num_classes: number of classes ``C`` (>= 2): leaves hold ``C`` values
            and the layer outputs class probabilities, the softmax over the
            last axis (of the aggregated output with a reduction, of every
            {kind}'s output without one); train with
            ``SparseCategoricalCrossentropy()``, without ``from_logits``.
            Exactly one of ``units`` and ``num_classes``.
        reduction: ``None``/``"none"`` returns every {kind}'s output,
            ``(..., num_trees, units)``; ``"sum"`` or ``"mean"`` aggregates over
            {kind}s to ``(..., units)``. The paper leaves aggregation to the user
            (its Letter/USPS/MNIST graphs sum the trees).
        features_per_tree: ``None`` (default, Algorithm 1): every vertex picks its
            input feature uniformly at random from all inputs. An integer ``k``:
            each {kind} picks ``k`` distinct inputs at random and spreads them
            over its vertices; must not exceed the number of inputs.
        threshold_initializer: default ``RandomUniform(-3, 3)`` (thresholds are in
            standard deviations of inputs normalized by
            ``HingeBatchNormalization``).
        leaf_initializer: default ``RandomNormal(0, 0.01)``.
        threshold_regularizer, leaf_regularizer: Keras regularizers.
        threshold_constraint, leaf_constraint: Keras constraints.
        seed: integer seed of the feature indices and default initializers, or
            None to draw them from the global random state (reproducible after
            ``keras.utils.set_random_seed``).
"""


@keras_trees_export("keras_trees.layers")
class HingeForest(_HingeEnsemble):
    __doc__ = (
        """A random hinge forest: ``num_trees`` perfect hinge trees of depth ``max_depth``.

    Each vertex ``v`` of each tree compares one input feature ``x[f_v]``, fixed at
    random when the layer is built, with a learned threshold ``t_v``; a sample goes
    right when ``r = x[f_v] - t_v > 0``. Tree ``m`` outputs its reached leaf's
    weight vector times the smallest margin on the path,
    ``w_leaf * min |r|`` (Eq. 10 and Algorithm 3 of Lay et al. 2018). Each sample
    touches one leaf per tree, so both passes cost ``O(max_depth + units)`` per
    sample and tree; gradients reach exactly one input feature, one threshold and
    one leaf per tree and sample (Eq. 11-12). With the TensorFlow backend the
    layer runs a multi-threaded custom op; other backends use ``keras.ops``.

    Put ``HingeBatchNormalization`` in front so inputs are in standard
    deviations, and a learnable feature layer (``Dense``, convolutions) in front
    of that, as in the paper's Figure 2. Train with an adaptive optimizer (the
    paper uses Adam or AdaGrad): gradients are very sparse.

    Weights (public, stable layout):

    * ``feature_indices``: ``(num_trees, 2**max_depth - 1)`` int32, non-trainable,
      heap order (root ``0``, children of ``v`` are ``2v + 1`` left and
      ``2v + 2`` right); saved with the model.
    * ``thresholds``: ``(num_trees, 2**max_depth - 1)``, same order.
    * ``leaf_weights``: ``(num_trees, 2**max_depth, units)``, leaves left to right.
"""
        + _COMMON_ARGS.format(kind="tree")
        + """
    Input shape: ``(..., input_dim)``. Output shape: ``(..., num_trees, units)``,
    or ``(..., units)`` with a reduction.

    Example:

    >>> import numpy as np, keras
    >>> from keras_trees.layers import HingeBatchNormalization, HingeForest
    >>> model = keras.Sequential([
    ...     keras.Input((8,)),
    ...     keras.layers.Dense(20, use_bias=False),   # learned "inner product" features
    ...     HingeBatchNormalization(),
    ...     HingeForest(num_trees=10, max_depth=3, units=2, reduction="sum", seed=0),
    ... ])
    >>> model.compile(keras.optimizers.Adam(0.005),
    ...               keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> x = np.random.rand(64, 8).astype("float32"); y = (x[:, 0] > 0.5).astype("int32")
    >>> _ = model.fit(x, y, epochs=1, verbose=0)
    >>> model.predict(x, verbose=0).shape
    (64, 2)
    """
    )

    _fern = False


@keras_trees_export("keras_trees.layers")
class HingeFern(_HingeEnsemble):
    __doc__ = (
        """Random hinge ferns: ``num_trees`` ferns of depth ``max_depth``.

    A fern is a hinge tree whose vertices on each level share one
    (feature, threshold) pair: ``max_depth`` decisions instead of
    ``2**max_depth - 1``, still ``2**max_depth`` leaves (Lay et al. 2018, Section 3). Level ``i`` sends a
    sample right when ``x[f_i] - t_i > 0``; the fern outputs the reached leaf's
    weights times the smallest ``|x[f_i] - t_i|`` over the levels. Same
    training behaviour, speed and usage as [`HingeForest`][keras_trees.layers.hinge_forest.HingeForest], with about
    half the parameters at ``units=1``.

    Weights (public, stable layout):

    * ``feature_indices``: ``(num_trees, max_depth)`` int32, non-trainable, saved
      with the model.
    * ``thresholds``: ``(num_trees, max_depth)``.
    * ``leaf_weights``: ``(num_trees, 2**max_depth, units)``, leaves left to right
      (the first level is the most significant bit of the leaf index).
"""
        + _COMMON_ARGS.format(kind="fern")
        + """
    Input shape: ``(..., input_dim)``. Output shape: ``(..., num_trees, units)``,
    or ``(..., units)`` with a reduction.

    Example:

    >>> import numpy as np, keras
    >>> from keras_trees.layers import HingeBatchNormalization, HingeFern
    >>> model = keras.Sequential([
    ...     keras.Input((5,)),
    ...     HingeBatchNormalization(),
    ...     HingeFern(num_trees=20, max_depth=4, units=1, reduction="mean", seed=0),
    ... ])
    >>> model.compile(keras.optimizers.Adam(0.01), "mse")
    >>> x = np.random.rand(128, 5).astype("float32"); y = x.sum(1, keepdims=True)
    >>> _ = model.fit(x, y, epochs=1, verbose=0)
    >>> model.predict(x, verbose=0).shape
    (128, 1)
    """
    )

    _fern = True
