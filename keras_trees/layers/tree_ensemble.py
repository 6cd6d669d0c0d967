"""The Tree Ensemble Layer (Hazimeh et al., ICML 2020)."""

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
from keras_trees.layers._rows import from_rows, to_rows
from keras_trees.layers._xla import XLACompatibility
from keras_trees.validation import batched, tensors, variables
from keras_trees.validation.layer_inputs import CheckedInputs, static_input
from keras_trees.validation.variables import CheckedLoading
from keras_trees._arrays import to_numpy

MAX_DEPTH = 24
_UNITS_MEANING = "raw outputs: logits for from_logits=True, or regression values"


@keras_trees_export("keras_trees.layers")
class TreeEnsembleLayer(CheckedLoading, CheckedInputs, XLACompatibility, FitChecks, ForestLayer, keras.layers.Layer):
    """An additive ensemble of soft decision trees with smooth-step routing.

    Each of ``num_trees`` perfect binary trees of depth ``max_depth`` routes a
    sample ``x`` right at internal node ``i`` with probability
    ``S(<w_i, x> + b_i)``, where ``S`` is the smooth-step function of width
    ``transition_width`` (the paper's ``gamma``, Eq. 4): a positive split value
    goes right, as in every keras-trees family. (The paper writes the same
    function as the probability of going *left*; the layer stores the negated
    ``w_i, b_i`` of that convention and negates them back when it calls
    [`keras_trees.ops.soft_tree_ensemble`][keras_trees.ops.soft_tree.soft_tree_ensemble], which follows the paper.) A tree
    outputs the expectation of its leaf vectors over those routing
    probabilities, and the layer outputs the sum of its trees (Eq. 1-3).
    Outside ``[-transition_width/2, transition_width/2]`` the smooth-step is
    exactly 0 or 1, so most samples reach only a few leaves; with the
    TensorFlow backend the layer runs compiled kernels that visit only the
    reachable nodes in the forward pass and only the fractional tree in the
    backward pass (Algorithms 1 and 2). Put ``BatchNormalization`` in front of
    the layer so split inputs stay centred and bounded, as the paper does.

    Weight layout (public, stable):

    * ``node_weights``: ``(num_trees, 2**max_depth - 1, input_dim)``, internal
      nodes in heap order: root ``0``, children of ``i`` are ``2*i + 1`` (left)
      and ``2*i + 2`` (right); a positive ``<w_i, x> + b_i`` goes right.
    * ``node_bias``: ``(num_trees, 2**max_depth - 1)``, same order (only when
      ``use_bias=True``; the paper's splits are ``<w_i, x>`` without bias).
    * ``leaf_weights``: ``(num_trees, 2**max_depth, units)``, leaves left to right.
    * ``gamma``: non-trainable scalar variable holding the current transition
      width (callbacks may ``assign`` it; the variable keeps the paper's name
      so that saved weight paths stay stable).

    Files saved by keras-trees 0.1.0, whose split values were the probability of
    going left, load to identical predictions: their ``node_weights`` and
    ``node_bias`` are negated on loading (the layer's config then carries
    ``right_if="positive"``). Weights-only files (``.weights.h5``) of 0.1.0 carry
    no config: load them into a layer and call [`flip_legacy_splits`][keras_trees.layers.tree_ensemble.TreeEnsembleLayer.flip_legacy_splits].

    Args:
        num_trees: number of trees ``m`` in the ensemble.
        max_depth: depth ``d`` of each perfect tree (``2**d`` leaves). Its
            deprecated name ``depth`` still works, with a warning.
        units: output dimension ``k``: raw outputs, logits for a classification
            loss with ``from_logits=True`` or regression targets; or
        num_classes: number of classes ``C`` (>= 2): the layer outputs class
            probabilities, the softmax of the summed leaf vectors (leaves of
            ``C`` values); train with ``SparseCategoricalCrossentropy()``,
            without ``from_logits``. Exactly one of ``units`` and
            ``num_classes``.
        transition_width: width of the smooth-step's soft zone (the paper's
            ``gamma``), > 0; bigger is softer. Split values beyond
            ``+-transition_width / 2`` route hard, so small widths give more
            hard routing (faster, sparser gradients); the paper tunes it in
            ``[1e-4, 1]``. It is a width, not a steepness, because the
            smooth-step has a hard zone: the width says directly which split
            values are routed softly, in the split values' own units. Its
            deprecated name ``gamma`` still works, with a warning.
        activation: ``"smooth_step"`` (default) or ``"logistic"``, the rescaled
            logistic ``sigmoid(6 t / transition_width)`` of the paper's
            comparison. The logistic never routes hard, so it always runs
            densely.
        use_bias: add a learned threshold ``b_i`` to every split.
        node_initializer, leaf_initializer, bias_initializer: Keras initializers.
        node_regularizer, leaf_regularizer, bias_regularizer: Keras regularizers
            (the paper tunes an L2 penalty on the node weights).
        node_constraint, leaf_constraint, bias_constraint: Keras constraints.

    Input shape: ``(..., input_dim)``. Output shape: ``(..., units)``.

    Example:

    >>> import numpy as np, keras
    >>> from keras_trees.layers import TreeEnsembleLayer
    >>> model = keras.Sequential([
    ...     keras.Input((8,)),
    ...     keras.layers.BatchNormalization(),
    ...     TreeEnsembleLayer(num_trees=10, max_depth=3, units=2, transition_width=1.0),
    ... ])
    >>> model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> x = np.random.rand(64, 8).astype("float32"); y = (x[:, 0] > 0.5).astype("int32")
    >>> _ = model.fit(x, y, epochs=1, verbose=0)
    >>> model.predict(x, verbose=0).shape
    (64, 2)
    """


    def __init__(
        self,
        num_trees,
        max_depth=None,
        units=None,
        transition_width=1.0,
        activation="smooth_step",
        use_bias=True,
        node_initializer=None,
        leaf_initializer=None,
        bias_initializer="zeros",
        node_regularizer=None,
        leaf_regularizer=None,
        bias_regularizer=None,
        node_constraint=None,
        leaf_constraint=None,
        bias_constraint=None,
        num_classes=None,
        **kwargs,
    ):
        owner = type(self).__name__
        max_depth = _deprecation.renamed_argument(owner, kwargs, "depth", "max_depth", max_depth)
        transition_width = _deprecation.renamed_argument(
            owner, kwargs, "gamma", "transition_width", transition_width, default=1.0
        )
        # Written by get_config (the routing side of the weights); 0.1.0 wrote none.
        if kwargs.pop("right_if", "positive") != "positive":
            raise ValueError(f"{owner}: right_if must be 'positive' (split values > 0 go right)")
        super().__init__(**kwargs)
        self.num_trees = _validation.positive_int("num_trees", num_trees)
        self.max_depth = _validation.positive_int("max_depth", max_depth, maximum=MAX_DEPTH)
        self.depth = self.max_depth  # the name of 0.1.0, read by older code
        self.num_classes, self.units = _validation.task(num_classes, units, units_meaning=_UNITS_MEANING)
        self.initial_transition_width = _validation.positive_float("transition_width", transition_width)
        # Set by from_config for files saved by 0.1.0 (split values were P(left)).
        self._legacy_left_splits = False
        tree_ops.routing.get_activation(activation)
        self.activation = activation
        self.use_bias = bool(use_bias)
        from keras_trees.initializers import SplitUniform

        self.node_initializer = keras.initializers.get(node_initializer or SplitUniform())
        self.leaf_initializer = keras.initializers.get(
            leaf_initializer or keras.initializers.RandomNormal(stddev=0.05)
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.node_regularizer = keras.regularizers.get(node_regularizer)
        self.leaf_regularizer = keras.regularizers.get(leaf_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.node_constraint = keras.constraints.get(node_constraint)
        self.leaf_constraint = keras.constraints.get(leaf_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    _units_are_logits = True  # FitChecks: units= outputs logits

    @property
    def output_dim(self):
        """Values per output (and per leaf): ``units`` or ``num_classes``."""
        return self.units if self.num_classes is None else self.num_classes

    @property
    def initial_gamma(self):
        """The name of ``initial_transition_width`` in 0.1.0."""
        return self.initial_transition_width

    @property
    def num_internal_nodes(self):
        return 2**self.depth - 1

    # ``num_leaves()``: leaves per tree, ``2**depth`` (``layer.num_leaves``
    # without the call is deprecated).
    num_leaves = deprecated_count("num_leaves", lambda self: 2**self.depth)

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                "TreeEnsembleLayer needs a known last input dimension, got input shape "
                f"{tuple(input_shape)}"
            )
        itemsize = 8 if keras.backend.standardize_dtype(self.variable_dtype) == "float64" else 4
        _validation.check_parameter_memory(
            self.num_trees * (self.num_internal_nodes * (input_dim + 1) + self.num_leaves() * self.output_dim),
            itemsize,
            f"TreeEnsembleLayer(num_trees={self.num_trees}, max_depth={self.max_depth}) over "
            f"{input_dim} inputs",
            "use a smaller max_depth or fewer trees.",
        )
        self.node_weights = self.add_weight(
            name="node_weights",
            autocast=False,
            shape=(self.num_trees, self.num_internal_nodes, input_dim),
            initializer=self.node_initializer,
            regularizer=self.node_regularizer,
            constraint=self.node_constraint,
        )
        if self.use_bias:
            self.node_bias = self.add_weight(
                name="node_bias",
            autocast=False,
                shape=(self.num_trees, self.num_internal_nodes),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        else:
            self.node_bias = None
        self.leaf_weights = self.add_weight(
            name="leaf_weights",
            autocast=False,
            shape=(self.num_trees, self.num_leaves(), self.output_dim),
            initializer=self.leaf_initializer,
            regularizer=self.leaf_regularizer,
            constraint=self.leaf_constraint,
        )
        self.gamma = self.add_weight(
            name="gamma",
            autocast=False,
            shape=(),
            initializer=keras.initializers.Constant(self.initial_transition_width),
            trainable=False,
        )
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})

    def _check_variables(self, x, leaves=False):
        """Fails (eagerly, in ``tf.function`` and under ``jax.jit``; in TensorFlow
        graphs on the compiled kernels the kernel's own check, naming the
        argument, see `keras_trees.validation.batched.kernels_check`) unless the
        split weights and biases are finite and the transition width is a
        finite number > 0; the message names the layer and the variable. The
        compiled kernels would otherwise route a NaN split one way and return
        finite outputs. The leaves are checked by the op (the kernel's
        one-pass scan, or the reference's check) and on loading; ``leaves``
        adds them for the methods whose ops do not read them (a layer with a
        NaN leaf fails every call the same way). Returns ``x``, computed after
        the checks in compiled graphs."""
        if not leaves and batched.kernels_check(x):
            return x  # the kernel checks x, the splits, the leaves and gamma itself
        checked = [self.node_weights] + ([self.node_bias] if self.node_bias is not None else [])
        checked += [self.leaf_weights] if leaves else []
        gamma = ops.convert_to_tensor(self.gamma)
        return batched.finite_variables(self, checked, more=[(
            ops.logical_and(ops.isfinite(gamma), gamma > 0),
            f"{variables.label(self, 'gamma')} must be a finite number > 0",
        )], output=x)

    def _left_splits(self):
        """``(weights, bias)`` in the convention of `keras_trees.ops` (the
        paper's): ``S(<w, x> + b)`` is the probability of going left, so the
        layer's right-going split values are negated."""
        bias = None if self.node_bias is None else ops.negative(self.node_bias)
        return ops.negative(self.node_weights), bias

    def flip_legacy_splits(self):
        """Negates ``node_weights`` and ``node_bias`` in place: converts weights
        of keras-trees 0.1.0 (split value = P(left)) loaded without their config
        (``load_weights`` of a ``.weights.h5`` file) to the current convention
        (split value > 0 goes right). ``.keras`` files need no call."""
        self.node_weights.assign(ops.negative(self.node_weights))
        if self.node_bias is not None:
            self.node_bias.assign(ops.negative(self.node_bias))

    def load_own_variables(self, store):
        super().load_own_variables(store)  # CheckedLoading: finite weights, or a clear error
        if self._legacy_left_splits:
            self.flip_legacy_splits()
            self._legacy_left_splits = False

    def _flatten(self, inputs):
        """Inputs as ``(batch, input_dim)`` in the variable dtype: under mixed
        precision the routing runs in float32 (a float16 smooth-step loses the
        small split margins that decide hard routing)."""
        static_input(inputs, "x", self)  # call() checks in __call__; the other methods here
        inputs = ops.cast(ops.convert_to_tensor(inputs), self.variable_dtype)
        return to_rows(inputs)

    def call(self, inputs, training=None):
        self._check_fit(training)
        x, lead = self._flatten(inputs)
        x = self._check_variables(x)  # x then depends on the checks (compiled graphs run them first)
        weights, bias = self._left_splits()
        out = tree_ops.soft_tree_ensemble(
            x,
            weights,
            bias,
            self.leaf_weights,
            self.gamma,
            activation=self.activation,
            training=bool(training),
        )
        if self.num_classes is not None:
            out = ops.softmax(out, axis=-1)
        return ops.cast(from_rows(out, lead, self.output_dim), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim)

    def leaf_probabilities(self, inputs):
        """``(batch, num_trees, 2**max_depth)`` probability of each sample reaching each leaf."""
        x, _ = self._flatten(inputs)
        tensors.finite(x, "x")
        x = self._check_variables(x, leaves=True)
        weights, bias = self._left_splits()
        return tree_ops.soft_tree_leaf_probabilities(x, weights, bias, self.gamma, self.activation)

    def mean_reachable_leaves(self, inputs):
        """Mean number of reachable leaves (``P(x -> l) > 0``) per sample and tree.

        This measures conditional computation (the paper's Figure 2): 1.0 means
        every sample follows a single root-to-leaf path in every tree.
        """
        x, _ = self._flatten(inputs)
        tensors.finite(x, "x")
        x = self._check_variables(x, leaves=True)
        weights, bias = self._left_splits()
        return float(
            to_numpy(
                tree_ops.mean_reachable_leaves(x, weights, bias, self.gamma, self.activation)
            )
        )

    def split_evaluations(self, inputs):
        """Mean number of split functions evaluated per sample over all trees by
        the conditional forward pass: the internal nodes with a reachable leaf below."""
        reach = numpy(self.leaf_probabilities(inputs)) > 0  # (batch, trees, leaves)
        visited = 0.0
        for level in range(self.depth):
            visited += reach.reshape(*reach.shape[:2], 2**level, -1).any(-1).sum(-1).mean(0).sum()
        return float(visited)

    def _forest(self):
        weights = numpy(self.node_weights)
        return Forest(
            family="tree_ensemble",
            node_state=topology.perfect(self.num_trees, self.depth),
            split_kind="linear",
            weights=weights,
            bias=numpy(self.node_bias) if self.use_bias else np.zeros(weights.shape[:2], weights.dtype),
            right_if="positive",
            leaves=heap_leaves(numpy(self.leaf_weights)),
            aggregation="sum",
            leaf_output="added to the output with the probability of reaching the leaf"
            + ("; the layer outputs the softmax of the sum (class probabilities)" if self.num_classes else ""),
            input_dim=weights.shape[-1],
            leaf_prediction=False,
            extra={"activation": self.activation, "transition_width": float(numpy(self.gamma)),
                   "right_probability": f"{self.activation}(value, transition_width)"},
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
                "transition_width": self.initial_transition_width,
                "activation": self.activation,
                "use_bias": self.use_bias,
                "node_initializer": ser(self.node_initializer),
                "leaf_initializer": ser(self.leaf_initializer),
                "bias_initializer": ser(self.bias_initializer),
                "node_regularizer": ser(self.node_regularizer),
                "leaf_regularizer": ser(self.leaf_regularizer),
                "bias_regularizer": ser(self.bias_regularizer),
                "node_constraint": ser(self.node_constraint),
                "leaf_constraint": ser(self.leaf_constraint),
                "bias_constraint": ser(self.bias_constraint),
                # Split values > 0 go right (0.1 wrote no key: split value = P(left)).
                "right_if": "positive",
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        legacy = "right_if" not in config
        config = _deprecation.renamed_config(config, {"depth": "max_depth", "gamma": "transition_width"})
        layer = cls(**config)
        layer._legacy_left_splits = legacy
        return layer
