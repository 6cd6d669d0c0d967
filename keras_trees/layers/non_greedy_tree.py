"""Non-greedy oblique decision trees (Norouzi, Collins, Johnson, Fleet & Kohli,
*Efficient Non-greedy Optimization of Decision Trees*, NIPS 2015)."""

import warnings

import keras
import numpy as np
from keras import ops

from keras_trees import _deprecation, streaming, topology
from keras_trees.api_export import keras_trees_export
from keras_trees.constraints import RowNorm
from keras_trees.forest import Forest, heap_leaves, node_sums
from keras_trees.layers import _validation
from keras_trees.layers._forest_layer import numpy
from keras_trees.layers._heap import CallableInt, HeapTreeLayer, const as _const, deprecated_count
from keras_trees.layers._random import check_seed, numpy_generator
from keras_trees.ops import loss_augmented
from keras_trees.layers._xla import XLACompatibility
from keras_trees.validation import batched, tensors, variables
from keras_trees.validation.layer_inputs import CheckedInputs, static_input
from keras_trees.validation.variables import CheckedLoading
from keras_trees._arrays import to_numpy

MAX_DEPTH = 20
INFERENCES = ("fast", "exact")
# Candidate leaf smoothings of ``initialize_from(..., leaf_smoothing="bound")``
# (pseudo-counts per class relative to 1/K; 1 was the fixed default).
LEAF_SMOOTHINGS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)


def _scale_loss_for_replicas(value):
    """Divides a per-replica mean loss by the number of replicas under a
    ``tf.distribute`` strategy, whose optimizer sums the replicas' gradients
    (as Keras' own losses do); a no-op on JAX and PyTorch."""
    if keras.backend.backend() != "tensorflow":
        return value
    import tensorflow as tf

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return value if replicas == 1 else value * ops.cast(1.0 / replicas, value.dtype)


