"""Shared machinery of EndToEndTree and EndToEndForest (Hehn et al., IJCV 2019).

Not public: use [`keras_trees.layers.EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree] or
[`keras_trees.layers.EndToEndForest`][keras_trees.layers.end_to_end_forest.EndToEndForest].
"""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_trees import _deprecation, topology
from keras_trees.forest import Forest
from keras_trees.layers import _validation
from keras_trees.layers import _fit_checks
from keras_trees.layers import _screening
from keras_trees.layers._forest_layer import numpy
from keras_trees.layers._heap import HeapTreeLayer, const as _const
# Growth phases stored in the layer (``growth_phase``, written by GreedyLevelGrowth).
from keras_trees.layers._level_growth import PHASE_DONE, PHASE_FINETUNING, PHASE_GROWING, PHASE_IDLE  # noqa: F401
from keras_trees.layers._random import numpy_generator
from keras_trees.ops import _library, path_probabilities, pruned_routing
from keras_trees.layers._xla import XLACompatibility
from keras_trees.validation import arguments, tensors
from keras_trees.validation.variables import CheckedLoading, check_loaded
from keras_trees._arrays import to_numpy

# Heaps of this depth hold 2**25 - 1 positions per tree: already far beyond memory
# for realistic inputs; the memory check refuses much earlier.
MAX_DEPTH = 24
TOPOLOGIES = ("perfect", "stump", "leaf")
SPLIT_TYPES = ("oblique", "axis_aligned", "per_split")
ROUTINGS = ("hard", "soft")
LEAF_LEARNING = ("auto", "em", "gradient")
# Which leaf table the model reads (the layer's ``leaf_mode`` variable).
LEAVES_EM, LEAVES_GRADIENT = 0, 1
# Smallest probability written into the leaf logits (log of 0 would be -inf).
_MIN_PROBABILITY = 1e-30