@keras_trees_export("keras_trees.layers")
class NonGreedyTree(CheckedLoading, CheckedInputs, XLACompatibility, HeapTreeLayer, keras.Model):
    """A perfect oblique decision tree trained jointly by SGD on the convex-concave
    upper bound of its empirical loss.

    The tree has ``2**max_depth - 1`` split rows ``[w_i, b_i]`` (one trainable
    ``split_weights`` matrix of shape ``(2**max_depth - 1, p + 1)``, the bias in
    the last column, heap order of `keras_trees.topology`) and
    ``2**max_depth`` leaf parameter rows ``Theta`` (``leaf_values``,
    ``(2**max_depth, K)``; leaf ``j`` is heap position ``2**max_depth - 1 + j``).
    A sample goes right at split ``i`` iff ``w_i . x + b_i > 0``; prediction
    (``predict``, ``call``) follows one path through the compiled hard-routing
    op and returns
    ``softmax(Theta[leaf])`` (classification, log loss, Eq. 1-2) or
    ``Theta[leaf]`` (regression, squared loss, Eq. 3).

    Training (``fit``) uses Keras' own training step on every backend
    (TensorFlow, JAX, PyTorch; XLA on JAX): the objective is
    [`compute_loss`][keras_trees.layers.non_greedy_tree.NonGreedyTree.compute_loss]. For each mini-batch, loss-augmented inference (the
    compiled kernels on every backend: the ``KerasTrees>LossAugmentedInference``
    op, its XLA FFI call or its ``torch.library`` op; the ``keras.ops``
    reference where they are unavailable; not differentiated) finds the
    loss-augmented leaf ``f(g)`` of every sample (fast Hamming-ball search of
    Eq. 13 by default, ``inference="exact"`` for Eq. 10); the loss is the
    (sample-weighted) mean of the surrogate of Eq. 9 at those leaves, whose
    gradient is Algorithm 1's ``(g - h) x^T`` for the splits and the gradient
    of the loss at ``Theta[f(g)]`` for the leaves. The optimizer (the paper: SGD
    with momentum) takes the step and applies the
    [`keras_trees.constraints.RowNorm`][keras_trees.constraints.RowNorm] constraint, which projects every
    row back to ``||[w_i, b_i]|| <= nu`` (line 8; the bias is part of the row
    because the paper appends a constant to ``x``). ``sample_weight`` and
    ``class_weight`` of ``fit``/``evaluate`` weight the bound; distribution
    strategies (``tf.distribute``, ``keras.distribution``) and mixed precision
    work as for any Keras model (the bound and the routing are computed in the
    variable dtype, float32; predictions are returned in the compute dtype).
    Compile without ``loss``: the bound is the loss. Stable SGD (Eq. 14) is
    enabled by the [`keras_trees.callbacks.stable_sgd.StableSGD`][keras_trees.callbacks.stable_sgd.StableSGD]
    callback, which freezes the leaf assignments ``a(x)`` (routing by a
    snapshot ``assignment_weights`` of the splits) between rounds. Inside
    another model (e.g. behind preprocessing layers) the tree trains on its
    bound when the outer model's ``compute_loss`` returns
    ``tree.compute_loss(features, y, y_pred, sample_weight, training=training)``;
    ``StableSGD`` finds nested trees.

    Logged metrics: ``loss`` is the surrogate (the bound, Eq. 13/14 as trained;
    in ``evaluate`` the bound of Eq. 13 or 7), ``empirical_loss`` the loss of
    the tree's own predictions (Eq. 4, weighted mean), plus any compiled
    metrics (e.g. ``"accuracy"``) on the hard predictions.

    Initialization: random splits of norm ``nu`` and zero leaves, or from a
    greedy tree with [`initialize_from`][keras_trees.layers.non_greedy_tree.NonGreedyTree.initialize_from] (e.g. a scikit-learn CART tree
    through [`keras_trees.interop.sklearn.from_sklearn`][keras_trees.interop.sklearn.from_sklearn], the greedy
    oblique CO2 tree of [`keras_trees.layers.co2_tree`][keras_trees.layers._co2.co2_tree] (the paper's
    initialization), or a grown end-to-end tree's
    ``to_forest().tree(i)``); shallower trees
    are padded to the perfect tree by copying leaves down.

    Args:
        max_depth: tree depth ``d`` (the tree is perfect: every leaf is at this
            depth). Its deprecated name ``depth`` still works, with a warning.
        num_classes: classes: the tree outputs class probabilities (the
            softmax of the reached leaf's parameters; log loss); or
        units: number of raw outputs, here regression values (squared loss).
            Exactly one of the two.
        nu: the row-norm bound of Eq. 9 (the paper picks it on validation data
            from {0.1, 1, 4, 10, 43, 100}).
        inference: ``"fast"`` (Eq. 13, ``O(d^2 p)`` per sample) or ``"exact"``
            (Eq. 7/10, ``O(2^d p)``).
        seed: seed of the random initial splits (``None``: drawn from NumPy's
            global generator, so ``keras.utils.set_random_seed`` makes the
            tree reproducible).

    Example:

    >>> import numpy as np, keras
    >>> from sklearn.tree import DecisionTreeClassifier
    >>> from keras_trees.interop.sklearn import from_sklearn
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(400, 2)).astype("float32"); y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    >>> model = NonGreedyTree(max_depth=3, num_classes=2, nu=4.0)
    >>> smoothing = model.initialize_from(from_sklearn(DecisionTreeClassifier(max_depth=3).fit(x, y)))
    >>> model.compile(keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"])
    >>> _ = model.fit(x, y, batch_size=50, epochs=5, verbose=0)
    >>> model.predict(x, verbose=0).shape
    (400, 2)
    """

    single_tree = True

    def __init__(self, max_depth=6, num_classes=None, units=None, nu=1.0, inference="fast", seed=None,
                 **kwargs):
        max_depth = _deprecation.renamed_argument(
            type(self).__name__, kwargs, "depth", "max_depth", max_depth, default=6
        )
        super().__init__(**kwargs)
        self.depth = _validation.positive_int("max_depth", max_depth, maximum=MAX_DEPTH)
        self.num_classes, self.units = _validation.task(num_classes, units)
        self.nu = _validation.positive_float("nu", nu)
        if inference not in INFERENCES:
            raise ValueError(f"inference must be one of {INFERENCES}, got {inference!r}")
        self.inference = inference
        self.seed = check_seed(seed)
        self.empirical_loss_tracker = keras.metrics.Mean(name="empirical_loss")

    # ------------------------------------------------------------------ sizes
    @property
    def depth(self):
        """The tree's depth ``d``: the constructor argument, and (the tree being
        perfect) also what ``depth()`` returns, as for every heap layer."""
        return CallableInt(self._depth)

    @depth.setter
    def depth(self, value):
        self._depth = int(value)

    @property
    def max_depth(self):  # a perfect tree: its depth is its maximum depth
        return int(self.depth)

    @property
    def feature_dim(self):
        """The features the splits read (``input_dim``, known once built)."""
        return self.input_dim

    @property
    def loss_name(self):
        return "log" if self.is_classifier else "squared"

    # ``num_leaves()``: ``2**depth`` (``layer.num_leaves`` without the call is deprecated).
    num_leaves = deprecated_count("num_leaves", lambda self: self.num_internal + 1)

    # ------------------------------------------------------------------ dtypes
    @property
    def input_dtype(self):
        """Inputs are routed in the variable dtype (float32 under a mixed
        precision policy): float16/bfloat16 routing would move samples across
        splits. Predictions are cast to the compute dtype."""
        return self.variable_dtype

    # ------------------------------------------------------------------ build
    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 2 or input_shape[-1] is None:
            raise ValueError(
                "NonGreedyTree: x must have rank 2, shape (batch, features) with the number of features "
                f"known, got shape {input_shape} (flatten or reshape other inputs first)"
            )
        p = int(input_shape[-1])
        self.input_dim = p
        I, L, K = self.num_internal, self.num_leaves(), self.output_dim
        _validation.check_parameter_memory(
            3 * I * (p + 1) + L * K, 4, f"NonGreedyTree(max_depth={self.depth}) over {p} features",
            "use a smaller max_depth.",
        )
        rows = numpy_generator(self.seed).normal(size=(I, p + 1))
        rows[:, -1] *= 0.1
        rows *= self.nu / np.linalg.norm(rows, axis=1, keepdims=True)
        # autocast=False: under mixed precision the splits and leaves are read
        # in the variable dtype inside call() too (routing and the bound in float32).
        self.split_weights = self.add_weight(
            name="split_weights", shape=(I, p + 1), initializer=_const(rows.astype("float32")),
            constraint=RowNorm(self.nu), autocast=False,
        )
        self.leaf_values = self.add_weight(name="leaf_values", shape=(L, K), initializer="zeros", autocast=False)
        self.node_state = self.add_weight(
            name="node_state", shape=(1, topology.num_positions(self.depth)),
            initializer=_const(topology.perfect(1, self.depth)), dtype="int32", trainable=False,
        )
        self.assignment_weights = self.add_weight(
            name="assignment_weights", shape=(I, p + 1), initializer=_const(rows.astype("float32")),
            trainable=False, autocast=False,
        )
        self.stable = self.add_weight(name="stable", shape=(), initializer="zeros", dtype="int32", trainable=False)
        self.built = True

    # -------------------------------------------------------------- routing
    def _split(self, rows):
        return rows[:, : self.input_dim], rows[:, self.input_dim]

    def _inputs(self, x):
        """Checked inputs as `features` (builds the model on first use)."""
        x = ops.convert_to_tensor(static_input(x, "x", self))
        if not self.built:
            self.build(tuple(x.shape))
        if len(x.shape) != 2:
            raise ValueError(
                f"NonGreedyTree: x must have rank 2, shape (batch, {self.input_dim}), got shape "
                f"{tuple(x.shape)} (a single tree over (samples, features) rows: flatten or reshape "
                "other inputs first)"
            )
        if x.shape[1] != self.input_dim:
            raise ValueError(
                f"NonGreedyTree: x must have {self.input_dim} features, shape (batch, {self.input_dim}), "
                f"got shape {tuple(x.shape)}"
            )
        return self.features(x)

    def _check_variables(self, x, training=False):
        """Fails (eagerly, in ``tf.function`` and under ``jax.jit``) unless the
        splits, the leaves and (``training``: the frozen assignment splits of
        Stable SGD) are finite and ``node_state`` is the perfect tree of
        ``max_depth``; the messages name the tree and the variable. The
        compiled routing would otherwise send a NaN split one way and return
        finite predictions.

        ``node_state`` equal to the perfect tree is stricter than a valid
        topology (`keras_trees.validation.topology.node_state`, checked
        when a file is loaded): the leaf index is the position minus
        ``2**max_depth - 1``, so any other valid topology would index wrong
        leaves. One comparison per call instead of the topology rules."""
        checked = (self.split_weights, self.leaf_values) + ((self.assignment_weights,) if training else ())
        if batched.kernels_check(x):
            # In TensorFlow graphs the kernels check the splits they route by
            # (and, training, the leaves the loss-augmented search reads); the
            # frozen assignment splits reach a kernel as "split_weights", so
            # the layer names them itself.
            checked = (self.assignment_weights,) if training else (self.leaf_values,)
        state = ops.convert_to_tensor(self.node_state)
        perfect = ops.all(ops.equal(state, ops.convert_to_tensor(topology.perfect(1, self.depth), state.dtype)))
        return batched.finite_variables(self, checked, output=x, more=[(
            perfect,
            f"{variables.label(self, 'node_state')} must be the perfect tree of depth {int(self.depth)} "
            "(every leaf on the last level)",
        )])

    def load_own_variables(self, store):
        """Loads the weights (``CheckedLoading``: finite floats, a valid
        ``node_state``) and checks ``node_state`` is the perfect tree."""
        super().load_own_variables(store)
        state = np.asarray(to_numpy(self.node_state))
        if not np.array_equal(state, topology.perfect(1, self.depth)):
            raise ValueError(
                f"{variables.label(self, 'node_state')} loaded from the file is not the perfect tree "
                f"of depth {int(self.depth)} (the file is damaged or belongs to another layer)"
            )

    def _routing_parameters(self, rows=None, dtype=None):
        rows = ops.stop_gradient(ops.convert_to_tensor(self.split_weights if rows is None else rows))
        w, b = self._split(ops.cast(rows, dtype or self.variable_dtype))
        return w[None], b[None], {}

    def _leaf_index(self, x, rows=None):
        """``(batch,)`` leaf index (``0 .. 2**max_depth - 1``) of rows ``x`` that are `features`."""
        return self._route_features(x, self._routing_parameters(rows, x.dtype))[:, 0] - self.num_internal

    def route(self, x, rows=None, leaf_index=False):
        """``(batch, 1)`` int32 heap position of the leaf every sample reaches
        (hard-routing op), as for every heap layer; leaf ``j`` (left to right)
        is position ``2**max_depth - 1 + j``. ``rows``: split rows to route by
        instead of ``split_weights`` (e.g. ``assignment_weights``).

        ``leaf_index=True`` returns the former result, ``(batch,)`` leaf
        indices, with a ``FutureWarning``: use ``route(x)[:, 0] - (2**max_depth - 1)``."""
        x = self._check_variables(self._inputs(x))
        if leaf_index:
            warnings.warn(
                "NonGreedyTree.route(x, leaf_index=True) is deprecated: route(x) returns (batch, 1) heap "
                "positions like every heap layer; the leaf index is route(x)[:, 0] - (2**max_depth - 1)",
                FutureWarning, stacklevel=2,
            )
            return self._leaf_index(x, rows)
        return self._route_features(x, self._routing_parameters(rows, x.dtype))

    def leaf_output(self, leaf, dtype):
        """Prediction of the leaves ``leaf``: ``softmax(Theta[leaf])`` or ``Theta[leaf]``, computed in
        ``dtype``."""
        theta = ops.take(ops.cast(self.leaf_values, dtype), leaf, axis=0)
        return ops.softmax(theta, axis=-1) if self.is_classifier else theta

    def call(self, inputs, training=None):
        x = self._check_variables(self._inputs(inputs))
        return ops.cast(self.leaf_output(self._leaf_index(x), x.dtype), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_dim)

    # ------------------------------------------------------------- training
    def _labels(self, y, dtype):
        """Class ids ``(batch,)`` int32 or targets ``(batch, units)``. Class ids
        are checked before the cast (every path): whole numbers in
        ``[0, num_classes)``; fractional floats and int64 values beyond int32
        are refused, never truncated or wrapped. Strings: ``TypeError``."""
        if self.is_classifier:
            y = tensors.indices(y, "y (class labels)", upper=self.num_classes)
            return ops.reshape(y, (-1,))
        return ops.reshape(tensors.floating(y, "y (targets)", dtype), (-1, self.units))

    def _check_data(self, x, y):
        """Arrays given to ``fit``/``evaluate`` checked before Keras converts
        them (NumPy strings would fail with "Invalid dtype: str32", int64 labels
        wrap on JAX): features real numbers of rank 2, labels class ids in
        range (classification) or real numbers (regression). Datasets and
        tensors are checked when the step reads them."""
        if isinstance(x, (np.ndarray, list)):
            x = np.asarray(static_input(x, "x", self))
            if x.ndim != 2:
                raise ValueError(f"NonGreedyTree: x must have rank 2, shape (batch, features), got shape "
                                 f"{x.shape} (flatten or reshape other inputs first)")
        if isinstance(y, (np.ndarray, list)):
            if self.is_classifier:
                tensors.indices(np.asarray(y), "y (class labels)", upper=self.num_classes)
            else:
                static_input(y, "y (targets)", self)

    def fit(self, x=None, y=None, *args, **kwargs):
        self._check_data(x, y)
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        self._check_data(x, y)
        return super().evaluate(x, y, *args, **kwargs)

    def bound(self, x, y, g_leaf, assigned_leaf=None):
        """Per-sample surrogate (Eq. 9, or Eq. 14 with ``assigned_leaf``) at the
        loss-augmented leaves ``g_leaf``; differentiable in the parameters."""
        x = self._inputs(x)
        w, b = self._split(self.split_weights)
        return loss_augmented.surrogate(
            x, ops.cast(w, x.dtype), ops.cast(b, x.dtype), ops.cast(self.leaf_values, x.dtype),
            self._labels(y, x.dtype), g_leaf, self.loss_name, assigned_leaf=assigned_leaf,
        )

    def loss_augmented_inference(self, x, y):
        """``(g_leaf, h_leaf, score)`` of the current tree (compiled op; see
        [`keras_trees.ops.loss_augmented.loss_augmented_inference`][keras_trees.ops.loss_augmented.loss_augmented_inference])."""
        x = self._inputs(x)
        w, b = self._split(ops.stop_gradient(ops.convert_to_tensor(self.split_weights)))
        return loss_augmented.loss_augmented_inference(
            x, ops.cast(w, x.dtype), ops.cast(b, x.dtype),
            ops.cast(ops.stop_gradient(ops.convert_to_tensor(self.leaf_values)), x.dtype),
            self._labels(y, x.dtype), self.loss_name, fast=self.inference == "fast",
        )

    @staticmethod
    def _weighted_mean(values, sample_weight):
        """``sum(w * values) / batch`` (Keras' ``"sum_over_batch_size"``)."""
        if sample_weight is None:
            return ops.mean(values)
        sw = ops.reshape(ops.cast(sample_weight, values.dtype), (-1,))
        return ops.mean(values * sw)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The objective of Keras' training step: the (sample-weighted) mean bound.

        ``training=True``: the surrogate of Eq. 9 (Eq. 14 while
        [`StableSGD`][keras_trees.callbacks.stable_sgd.StableSGD] holds frozen
        assignments) at the loss-augmented leaves; its gradient is Algorithm 1's.
        ``training=False`` (``evaluate``): the bound of Eq. 13 (or Eq. 7). The
        leaf search is not differentiated. Also updates ``empirical_loss`` (the
        loss at the predicted leaves, Eq. 4). Computed in the variable dtype.
        """
        del y_pred  # the bound needs x and y; the prediction is the hard route
        if getattr(self, "_compile_loss", None) is not None:
            raise ValueError(
                "NonGreedyTree trains on its own surrogate (the bound of Eq. 9); compile it without `loss`"
            )
        if y is None:
            raise ValueError("NonGreedyTree needs targets `y` to compute its loss")
        x = self._check_variables(self._inputs(x), training=training)
        labels = self._labels(y, x.dtype)
        g_leaf, h_leaf, score = self.loss_augmented_inference(x, labels)
        if training:
            # Stable SGD: h is constrained to the frozen assignment a(x) (Eq. 14);
            # plain SGD uses a(x) = f(sgn(Wx)), for which the extra term is 0.
            frozen = self._leaf_index(x, self.assignment_weights)
            assigned = ops.where(ops.convert_to_tensor(self.stable) > 0, frozen, h_leaf)
            per_sample = self.bound(x, labels, g_leaf, assigned_leaf=assigned)
        else:
            per_sample = score
        value = self._weighted_mean(per_sample, sample_weight)
        theta = ops.stop_gradient(ops.cast(self.leaf_values, x.dtype))
        empirical = loss_augmented.selected_leaf_loss(theta, h_leaf, labels, self.loss_name)
        self.empirical_loss_tracker.update_state(
            empirical, sample_weight=None if sample_weight is None else ops.reshape(sample_weight, (-1,)))
        for extra in self.losses:  # add_loss / regularizers, if any
            value = value + ops.cast(extra, value.dtype)
        return _scale_loss_for_replicas(value)

    # ---------------------------------------------------------- stable SGD
    def update_assignments(self):
        """Freezes the current leaf assignments ``a(x)`` (Stable SGD, Eq. 14) and
        turns the assignment constraint on."""
        # A copy: on JAX, two variables holding one buffer cannot both be
        # donated to the compiled train step.
        self.assignment_weights.assign(ops.copy(self.split_weights))
        self.stable.assign(1)

    def release_assignments(self):
        """Back to plain SGD (``a(x) = f(sgn(Wx))``)."""
        self.stable.assign(0)

    # -------------------------------------------------------- initialization
    def initialize_from(self, tree, leaf_smoothing=1.0, scale_to_nu=True, x=None, y=None, sample_weight=None):
        """Sets the splits and leaves from a greedy tree (the paper's initialization).

        Args:
            tree: a one-tree [`keras_trees.forest.Forest`][keras_trees.forest.Forest] with linear or
                axis-aligned splits (e.g. from
                [`keras_trees.interop.sklearn.from_sklearn`][keras_trees.interop.sklearn.from_sklearn], or a grown
                end-to-end tree's ``layer.to_forest().tree(i)``) of depth
                ``<= max_depth``; it is padded to the perfect tree
                ([`pad_to_perfect`][keras_trees.forest.Forest.pad_to_perfect]). Its leaf
                values are class probabilities (classification) or outputs.
            leaf_smoothing: pseudo-count per class, relative to a leaf's share
                ``1/K``: classification leaves become
                ``log((p + s/K * eps) / (1 + s * eps))`` with ``eps = 1e-2``,
                so pure leaves keep finite log-probabilities. ``"bound"``
                (classification, needs ``x`` and ``y``): the value of
                `LEAF_SMOOTHINGS` whose leaves give the lowest mean bound
                (the training objective, Eq. 13 or 7) on ``x, y``. Near-pure
                greedy leaves are overconfident: the loss-augmented search then
                crosses into leaves whose loss for ``y`` is large, the bound is
                loose (letter, depth 8: 1.74 against a log loss of 0.68 with
                ``s = 1``) and SGD lowers the bound by blurring leaves and
                widening margins while the loss and accuracy fall;
                from the bound-minimizing leaves (1.10 against 0.89 there) SGD
                lowers the bound, the loss and the error together.
            scale_to_nu: rescale every non-zero row ``[w_i, b_i]`` to norm ``nu``
                (the tightest bound the constraint allows, Proposition 1);
                routing is unchanged. Otherwise rows are only projected.
            x, y, sample_weight: training data (features as the model reads
                them, class ids, optional weights) for ``leaf_smoothing="bound"``.

        Returns the leaf smoothing used.
        """
        if not isinstance(tree, Forest) or tree.num_trees != 1:
            raise ValueError(f"tree must be a one-tree keras_trees.forest.Forest, got {tree!r}")
        tree = tree.pad_to_perfect(self.depth)
        p = tree.input_dim
        if not self.built:
            self.build((None, p))
        if p != self.input_dim:
            raise ValueError(f"the tree has {p} features, the model expects {self.input_dim}")
        k = tree.output_dim
        if k != self.output_dim:
            raise ValueError(f"the tree has {k} outputs per leaf, the model has {self.output_dim}")
        rows = np.concatenate([tree.weights[0], tree.bias[0][:, None]], axis=1).astype(np.float64)
        norm = np.linalg.norm(rows, axis=1, keepdims=True)
        if scale_to_nu:
            scale = np.where(norm > 0, self.nu / np.maximum(norm, 1e-300), 1.0)
        else:
            scale = np.minimum(1.0, self.nu / np.maximum(norm, 1e-300))
        rows = rows * scale
        values = tree.leaves[0, self.num_internal:].astype(np.float64)
        dtype = self.split_weights.dtype
        self.split_weights.assign(rows.astype(dtype))
        self.assignment_weights.assign(rows.astype(dtype))

        def set_leaves(smoothing):
            leaves = values
            if self.is_classifier:
                eps = 1e-2 * float(smoothing)
                leaves = np.log((values + eps / k) / (1.0 + eps))
            self.leaf_values.assign(leaves.astype(self.leaf_values.dtype))

        if isinstance(leaf_smoothing, str):
            if leaf_smoothing != "bound":
                raise ValueError(f'leaf_smoothing must be a number >= 0 or "bound", got {leaf_smoothing!r}')
            if x is None or y is None:
                raise ValueError('leaf_smoothing="bound" needs the training data x and y')
            if not self.is_classifier:
                set_leaves(0.0)
                return 0.0
            scores = []
            for smoothing in LEAF_SMOOTHINGS:
                set_leaves(smoothing)
                scores.append(self.mean_bound(x, y, sample_weight))
            leaf_smoothing = LEAF_SMOOTHINGS[int(np.argmin(scores))]
        else:
            leaf_smoothing = float(leaf_smoothing)
            if not leaf_smoothing >= 0:
                raise ValueError(f'leaf_smoothing must be a number >= 0 or "bound", got {leaf_smoothing!r}')
        set_leaves(leaf_smoothing)
        return leaf_smoothing

    def mean_bound(self, x, y, sample_weight=None, batch_size=4096):
        """The (weighted) mean bound of Eq. 13 (``inference="fast"``) or Eq. 7
        over arrays ``x, y``, routed ``batch_size`` rows at a time (no training)."""
        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y)
        if len(y) != len(x):
            raise ValueError(f"y: expected {len(x)} labels (one per row of x), got {len(y)}")
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=np.float64).ravel()
            if len(sample_weight) != len(x) or not (np.isfinite(sample_weight).all() and (sample_weight >= 0).all()):
                raise ValueError(f"sample_weight: expected {len(x)} finite non-negative weights (one per row of x), "
                                 f"got shape {sample_weight.shape}")
        total = weight_sum = 0.0
        for start in range(0, len(x), batch_size):
            score = np.asarray(to_numpy(self.loss_augmented_inference(
                x[start:start + batch_size], y[start:start + batch_size])[2]), dtype=np.float64)
            w = np.ones(len(score)) if sample_weight is None else np.asarray(
                sample_weight[start:start + batch_size], dtype=np.float64)
            total += float(np.dot(w, score))
            weight_sum += float(w.sum())
        return total / max(weight_sum, 1e-300)

    def refit_leaves(self, x, y=None, leaf_smoothing=1.0, sample_weight=None, class_weight=None, batch_size=4096):
        """Closed-form leaves for the current splits: every leaf that receives
        training samples of positive weight gets their (smoothed) weighted log
        class frequencies (classification, the minimizer of the weighted log
        loss, smoothed as in [`initialize_from`][keras_trees.layers.non_greedy_tree.NonGreedyTree.initialize_from]) or their weighted mean
        target (regression); other leaves keep their values. Not part of the
        paper's Algorithm 1: an optional post-processing step.

        The per-leaf sums are accumulated batch by batch (the data never has
        to fit in memory) and, in a distributed run, summed over the workers
        ([`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum]; each worker reads its
        share of the data), so every replica sets the same leaves; every
        worker must call it.

        Args:
            x: training inputs ``(n, features)`` with ``y``, or a stream of
                ``(x, y)`` / ``(x, y, sample_weight)`` batches (a batched
                ``tf.data.Dataset``, a ``keras.utils.PyDataset``, a list of
                batches or a function returning a fresh iterable of them; see
                `keras_trees.streaming`), ``y`` None then.
            y: targets of array ``x``.
            leaf_smoothing: as in [`initialize_from`][keras_trees.layers.non_greedy_tree.NonGreedyTree.initialize_from].
            sample_weight: optional ``(n,)`` nonnegative weights of array
                ``x`` (as in ``fit``: integer weights equal repeated rows); a
                stream carries them as its batches' third element.
            class_weight: optional dict ``class -> weight`` (classification;
                classes not listed weigh 1, as in ``fit``); multiplies
                ``sample_weight``.
            batch_size: rows routed at a time for array ``x`` (a stream keeps
                its own batches).

        Returns the number of leaves refitted."""
        where = "refit_leaves"
        table = None
        if y is not None or streaming.is_array_like(x):
            if y is None:
                raise ValueError(f"{where}: x is an array, so y (the targets) is needed as well")
            data = streaming.stream(x, y, None, batch_size, name=where)
            y = data.y
            if self.is_classifier:
                y = _validation.class_labels(y, self.num_classes, where)
            weight = _validation.sample_weights(y, sample_weight, class_weight, self.num_classes, where)
            data = streaming.stream(data.x, y, weight, batch_size, name=where)
        else:
            data = streaming.stream(x, None, sample_weight, batch_size, name=where)
            if class_weight is not None:
                table = _validation.class_weight_table(class_weight, self.num_classes, where)
        width = self.num_classes if self.is_classifier else self.output_dim
        sums = np.zeros((self.num_leaves(), width))
        totals = np.zeros(self.num_leaves())
        for xb, yb, wb in data:
            leaf = numpy(self.route(xb))[:, 0].astype(np.int64) - self.num_internal
            n = leaf.shape[0]
            if len(yb) != n:
                raise ValueError(f"{where}: x has {n} samples but y has {len(yb)}")
            if not data.in_memory:
                if self.is_classifier:
                    yb = _validation.class_labels(yb, self.num_classes, where)
                wb = _validation.batch_weights(yb, wb, table, where)
            if self.is_classifier:
                sums += node_sums(leaf, np.eye(self.num_classes)[yb], self.num_leaves(), wb)
            else:
                sums += node_sums(leaf, np.asarray(yb, dtype=np.float64).reshape(n, -1), self.num_leaves(), wb)
            totals += np.bincount(leaf, weights=wb, minlength=self.num_leaves())
        sums, totals = streaming.all_reduce_sum([sums, totals])
        if not data.in_memory and not totals.sum() > 0:
            raise ValueError(f"{where}: the data holds no samples of positive weight (the stream is empty or "
                             "all sample weights, sample_weight times class_weight, are 0)")
        values = np.array(to_numpy(self.leaf_values), dtype=np.float64)
        filled = totals > 0
        new = sums / np.where(filled, totals, 1.0)[:, None]
        if self.is_classifier:
            eps = 1e-2 * float(leaf_smoothing)
            new = np.log((new + eps / self.num_classes) / (1.0 + eps))
        values[filled] = new[filled]
        self.leaf_values.assign(values.astype(self.leaf_values.dtype))
        return int(filled.sum())

    # ------------------------------------------------------------ statistics
    def active_leaves(self, x):
        """Number of leaves that receive at least one sample of ``x`` (Fig. 3).

        ``x``: inputs ``(n, features)``, or a stream of ``(x, y)`` /
        ``(x, y, sample_weight)`` batches (a batched ``tf.data.Dataset``, a
        ``keras.utils.PyDataset``, a list of batches or a function returning a
        fresh iterable of them; labels and weights unused): the samples per
        leaf are counted batch by batch and, in a distributed run, summed over
        the workers (each reads its share; every worker must call it), so
        every worker counts the leaves the whole data reaches."""
        from keras_trees.inspection.export import _is_stream

        if not _is_stream(x):
            return int(np.unique(numpy(self.route(x))).size)
        data = streaming.stream(x, name="active_leaves")
        counts = np.zeros(self.num_leaves())
        for xb, _, _ in data:
            if len(keras.tree.flatten(xb)[0]):
                leaf = numpy(self.route(xb))[:, 0].astype(np.int64) - self.num_internal
                counts += np.bincount(leaf, minlength=self.num_leaves())
        counts, = streaming.all_reduce_sum([counts])
        return int(np.count_nonzero(counts))

    def _forest(self):
        rows = numpy(self.split_weights)
        p = self.input_dim
        return Forest(
            family="non_greedy_tree",
            node_state=numpy(self.node_state),
            split_kind="linear",
            weights=rows[None, :, :p],
            bias=rows[None, :, p],
            leaves=heap_leaves(numpy(self.leaf_output(ops.arange(self.num_leaves()), self.variable_dtype))[None]),
            aggregation="mean",
            leaf_output="class distribution (softmax of the leaf parameters)" if self.is_classifier
            else "regression value",
            input_dim=p,
            num_classes=self.num_classes,
            extra={"nu": float(self.nu)},
        )

    def row_norms(self):
        return np.linalg.norm(np.asarray(to_numpy(self.split_weights)), axis=1)

    # ------------------------------------------------------------------ config
    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
            "max_depth": self.max_depth,
            "num_classes": self.num_classes,
            "units": self.units,
            "nu": self.nu,
            "inference": self.inference,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        config = _deprecation.renamed_config(config, {"depth": "max_depth"})
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(**config)