class EndToEndTreesBase(CheckedLoading, XLACompatibility, _fit_checks.FitChecks, HeapTreeLayer):
    """Probabilistic-at-train-time, deterministic-at-test-time trees (see subclasses)."""

    # ``candidate_gain`` holds -inf (no gain yet) by design: loading checks it
    # for NaN only (``CheckedLoading``).
    non_finite_variables = ("candidate_gain",)

    def __init__(
        self,
        num_trees=1,
        max_depth=6,
        num_classes=None,
        units=None,
        initial_topology="perfect",
        split_type="oblique",
        features_per_split=None,
        patch_size=None,
        split_features=None,
        steepness=1.0,
        inference_routing="hard",
        split_regularizer=None,
        leaf_smoothing=1e-6,
        leaf_learning="auto",
        prune_threshold=pruned_routing.DEFAULT_PRUNE_THRESHOLD,
        split_screening=None,
        seed=None,
        **kwargs,
    ):
        steepness = _deprecation.renamed_argument(
            type(self).__name__, kwargs, "gamma", "steepness", steepness, default=1.0
        )
        super().__init__(**kwargs)
        self.num_trees = _validation.positive_int("num_trees", num_trees)
        self.max_depth = _validation.positive_int("max_depth", max_depth, maximum=MAX_DEPTH)
        self.num_classes, self.units = _validation.task(num_classes, units)
        if initial_topology not in TOPOLOGIES:
            raise ValueError(f"initial_topology must be one of {TOPOLOGIES}, got {initial_topology!r}")
        self.initial_topology = initial_topology
        if split_type not in SPLIT_TYPES:
            raise ValueError(f"split_type must be one of {SPLIT_TYPES}, got {split_type!r}")
        self.split_type = split_type
        if features_per_split is not None:
            features_per_split = _validation.positive_int("features_per_split", features_per_split)
        self.features_per_split = features_per_split
        if patch_size is not None:
            if isinstance(patch_size, int):
                patch_size = (patch_size, patch_size)
            patch_size = tuple(_validation.positive_int("patch_size", int(v)) for v in patch_size)
            if len(patch_size) != 2:
                raise ValueError(f"patch_size must be an int or (height, width), got {patch_size}")
            if features_per_split is not None or split_type != "oblique":
                raise ValueError("patch_size excludes features_per_split and split_type='axis_aligned'/'per_split'")
        self.patch_size = patch_size
        if split_features is not None and not isinstance(split_features, keras.layers.Layer):
            raise TypeError(
                f"split_features must be a Keras layer or model, got {type(split_features).__name__}"
            )
        self.split_features = split_features
        if split_type == "per_split" and (split_features is None or features_per_split is not None):
            raise ValueError(
                "split_type='per_split' needs split_features with one output per split (see "
                "keras_trees.layers.per_split_features) and excludes features_per_split"
            )
        steepness = float(steepness)
        if not (math.isfinite(steepness) and steepness > 0):
            raise ValueError(f"steepness must be a finite number > 0, got {steepness}")
        self.initial_steepness = steepness
        if inference_routing not in ROUTINGS:
            raise ValueError(f"inference_routing must be one of {ROUTINGS}, got {inference_routing!r}")
        self.inference_routing = inference_routing
        self.split_regularizer = keras.regularizers.get(split_regularizer)
        self.leaf_smoothing = float(leaf_smoothing)
        if not (self.leaf_smoothing >= 0):
            raise ValueError(f"leaf_smoothing must be >= 0, got {leaf_smoothing}")
        if leaf_learning not in LEAF_LEARNING:
            raise ValueError(f"leaf_learning must be one of {LEAF_LEARNING}, got {leaf_learning!r}")
        if leaf_learning == "em" and self.num_classes is None:
            raise ValueError("leaf_learning='em' needs a classification layer (num_classes=...); "
                             "regression leaves are trained by the optimizer")
        self.leaf_learning = leaf_learning
        self.prune_threshold = arguments.prune_threshold(prune_threshold)
        if split_screening is not None:
            if isinstance(split_screening, bool) or not isinstance(split_screening, numbers.Real) or not (
                    0 < split_screening <= 1):
                raise ValueError(f"split_screening must be None or a number in (0, 1], got {split_screening!r}")
            if split_type == "per_split":
                raise ValueError("split_screening excludes split_type='per_split' (each split reads one output)")
            split_screening = float(split_screening)
        self.split_screening = split_screening
        self.seed = seed
        # seed=None follows keras.utils.set_random_seed (NumPy's global generator).
        self._rng = numpy_generator(seed)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    @property
    def initial_gamma(self):
        """The name of ``initial_steepness`` in 0.1.0 (the ``gamma`` variable keeps
        its name: it holds each split's current steepness)."""
        return self.initial_steepness

    # ------------------------------------------------------------------ build
    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if self.split_features is not None:
            self.split_features.build(input_shape)
            feat_shape = tuple(self.split_features.compute_output_shape(input_shape))
        else:
            feat_shape = input_shape
        if any(d is None for d in feat_shape[1:]):
            raise ValueError(
                f"{type(self).__name__} needs known feature dimensions, got shape {feat_shape}"
            )
        self.feature_shape = tuple(int(d) for d in feat_shape[1:])
        q = int(np.prod(self.feature_shape))
        self.feature_dim = q
        if self.features_per_split is not None and self.features_per_split > q:
            raise ValueError(f"features_per_split={self.features_per_split} exceeds the {q} input features")
        if self.split_type == "per_split" and q != self.num_trees * self.num_internal:
            raise ValueError(
                f"split_type='per_split' needs split_features with num_trees * (2**max_depth - 1) = "
                f"{self.num_trees * self.num_internal} outputs (one per split), got {q}"
            )
        if self.patch_size is not None:
            if len(self.feature_shape) not in (2, 3):
                raise ValueError(
                    "patch_size needs image-shaped inputs (height, width[, channels]), got feature "
                    f"shape {self.feature_shape}"
                )
            if any(p > s for p, s in zip(self.patch_size, self.feature_shape[:2])):
                raise ValueError(f"patch_size {self.patch_size} exceeds the image size {self.feature_shape[:2]}")
        itemsize = 8 if keras.backend.standardize_dtype(self.variable_dtype) == "float64" else 4
        T, I, N = self.num_trees, self.num_internal, self.num_positions
        _validation.check_parameter_memory(
            T * (2 * I * (q + 2) + N * (self.output_dim + 1)),
            itemsize,
            f"{type(self).__name__}(num_trees={T}, max_depth={self.max_depth}) over {q} features",
            "use a smaller max_depth or fewer trees.",
        )
        mask = self.draw_feature_mask((T, I))
        kernel, bias = self.draw_splits(mask)
        # split_regularizer is applied in call() to the splits being trained only:
        # committed (frozen) splits of a growing tree must not move.
        # Float variables are never autocast: routing is computed in the variable
        # dtype (float32) under mixed precision (see ``call``).
        float_var = dict(autocast=False)
        self.split_kernel = self.add_weight(
            name="split_kernel", shape=(T, I, q), initializer=_const(kernel), **float_var
        )
        self.split_bias = self.add_weight(name="split_bias", shape=(T, I), initializer=_const(bias), **float_var)
        self.feature_mask = self.add_weight(
            name="feature_mask", shape=(T, I, q), initializer=_const(mask), trainable=False, **float_var
        )
        self.gamma = self.add_weight(
            name="gamma", shape=(T, I), initializer=keras.initializers.Constant(self.initial_steepness),
            trainable=False, **float_var
        )
        if self.initial_topology == "perfect":
            state = topology.perfect(T, self.max_depth)
        elif self.initial_topology == "stump":
            state = topology.stump(T, self.max_depth)
        else:
            state = topology.root_leaf(T, self.max_depth)
        int_var = dict(dtype="int32", trainable=False)
        self.node_state = self.add_weight(name="node_state", shape=(T, N), initializer=_const(state), **int_var)
        self.candidate = self.add_weight(name="candidate", shape=(T, I), initializer="zeros", **int_var)
        self.node_epochs = self.add_weight(name="node_epochs", shape=(T, I), initializer="zeros", **int_var)
        self.attempts = self.add_weight(name="attempts", shape=(T, I), initializer="zeros", **int_var)
        self.candidate_gain = self.add_weight(
            name="candidate_gain", shape=(T, I), initializer=keras.initializers.Constant(-np.inf),
            trainable=False, **float_var
        )
        self.growing = self.add_weight(name="growing", shape=(), initializer="zeros", **int_var)
        self.growth_phase = self.add_weight(name="growth_phase", shape=(), initializer="zeros", **int_var)
        self.phase_epoch = self.add_weight(name="phase_epoch", shape=(), initializer="zeros", **int_var)
        K = self.output_dim
        if self.is_classifier:
            # Two pre-allocated leaf tables, selected by ``leaf_mode`` (callbacks
            # switch it with assign; no variable is ever added while training):
            # ``leaf_table`` holds the class distributions the EM M-step (Eq. 13)
            # writes, ``leaf_logits`` the trainable logits whose softmax is the
            # gradient-trained distribution. Writes through ``set_leaf_values``
            # keep both consistent.
            self.leaf_table = self.add_weight(
                name="leaf_values", shape=(T, N, K), initializer=keras.initializers.Constant(1.0 / K),
                trainable=False, **float_var
            )
            self.leaf_logits = self.add_weight(
                name="leaf_logits", shape=(T, N, K), initializer="zeros",
                trainable=self.leaf_learning != "em", **float_var
            )
            mode = LEAVES_EM if self.leaf_learning == "em" else LEAVES_GRADIENT
            self.leaf_mode = self.add_weight(
                name="leaf_mode", shape=(), initializer=keras.initializers.Constant(mode), **int_var
            )
        else:
            self.leaf_table = self.add_weight(
                name="leaf_values", shape=(T, N, K), initializer="zeros", **float_var
            )
        self._record_input_shape(input_shape)

    # One sample is everything after the batch axis of the build shape: a
    # feature vector, or an image (patch_size, SpatialLaplacian, a split_features
    # CNN), flattened for the splits. Axes in front of it are kept in the outputs.
    _whole_sample = True

    @property
    def _known_sample_dims(self):
        # A feature model may take inputs of unknown size (e.g. a CNN with
        # global pooling); the trees need its outputs' size, checked in build.
        return self.split_features is None

    def _checked_parameters(self):
        checked = [(self.split_kernel, "split_kernel"), (self.split_bias, "split_bias"), (self.gamma, "gamma"),
                   (self.leaf_table, "leaf_values")]
        if self.is_classifier:
            checked.append((self.leaf_logits, "leaf_logits"))
        return checked

    # ------------------------------------------------- random split parameters
    def draw_feature_mask(self, shape, position=None):
        """Random feature subsets (Section 2.7) as 0/1 masks of shape ``shape + (q,)``.

        With ``split_type="per_split"`` the mask is fixed: split ``n`` of tree ``t``
        reads feature ``t * (2**max_depth - 1) + n`` only. ``shape`` is then the
        full ``(num_trees, num_internal)`` or, with ``position=(t, n)``, ``(1,)``.
        """
        q = self.feature_dim
        mask = np.zeros(tuple(shape) + (q,), dtype=np.float32)
        flat = mask.reshape(-1, q)
        if self.split_type == "per_split":
            if position is None:
                own = np.arange(flat.shape[0])
            else:
                own = np.array([position[0] * self.num_internal + position[1]])
            flat[np.arange(flat.shape[0]), own] = 1.0
        elif self.split_type == "axis_aligned":
            flat[np.arange(flat.shape[0]), self._rng.integers(0, q, flat.shape[0])] = 1.0
        elif self.features_per_split is not None:
            for row in flat:
                row[self._rng.choice(q, self.features_per_split, replace=False)] = 1.0
        elif self.patch_size is not None:
            h, w = self.feature_shape[:2]
            ph, pw = self.patch_size
            img = flat.reshape(flat.shape[0], h, w, -1)
            for row in img:
                r, c = self._rng.integers(0, h - ph + 1), self._rng.integers(0, w - pw + 1)
                row[r: r + ph, c: c + pw, :] = 1.0
        else:
            flat[:] = 1.0
        return mask

    def draw_splits(self, mask, center=None):
        """Split directions uniform on the unit sphere of each feature subset.

        The bias is small and random (as in the authors' code) or, when
        ``center`` (the mean of the samples a new stump will see) is given,
        ``-<w, center>`` so the initial hyperplane cuts through that data.
        """
        direction = self._rng.normal(size=mask.shape).astype(np.float32) * mask
        norm = np.linalg.norm(direction, axis=-1, keepdims=True)
        direction = direction / np.maximum(norm, 1e-12)
        active = np.maximum(mask.sum(-1), 1.0)
        if center is None:
            limit = np.sqrt(3.0 / active)
            bias = self._rng.uniform(-1, 1, size=mask.shape[:-1]) * limit
        else:
            bias = -np.sum(direction * center, axis=-1)
        return direction.astype(np.float32), bias.astype(np.float32)

    # ------------------------------------------------------------------ call
    def _feature_inputs(self, inputs, training=None):
        """The splits read the extractor's output (if any); `features`
        flattens it to ``(batch, q)``."""
        if self.split_features is not None:
            return self.split_features(inputs, training=training)
        return inputs

    @property
    def input_dtype(self):
        # Inputs are not cast to a (mixed) compute dtype on the way in: the splits
        # read them in the variable dtype (a split feature model casts for itself).
        return self.variable_dtype

    def effective_kernel(self):
        return self.split_kernel * ops.cast(self.feature_mask, self.split_kernel.dtype)

    def trained_kernel(self):
        """Effective kernels of the splits the optimizer trains now (others zeroed):
        candidate stumps while growing, every split otherwise."""
        state = self.node_state[:, : self.num_internal]
        candidate = ops.logical_and(ops.equal(state, topology.LEAF), ops.equal(self.candidate, 1))
        trained = ops.where(self.growing > 0, candidate, ops.equal(state, topology.SPLIT))
        return self.effective_kernel() * ops.cast(trained, self.split_kernel.dtype)[..., None]

    # ---------------------------------------------------------------- leaves
    @property
    def leaf_values(self):
        """Leaf outputs ``(num_trees, 2**(D+1) - 1, K)`` the model uses.

        Classification: class distributions, read from the EM table
        (``leaf_table``) or the softmax of the trainable ``leaf_logits``,
        whichever ``leaf_mode`` selects (a tensor; write with
        `set_leaf_values`). Regression: the trainable ``leaf_table``
        variable itself.
        """
        return self._leaves()

    def _leaves(self):
        if not self.is_classifier:
            return self.leaf_table
        return ops.where(
            ops.equal(ops.convert_to_tensor(self.leaf_mode), LEAVES_GRADIENT),
            ops.softmax(ops.convert_to_tensor(self.leaf_logits), axis=-1),
            ops.convert_to_tensor(self.leaf_table),
        )

    def _flat_leaves(self, dtype):
        return ops.cast(ops.reshape(self._leaves(), (self.num_trees * self.num_positions, -1)), dtype)

    def leaves_numpy(self):
        """The leaf outputs as a float64 NumPy array."""
        return np.array(to_numpy(ops.stop_gradient(self._leaves())), dtype=np.float64)

    def set_leaf_values(self, values, mask=None):
        """Writes leaf outputs (class distributions or regression values).

        ``mask`` ``(num_trees, positions)`` limits the write to some positions.
        For classifiers both leaf tables are written (the distributions and their
        logarithms as logits), so the model predicts them whichever table
        ``leaf_mode`` selects.
        """
        values = np.asarray(values, dtype=np.float64).reshape(tuple(self.leaf_table.shape))
        if mask is not None:
            mask = np.asarray(mask, bool).reshape(values.shape[:2])
            values = np.where(mask[..., None], values, self.leaves_numpy())
        self.leaf_table.assign(values.astype(self.leaf_table.dtype))
        if self.is_classifier:
            logits = np.log(np.maximum(values, _MIN_PROBABILITY))
            self.leaf_logits.assign(logits.astype(self.leaf_logits.dtype))

    def use_em_leaves(self):
        """Starts EM leaf learning: the model reads the EM table, which takes over
        the current leaves (also those the optimizer learnt). Called by
        [`EMLeafUpdate`][keras_trees.callbacks.em_leaf_update.EMLeafUpdate] when training begins."""
        if not self.is_classifier or self.leaf_learning == "gradient":
            raise ValueError(
                f"{self.name}: EM leaf updates need a classification layer with leaf_learning "
                f"'auto' or 'em', got {'units=' + str(self.units) if not self.is_classifier else self.leaf_learning!r}"
            )
        self.set_leaf_values(self.leaves_numpy())
        self.leaf_mode.assign(LEAVES_EM)
        self._em_updates = True  # a Python flag (no variable): read by the fit check below

    def end_em_leaves(self):
        """Ends EM leaf learning: ``leaf_learning="auto"`` layers go back to
        gradient-trained leaves, starting from the EM distributions."""
        self._em_updates = False
        if self.is_classifier and self.leaf_learning == "auto":
            self.set_leaf_values(self.leaves_numpy())
            self.leaf_mode.assign(LEAVES_GRADIENT)

    _em_updates = False

    def _fit_warnings(self, model):
        super()._fit_warnings(model)
        if self.is_classifier and self.leaf_learning == "em" and not self._em_updates:
            _fit_checks.warn(
                self,
                "leaf_learning='em' leaves are learnt only by the EMLeafUpdate callback, and this fit has "
                "none: the leaves keep their values (uniform class distributions for a new layer) and the "
                "model stays at chance. Fix: pass callbacks=[keras_trees.callbacks.EMLeafUpdate(x, y)] to fit, "
                "or use leaf_learning='auto' (the default) to let the optimizer train the leaves without it.",
            )

    # Heaps up to this many positions per tree use the dense level-by-level
    # computation; deeper (typically sparse) trees evaluate present nodes only.
    DENSE_POSITIONS = 4095

    @property
    def _dense_soft(self):
        return self.num_positions <= self.DENSE_POSITIONS

    def _routing_parameters(self):
        return self.effective_kernel(), self.split_bias, {}

    @property
    def _pruned_op(self):
        """Whether probabilistic routing runs through ``pruned_routing``: the
        compiled kernel, or its dense reference on heaps small enough for it
        (deeper heaps without the kernel prune in the sparse path)."""
        compiled = _library.custom_ops_available("pruned_routing")
        return self.prune_threshold > 0 and (self._dense_soft or compiled)

    def _pruned_outputs(self, feats, leaves=None):
        """``(batch, num_trees, K)`` per-tree outputs of pruned routing."""
        leaves = self._leaves() if leaves is None else leaves
        return pruned_routing.pruned_route(
            feats, self.effective_kernel(), self.split_bias, self.gamma, self.is_split(),
            ops.cast(leaves, feats.dtype), self.prune_threshold,
        )

    def soft_posterior(self, feats):
        """Eq. 2 / Eq. 20 with probabilistic routing through all present splits
        (subtrees of path probability below ``prune_threshold`` dropped)."""
        if self._pruned_op:
            return ops.sum(self._pruned_outputs(feats), axis=1) / self.num_trees
        if self._dense_soft:
            mu = path_probabilities.heap_leaf_probabilities(
                feats, self.effective_kernel(), self.split_bias, self.gamma, self.node_state
            )
            leaves = ops.cast(self._leaves(), feats.dtype)
            return ops.einsum("btn,tnk->bk", mu, leaves) / self.num_trees
        leaf_ids, log_mu = path_probabilities.soft_leaf_log_probabilities(
            feats, self.effective_kernel(), self.split_bias, self.gamma, self.node_state, self.prune_threshold
        )
        values = ops.take(self._flat_leaves(feats.dtype), leaf_ids, axis=0)
        return ops.matmul(ops.exp(log_mu), values) / self.num_trees

    def _growth_parts(self, feats):
        node, is_stump, s = path_probabilities.frontier(
            feats, self.effective_kernel(), self.split_bias, self.gamma, self.node_state, self.candidate
        )
        N, I = self.num_positions, self.num_internal
        base = ops.arange(self.num_trees, dtype="int32")[None] * N
        child = ops.minimum(node, I - 1)
        own_idx = node + base
        left_idx = 2 * child + 1 + base
        right_idx = 2 * child + 2 + base
        return node, is_stump, s, own_idx, left_idx, right_idx

    def growth_posterior(self, feats):
        """Greedy-growth model: hard through committed splits, soft at candidate stumps."""
        _, is_stump, s, own_idx, left_idx, right_idx = self._growth_parts(feats)
        leaves = self._flat_leaves(feats.dtype)
        own, left, right = (ops.take(leaves, i, axis=0) for i in (own_idx, left_idx, right_idx))
        s = ops.cast(s, feats.dtype)[..., None]
        per_tree = ops.where(is_stump[..., None], (1.0 - s) * left + s * right, own)
        return ops.mean(per_tree, axis=1)

    def hard_posterior(self, feats):
        node = self._route_features(feats)
        idx = node + ops.arange(self.num_trees, dtype="int32")[None] * self.num_positions
        return ops.mean(ops.take(self._flat_leaves(feats.dtype), idx, axis=0), axis=1)

    def _training_posterior(self, feats):
        """The training-time model: the greedy-growth model while ``growing``,
        else the probabilistic posterior; only the one in use is computed.

        Two conditionals, each with one branch that returns a zero tensor made
        outside it, added up: the gradient of a conditional whose two branches
        both compute something pairs the intermediates of one branch with those
        of the other, position by position, whatever their dtypes, which
        TensorFlow's graph type inference reports as an invalid graph. A
        branch that computes nothing has no intermediates to pair.
        """
        growing = self.growing > 0
        zero = ops.zeros((ops.shape(feats)[0], self.output_dim), feats.dtype)
        growth = ops.cond(growing, lambda: self.growth_posterior(feats), lambda: zero)
        soft = ops.cond(growing, lambda: zero, lambda: self.soft_posterior(feats))
        return growth + soft

    def call(self, inputs, training=None, routing=None):
        """Training: probabilistic routing (greedy-growth model while growing).

        Inference: ``routing="hard"`` (default: ``inference_routing``) follows one
        path per tree through the hard-routing op (steepness -> infinity);
        ``routing="soft"`` returns the probabilistic posterior of Eq. 2 / 20.
        """
        self._check_fit(training)
        feats = self.features(inputs, training=training)
        lead = self._leading_shape(inputs)
        if training and self.split_regularizer is not None:
            self.add_loss(self.split_regularizer(self.trained_kernel()))
        if training:
            out = self._training_posterior(feats)
        else:
            routing = routing or self.inference_routing
            if routing not in ROUTINGS:
                raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
            out = self.soft_posterior(feats) if routing == "soft" else self.hard_posterior(feats)
        # Computed in the variable dtype, returned in the compute dtype (Keras'
        # mixed precision convention); leading axes of the inputs are kept.
        return ops.cast(self._with_leading(out, lead), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        return (*input_shape[: len(input_shape) - self._sample_rank(len(input_shape))], self.output_dim)

    def posterior(self, inputs, routing="soft"):
        """Predicted class distribution (or regression value) with the given routing."""
        return self(inputs, training=False, routing=routing)

    # ------------------------------------------------------------ statistics
    def em_statistics(self, inputs, labels, sample_weight=None, branch=None):
        """E-step (Eq. 10) for a batch: ``sum_n w_n 1(y_n = k) h_{n,l}`` per leaf position.

        Uses the training-time model (the greedy-growth model while growing).
        Returns a ``(num_trees * positions, num_classes)`` tensor in the
        variable dtype (also under mixed precision); responsibilities are
        normalized over all leaves of all trees (the forest's likelihood, Eq. 20
        inside Eq. 4; for a single tree this is exactly Eq. 10). ``sample_weight``
        ``(batch,)`` weights each sample's counts (``w_n = 1`` without it).
        ``branch`` (``"growth"`` or ``"soft"``) picks the training-time model in
        Python instead of by the ``growing`` variable (callers that know it
        compile only that branch).
        """
        if not self.is_classifier:
            raise ValueError("EM leaf updates need a classification layer (num_classes=...)")
        feats = self.features(inputs, training=False)
        y = ops.reshape(tensors.indices(labels, "labels", self.num_classes), (-1,))
        _same_rows(feats, y, "labels")
        onehot = ops.one_hot(y, self.num_classes, dtype=feats.dtype)
        # Responsibilities use the one-hot labels; counts add them up weighted.
        counted = onehot
        if sample_weight is not None:
            weight = ops.reshape(ops.cast(sample_weight, feats.dtype), (-1,))
            _same_rows(feats, weight, "sample_weight")
            counted = onehot * weight[:, None]
        total = self.num_trees * self.num_positions
        T = float(self.num_trees)
        leaves = self._flat_leaves(feats.dtype)

        def soft_dense():
            mu = path_probabilities.heap_leaf_probabilities(
                feats, self.effective_kernel(), self.split_bias, self.gamma, self.node_state
            )
            values = ops.cast(self._leaves(), feats.dtype)
            pi_y = ops.einsum("tnk,bk->btn", values, onehot)
            p_y = ops.sum(mu * pi_y, axis=(1, 2)) / T
            h = mu * pi_y / (T * ops.maximum(p_y, 1e-30))[:, None, None]
            return ops.reshape(ops.einsum("btn,bk->tnk", h, counted), (total, self.num_classes))

        def soft_pruned():
            # One walk per (sample, tree): the kernel keeps each sample's
            # leaves between p(y) and the counts.
            weight = None if sample_weight is None else ops.reshape(ops.cast(sample_weight, feats.dtype), (-1,))
            counts = pruned_routing.pruned_em_statistics(
                feats, self.effective_kernel(), self.split_bias, self.gamma, self.is_split(),
                ops.cast(self._leaves(), feats.dtype), y, weight, self.prune_threshold,
            )
            return ops.reshape(counts, (total, self.num_classes))

        def soft():
            if self._pruned_op:
                return soft_pruned()
            if self._dense_soft:
                return soft_dense()
            leaf_ids, log_mu = path_probabilities.soft_leaf_log_probabilities(
                feats, self.effective_kernel(), self.split_bias, self.gamma, self.node_state, self.prune_threshold
            )
            values = ops.take(leaves, leaf_ids, axis=0)  # (L, K)
            mu = ops.exp(log_mu)
            p_y = ops.sum(ops.matmul(mu, values) * onehot, axis=1) / T
            pi_y = ops.transpose(ops.take(ops.transpose(values), y, axis=0))  # (L, B)
            h = ops.transpose(pi_y) * mu / (T * ops.maximum(p_y, 1e-30)[:, None])
            counts = ops.matmul(ops.transpose(h), counted)
            return ops.scatter(leaf_ids[:, None], counts, (total, self.num_classes))

        def growth():
            _, is_stump, s, own_idx, left_idx, right_idx = self._growth_parts(feats)
            s = ops.cast(s, feats.dtype)
            pick = lambda idx: ops.sum(ops.take(leaves, idx, axis=0) * onehot[:, None, :], -1)  # noqa: E731
            own_y, left_y, right_y = pick(own_idx), pick(left_idx), pick(right_idx)
            stump = ops.cast(is_stump, feats.dtype)
            h_left = stump * (1.0 - s) * left_y
            h_right = stump * s * right_y
            h_own = (1.0 - stump) * own_y
            p_y = ops.sum(h_left + h_right + h_own, axis=1) / T
            norm = 1.0 / (T * ops.maximum(p_y, 1e-30))[:, None]
            idx = ops.concatenate([ops.reshape(i, (-1, 1)) for i in (left_idx, right_idx, own_idx)], 0)
            val = ops.concatenate(
                [ops.reshape((h * norm)[..., None] * counted[:, None, :], (-1, self.num_classes))
                 for h in (h_left, h_right, h_own)], 0,
            )
            return ops.scatter(idx, val, (total, self.num_classes))

        if branch == "growth":
            return growth()
        if branch == "soft":
            return soft()
        if branch is not None:
            raise ValueError(f"branch must be 'growth', 'soft' or None, got {branch!r}")
        return ops.cond(self.growing > 0, growth, soft)

    def em_update_mask(self):
        """Leaf positions the M-step may change: all leaves, or while growing the
        children of candidate stumps (committed leaves keep their distributions)."""
        state = to_numpy(self.node_state)
        if int(to_numpy(self.growing)) == 0:
            return state == topology.LEAF
        cand = np.zeros_like(state, dtype=bool)
        c = to_numpy(self.candidate).astype(bool) & (state[:, : self.num_internal] == topology.LEAF)
        t, n = np.nonzero(c)
        cand[t, 2 * n + 1] = True
        cand[t, 2 * n + 2] = True
        return cand

    def leaf_distributions(self, counts):
        """Class distributions ``counts / counts.sum()`` over the last axis, with
        ``leaf_smoothing`` pseudo-counts (the M-step's; no variable is written)."""
        counts = np.asarray(counts, dtype=np.float64)
        smoothed = counts + self.leaf_smoothing * counts.sum(-1, keepdims=True) / self.num_classes
        return smoothed / np.maximum(smoothed.sum(-1, keepdims=True), 1e-300)

    def set_leaf_distributions(self, counts, mask=None):
        """M-step (Eq. 13): leaves where ``mask`` holds and data arrived become
        ``counts / counts.sum()`` (with ``leaf_smoothing`` pseudo-counts)."""
        counts = np.asarray(counts, dtype=np.float64).reshape(self.num_trees, self.num_positions, -1)
        mask = self.em_update_mask() if mask is None else np.asarray(mask, bool)
        ok = mask & (counts.sum(-1) > 0)
        new = self.leaf_distributions(counts)
        values = self.leaves_numpy()
        values[ok] = new[ok]
        self.set_leaf_values(values)
        return int(ok.sum())

    # ---------------------------------------------------------------- growth
    # Hooks of the level-growth engine (keras_trees.layers._level_growth),
    # driven by keras_trees.callbacks.GreedyLevelGrowth.
    def _read_growth(self):
        get = lambda v: np.array(to_numpy(v))  # noqa: E731
        return {
            "state": get(self.node_state), "candidate": get(self.candidate), "mask": get(self.feature_mask),
            "kernel": get(self.split_kernel), "bias": get(self.split_bias), "gamma": get(self.gamma),
            "epochs": get(self.node_epochs), "attempts": get(self.attempts), "gain": get(self.candidate_gain),
            "leaves": self.leaves_numpy(),
        }

    def _write_growth(self, a):
        topology.validate(a["state"])
        for var, key in ((self.node_state, "state"), (self.candidate, "candidate"),
                         (self.feature_mask, "mask"), (self.split_kernel, "kernel"),
                         (self.split_bias, "bias"), (self.gamma, "gamma"), (self.node_epochs, "epochs"),
                         (self.attempts, "attempts"), (self.candidate_gain, "gain")):
            var.assign(a[key].astype(var.dtype))
        self.set_leaf_values(a["leaves"])

    def _init_stump(self, growth, a, t, n, nodes):
        """Candidate stump at leaf (t, n): a fresh split (new feature subset)
        through the center of its samples, gamma0; its leaves start at the
        leaf's value."""
        mask = self.draw_feature_mask((1,), position=(t, n))[0]
        kernel, bias = self.draw_splits(mask[None], center=growth.center(t, nodes)[None])
        a["mask"][t, n] = mask
        a["kernel"][t, n] = kernel[0]
        a["bias"][t, n] = bias[0]
        a["gamma"][t, n] = self.initial_gamma
        a["epochs"][t, n] = 0
        value = a["leaves"][t, n]
        a["leaves"][t, 2 * n + 1] = value
        a["leaves"][t, 2 * n + 2] = value

    def _finish_stumps(self, growth, a, stumps):
        """With ``split_screening``: each new stump reads only its node's
        screened features (`keras_trees.layers._screening.screen_stumps`)."""
        if self.split_screening is not None:
            _screening.screen_stumps(self, growth, a, stumps, self.split_screening)

    def _judge_stumps(self, growth, a, stumps):
        """A stump fails when all its samples go one way; its gain (best-first
        growth) is the information gain of its leaf distributions at its hard
        split fractions (as in the authors' code), or the variance reduction."""
        counts, results = growth.stats["counts"], {}
        for t, n in stumps:
            l, r = 2 * n + 1, 2 * n + 2
            nl, nr = counts[t, l].sum(), counts[t, r].sum()
            if nl == 0 or nr == 0:
                results[(t, n)] = None
            elif not growth.best_first:
                results[(t, n)] = 0.0
            elif self.is_classifier:
                results[(t, n)] = _entropy(a["leaves"][t, n]) - (
                    nl * _entropy(a["leaves"][t, l]) + nr * _entropy(a["leaves"][t, r])) / (nl + nr)
            else:
                ysum, ysq = growth.stats["reg"]
                tot = nl + nr
                var = lambda c, s, q: q / c - (s ** 2).sum() / c ** 2  # noqa: E731
                parent = var(tot, ysum[t, l] + ysum[t, r], ysq[t, l] + ysq[t, r])
                results[(t, n)] = parent - (nl * var(nl, ysum[t, l], ysq[t, l])
                                            + nr * var(nr, ysum[t, r], ysq[t, r])) / tot
        return results, False

    # ------------------------------------------------------------ inspection
    def _forest(self):
        return Forest(
            family="end_to_end_forest" if self.num_trees > 1 else "end_to_end_tree",
            node_state=numpy(self.node_state),
            split_kind="linear",
            weights=numpy(self.effective_kernel()),
            bias=numpy(self.split_bias),
            leaves=numpy(self.leaf_values),
            aggregation="mean",
            leaf_output="class distribution" if self.is_classifier else "regression value",
            input_dim=self.feature_dim,
            inputs="layer input" if self.split_features is None else "split_features output (flattened)",
            leaf_prediction=self.inference_routing == "hard",
            num_classes=self.num_classes,
            extra={"steepness": numpy(self.gamma).tolist()} if self.num_trees * self.num_internal <= 4096 else {},
        )

    # ------------------------------------------------------------------ config
    def get_config(self):
        config = super().get_config()
        ser = keras.saving.serialize_keras_object
        config.update(
            {
                "max_depth": self.max_depth,
                "num_classes": self.num_classes,
                "units": self.units,
                "initial_topology": self.initial_topology,
                "split_type": self.split_type,
                "features_per_split": self.features_per_split,
                "patch_size": self.patch_size,
                "split_features": ser(self.split_features) if self.split_features is not None else None,
                "steepness": self.initial_steepness,
                "inference_routing": self.inference_routing,
                "split_regularizer": ser(self.split_regularizer),
                "leaf_smoothing": self.leaf_smoothing,
                "leaf_learning": self.leaf_learning,
                "prune_threshold": self.prune_threshold,
                "split_screening": self.split_screening,
                "seed": self.seed,
            }
        )
        return config

    def load_own_variables(self, store):
        # Classifiers saved before the gradient leaf table existed hold 13
        # variables (no leaf_logits, no leaf_mode): load them and derive the rest.
        names = ("split_kernel", "split_bias", "feature_mask", "gamma", "node_state", "candidate",
                 "node_epochs", "attempts", "candidate_gain", "growing", "growth_phase",
                 "phase_epoch", "leaf_table")
        if self.is_classifier and len(store.keys()) == len(names):
            for i, name in enumerate(names):
                getattr(self, name).assign(store[f"{i}"])
            self.set_leaf_values(np.asarray(store[f"{len(names) - 1}"]))
            self.leaf_mode.assign(LEAVES_EM if self.leaf_learning == "em" else LEAVES_GRADIENT)
            check_loaded(self)
            return
        super().load_own_variables(store)  # CheckedLoading: validated after loading

    @classmethod
    def from_config(cls, config):
        config = _deprecation.renamed_config(config, {"gamma": "steepness"})
        if config.get("split_features") is not None:
            config["split_features"] = keras.saving.deserialize_keras_object(config["split_features"])
        return cls(**config)


def _same_rows(feats, values, name):
    """``values`` (flattened) hold one entry per row of ``feats`` (a sample of
    the inputs, leading axes included): at once where the sizes are static,
    at run time otherwise."""
    rows, n = feats.shape[0], values.shape[0]
    message = f"{name} must hold one value per sample of x (the leading axes of x flattened)"
    if rows is not None and n is not None:
        if rows != n:
            raise ValueError(f"{message}, got {n} values for {rows} samples")
        return
    tensors.require(ops.equal(ops.shape(feats)[0], ops.shape(values)[0]), message)


def _entropy(p):
    p = np.asarray(p, dtype=np.float64)
    nz = p > 0
    return float(-(p[nz] * np.log(p[nz])).sum())


def find_layers(model):
    """All end-to-end tree layers inside ``model`` (recursively)."""
    found = []
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if isinstance(layer, EndToEndTreesBase):
            found.append(layer)
    return found
