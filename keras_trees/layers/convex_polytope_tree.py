"""Convex polytope trees (Armandpour & Zhou, AISTATS 2021)."""

import math

import keras
import numpy as np
from keras import ops

from keras_trees import streaming, topology
from keras_trees.api_export import keras_trees_export
from keras_trees.constraints import ClipValues
from keras_trees.forest import Forest
from keras_trees.layers import _gradient_step, _polytope_training, _validation
from keras_trees.forest import node_sums
from keras_trees.layers._fit_checks import FitChecks
from keras_trees.layers._forest_layer import numpy
from keras_trees.layers._heap import HeapTreeLayer, const as _const
from keras_trees.layers._random import numpy_generator
from keras_trees.losses.gamma_process_prior import GammaProcessPrior
from keras_trees.ops import _library, pruned_routing
from keras_trees.ops import polytope as poly
from keras_trees.layers._xla import XLACompatibility
from keras_trees.validation import arguments, tensors
from keras_trees.validation.variables import CheckedLoading
from keras_trees._arrays import to_numpy

MAX_DEPTH = 16
# Floor of log r_k. The gamma-process density of r_k (shape gamma0 / K < 1) is
# unbounded at 0, so the MAP objective would push unused experts to r = 0 forever;
# clipping at exp(-10) keeps the penalty bounded while making them negligible.
MIN_LOG_EXPERT_WEIGHT = -10.0
MAX_LOG_EXPERT_WEIGHT = 10.0


@keras_trees_export("keras_trees.layers")
class ConvexPolytopeTree(CheckedLoading, XLACompatibility, FitChecks, HeapTreeLayer):
    """A decision tree whose splits are noisy-ORs of ``K`` linear experts (convex polytopes).

    Node ``v`` sends ``x`` right with probability ``f(x) = 1 - exp(-S(x))``,
    ``S(x) = sum_k r_k softplus(beta_k . x + b_k)`` (Eq. 2; ``K`` is the
    truncation of the gamma process, ``r_k = exp(log_r_k) > 0``), annealed
    during training to ``f_lambda = sigmoid(lambda (S - S0))`` with learnable
    ``p0 = 1 - exp(-S0)`` (Appendix B). At inference each node is a threshold
    ``S(x) > c`` (one side of a convex region bounded by at most ``K`` facets,
    Theorem 1), served by the compiled hard-routing engine
    (``KerasTrees>HardRoutingExperts``): one path per sample, at most
    ``max_depth`` split evaluations.

    Training follows the paper (Section 3.3): [`fit_greedy`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.fit_greedy] grows the
    topology from a root stump (each stump trained on its node's samples with
    the conditional-entropy objective, Eq. 13, or the variance objective,
    Eq. 15-16, plus the gamma-process prior of Eq. 14; the threshold on the
    stump's probabilities that maximizes the information gain / variance
    reduction becomes the split), chooses the depth on validation data and can
    refine all splits jointly. Leaves hold the empirical class distribution
    (mean response) of the training data routed to them
    ([`set_leaves_from_data`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.set_leaves_from_data], also as the callback
    [`keras_trees.callbacks.polytope_leaves.PolytopeLeafUpdate`][keras_trees.callbacks.polytope_leaves.PolytopeLeafUpdate]).
    ``K = 1`` gives oblique trees.

    All of it runs on the TensorFlow, JAX and PyTorch backends, inside a
    ``tf.distribute`` strategy or a ``keras.distribution`` (the growth steps
    come from `keras_trees.layers._gradient_step.make_train_step`), and
    under mixed precision: routing and the objectives stay in the variables'
    float32 (inputs are cast to it), outputs come in the compute dtype. With
    ``seed=None`` the random expert directions follow
    ``keras.utils.set_random_seed``.

    Inputs ``(..., d)``: the splits read the last axis and leading axes are
    kept (``keras.layers.Dense``: ``(2, 5, d)`` gives ``(2, 5, C)`` from
    ``call``, ``route``, ``leaf_log_probabilities`` and ``split_values``);
    [`fit_greedy`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.fit_greedy], [`refine`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.refine] and [`set_leaves_from_data`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.set_leaves_from_data] take
    ``(n, d)`` rows, one per label. ``x`` must be real numbers (strings raise
    ``TypeError``) and finite; NaN or Inf in ``x`` or in a parameter, and a
    ``node_state`` that breaks the rules of `keras_trees.topology`, raise
    an error naming ``x`` or the layer and the variable on every path (eager,
    ``fit``/``predict``, ``jax.jit``, the growth steps, loading a file).

    ``call(x, training=True)`` is the probabilistic tree (leaf values mixed by
    the annealed path probabilities, Eq. 7), so the layer can also be trained
    inside ``model.fit`` with any Keras loss; ``call(x)`` at inference routes
    deterministically.

    Variables (heap layout of `keras_trees.topology`, one tree):
    ``expert_kernel`` ``(1, 2**D - 1, K, d)``, ``expert_bias`` and
    ``log_expert_weight`` ``(1, 2**D - 1, K)``, ``p0_logit`` ``(1, 2**D - 1)``
    (trainable); ``steepness`` (lambda), ``threshold`` (``c``),
    ``trained_splits``, ``node_state`` and ``leaf_values`` ``(1, 2**(D+1) - 1,
    C)`` (non-trainable, assigned by training).

    Args:
        max_depth: maximum depth ``D``.
        num_experts: ``K`` experts (polytope facets) per node.
        num_classes: classes: leaves hold class distributions and the tree
            outputs class probabilities; or
        units: number of raw outputs, here regression values (exactly one of
            the two).
        prior: [`keras_trees.losses.GammaProcessPrior`][keras_trees.losses.gamma_process_prior.GammaProcessPrior] or ``None``
            (default: ``GammaProcessPrior()``); its ``weight`` is multiplied by
            ``1 / number of training samples`` during training.
        steepness: initial annealing steepness ``lambda``, > 0; bigger is
            harder (the vocabulary of every keras-trees family).
        annealing: use ``f_lambda`` (True, Appendix B) or the raw ``f`` (False)
            for training-time probabilities.
        facet_tolerance: an expert is an active facet when
            ``r_k >= facet_tolerance * max_k r_k``.
        prune_threshold: probabilistic routing (``call(training=True)`` and
            the joint refinement's soft counts) drops a subtree once a
            sample's path probability into it falls below this value, except
            the child a node favours (the deterministic path), so every sample
            keeps at least one leaf (`keras_trees.ops.pruned_routing`).
            The dropped probability mass of a sample is below
            ``prune_threshold`` times the number of dropped subtrees (at most
            one per visited split) and bounds the change of its output (class
            distributions) and of its soft counts. ``0`` is exact (the dense
            computation, unchanged); the default is the same as for
            [`keras_trees.layers.EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree].
        seed: seed of the initial expert directions.

    Example:

    >>> import numpy as np, keras
    >>> from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(-1, 1, size=(400, 2)).astype("float32")
    >>> y = (np.linalg.norm(x, axis=1) < 0.6).astype("int32")
    >>> tree = ConvexPolytopeTree(max_depth=2, num_experts=8, num_classes=2, seed=0)
    >>> model = keras.Sequential([keras.Input((2,)), tree])
    >>> _ = tree.fit_greedy(x, y, epochs=5, batch_size=200, verbose=0)
    >>> model.predict(x, verbose=0).shape
    (400, 2)
    """

    single_tree = True

    def __init__(
        self,
        max_depth=4,
        num_experts=10,
        num_classes=None,
        units=None,
        prior="default",
        steepness=1.0,
        annealing=True,
        facet_tolerance=1e-2,
        prune_threshold=pruned_routing.DEFAULT_PRUNE_THRESHOLD,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_depth = _validation.positive_int("max_depth", max_depth, maximum=MAX_DEPTH)
        self.num_experts = _validation.positive_int("num_experts", num_experts, maximum=4096)
        self.num_classes, self.units = _validation.task(num_classes, units)
        if isinstance(prior, str) and prior == "default":
            prior = GammaProcessPrior()
        elif isinstance(prior, dict):
            prior = GammaProcessPrior.from_config(prior)
        if prior is not None and not isinstance(prior, GammaProcessPrior):
            raise TypeError(f"prior must be a GammaProcessPrior or None, got {type(prior).__name__}")
        self.prior = prior
        self.initial_steepness = _validation.positive_float("steepness", steepness)
        self.annealing = bool(annealing)
        facet_tolerance = float(facet_tolerance)
        if not 0 <= facet_tolerance < 1:
            raise ValueError(f"facet_tolerance must be in [0, 1), got {facet_tolerance}")
        self.facet_tolerance = facet_tolerance
        self.prune_threshold = arguments.prune_threshold(prune_threshold)
        self.seed = seed
        # seed=None follows keras.utils.set_random_seed (NumPy's global state).
        self._rng = numpy_generator(seed)
        # Routing and the training objectives run in the variables' precision
        # (float32) under mixed precision too: thresholds on S(x) and the
        # soft counts are not float16 material. Inputs are cast to the
        # variable dtype in `features`, outputs to the compute dtype in `call`.
        self.autocast = False
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if input_shape[-1] is None:
            raise ValueError(f"ConvexPolytopeTree needs a known feature dimension (last axis), got {input_shape}")
        # keras.layers.Dense: the splits read the last axis; leading axes are kept.
        d = int(input_shape[-1])
        self.feature_dim = d
        I, N, K = self.num_internal, self.num_positions, self.num_experts
        _validation.check_parameter_memory(
            I * K * (d + 2) + N * (self.output_dim + 1), 4,
            f"ConvexPolytopeTree(max_depth={self.max_depth}, num_experts={K}) over {d} features",
            "use a smaller max_depth or fewer experts.",
        )
        kernel, bias = self._draw_experts(I, np.zeros(d), np.ones(d))
        own = dict(autocast=False)  # see __init__: float32 routing under mixed precision
        self.expert_kernel = self.add_weight(
            name="expert_kernel", shape=(1, I, K, d), initializer=_const(kernel[None]), **own
        )
        self.expert_bias = self.add_weight(name="expert_bias", shape=(1, I, K), initializer=_const(bias[None]), **own)
        self.log_expert_weight = self.add_weight(
            name="log_expert_weight", shape=(1, I, K), initializer=keras.initializers.Constant(-math.log(K)),
            constraint=ClipValues(MIN_LOG_EXPERT_WEIGHT, MAX_LOG_EXPERT_WEIGHT), **own,
        )
        self.p0_logit = self.add_weight(name="p0_logit", shape=(1, I), initializer="zeros", **own)
        fixed = dict(trainable=False, **own)
        self.steepness = self.add_weight(
            name="steepness", shape=(1, I), initializer=keras.initializers.Constant(self.initial_steepness), **fixed
        )
        self.threshold = self.add_weight(
            name="threshold", shape=(1, I), initializer=keras.initializers.Constant(math.log(2.0)), **fixed
        )
        self.trained_splits = self.add_weight(name="trained_splits", shape=(1, I), initializer="zeros", **fixed)
        self.node_state = self.add_weight(
            name="node_state", shape=(1, N), initializer=_const(topology.root_leaf(1, self.max_depth)),
            dtype="int32", **fixed,
        )
        init = keras.initializers.Constant(1.0 / self.output_dim) if self.is_classifier else "zeros"
        self.leaf_values = self.add_weight(name="leaf_values", shape=(1, N, self.output_dim), initializer=init, **fixed)
        self._record_input_shape(input_shape)

    def _checked_parameters(self):
        return [(v, v.name) for v in (self.expert_kernel, self.expert_bias, self.log_expert_weight, self.p0_logit,
                                      self.steepness, self.threshold, self.leaf_values)]

    # --------------------------------------------------------- parameters
    def _draw_experts(self, count, center, scale, sharpness=2.0):
        """``count`` nodes of K experts whose facets sit one projected standard
        deviation from ``center`` in random directions (a random polytope around
        the node's data); ``z_k = sharpness * (u_k . (x - center) / sd_k - 1)``."""
        K, d = self.num_experts, len(center)
        u = self._rng.normal(size=(count, K, d))
        u /= np.maximum(np.linalg.norm(u, axis=-1, keepdims=True), 1e-12)
        sd = np.sqrt(np.maximum((u * u * np.asarray(scale) ** 2).sum(-1), 1e-12))
        kernel = sharpness * u / sd[..., None]
        bias = -(kernel * np.asarray(center)).sum(-1) - sharpness
        return kernel.astype(np.float32), bias.astype(np.float32)

    def expert_weights(self):
        """``r_k = exp(log_r_k)`` of every node, ``(1, 2**D - 1, K)``."""
        return ops.exp(self.log_expert_weight)

    def rate0(self):
        """``S0 = -log(1 - p0) = softplus(p0_logit)`` (``p0 = sigmoid(p0_logit)``)."""
        return ops.softplus(self.p0_logit)

    # ------------------------------------------------------------ routing
    def split_values(self, inputs):
        """``(batch, 2**D - 1)`` rates ``S(x)`` of every node (dense, for
        analysis; leading axes of the inputs kept)."""
        x = self.features(inputs)
        z = ops.einsum("bd,ikd->bik", x, self.expert_kernel[0]) + self.expert_bias[0][None]
        return self._with_leading(poly.noisy_or_rate(z, self.expert_weights()[0][None]), self._leading_shape(inputs))

    def _routing_parameters(self):
        return self.expert_kernel, self.expert_bias, dict(
            expert_weights=self.expert_weights(), threshold=self.threshold)

    def leaf_log_probabilities(self, inputs):
        """``(batch, 2**(D+1) - 1)`` log path probabilities (Eq. 7) of the
        probabilistic tree; ``-inf``-like values (``-1e30``) where no leaf is
        and at the leaves ``prune_threshold`` drops. Leading axes of the
        inputs are kept.

        Only the present splits (and the root) are evaluated, except on JAX,
        whose compiled functions need static shapes: there every internal
        node is, so the cost grows with ``2**max_depth`` (the dense path; the
        compiled pruned kernel serves ``call`` and the refinement on
        TensorFlow)."""
        logp = self._leaf_log_probabilities(self.features(inputs))
        return self._with_leading(logp, self._leading_shape(inputs))

    def _leaf_log_probabilities(self, x):
        """[`leaf_log_probabilities`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.leaf_log_probabilities] of rows ``x`` that are `features`."""
        I = self.num_internal
        if keras.backend.backend() == "jax":
            # jax.jit needs static shapes: every internal node is evaluated;
            # positions below non-splits are not leaves and are masked below.
            ids = None
            take = lambda v, axis=0: v  # noqa: E731
        else:
            # Only present splits are evaluated (deep heaps are mostly empty),
            # and the root, so that the output depends on the trainable
            # variables even before the first split (zero gradients, not none).
            evaluated = ops.logical_or(ops.equal(self.node_state[0, :I], topology.SPLIT), ops.arange(I) == 0)
            ids = ops.cast(ops.nonzero(evaluated)[0], "int32")
            take = lambda v, axis=0: ops.take(v, ids, axis=axis)  # noqa: E731
        z = ops.einsum("bd,skd->bsk", x, take(self.expert_kernel[0])) + take(self.expert_bias[0])[None]
        rate = poly.noisy_or_rate(z, take(self.expert_weights()[0])[None])
        if self.annealing:
            log_r, log_l = poly.annealed_log_probabilities(
                rate, take(self.rate0()[0])[None], take(self.steepness[0])[None]
            )
            # The favoured side (right iff > 0) of the pruning rule.
            logit = poly.annealed_logits(rate, take(self.rate0()[0])[None], take(self.steepness[0])[None])
        else:
            log_r, log_l = poly.noisy_or_log_probabilities(rate)
            logit = rate - pruned_routing.LOG2
        if ids is not None:
            # Back to every internal position (0 where not evaluated) by a gather
            # (a scatter into an empty batch fails in TensorFlow).
            flags = ops.cast(evaluated, "int32")
            column = ops.where(evaluated, ops.cumsum(flags) - 1, ops.sum(flags))

            def dense(v):
                return ops.take(ops.concatenate([v, ops.zeros_like(v[:, :1])], axis=1), column, axis=1)

            log_r, log_l, logit = dense(log_r), dense(log_l), dense(logit)
        levels = [ops.zeros_like(x[:, :1])]
        logp = levels[0]
        batch = ops.shape(x)[0]
        threshold = self.prune_threshold
        keep = ops.ones_like(logp, dtype="bool")
        dropped = ops.cast(-1e30, logp.dtype)
        for d in range(self.max_depth):
            sl = slice(2**d - 1, 2 ** (d + 1) - 1)
            left, right = logp + log_l[:, sl], logp + log_r[:, sl]
            if threshold > 0:
                fav = logit[:, sl] > 0
                k_left = ops.logical_and(keep, ops.logical_or(ops.exp(left) >= threshold, ops.logical_not(fav)))
                k_right = ops.logical_and(keep, ops.logical_or(ops.exp(right) >= threshold, fav))
                left, right = ops.where(k_left, left, dropped), ops.where(k_right, right, dropped)
                keep = ops.reshape(ops.stack([k_left, k_right], axis=-1), (batch, 2 ** (d + 1)))
            logp = ops.reshape(ops.stack([left, right], axis=-1), (batch, 2 ** (d + 1)))
            levels.append(logp)
        logp = ops.concatenate(levels, axis=-1)
        is_leaf = ops.equal(self.node_state[0], topology.LEAF)[None]
        return ops.where(is_leaf, logp, ops.cast(-1e30, logp.dtype))

    def _pruned_kernel(self):
        """Whether probabilistic routing runs through the compiled pruned kernel."""
        return self.prune_threshold > 0 and _library.custom_ops_available("pruned_routing")

    def _pruned_args(self):
        return (self.expert_kernel, self.expert_bias, self.steepness, self.is_split()), dict(
            prune_threshold=self.prune_threshold, expert_weights=self.expert_weights(), rate0=self.rate0(),
            annealed=self.annealing)

    def leaf_statistics(self, inputs, weights):
        """``(2**(D+1) - 1, U)``: ``sum_b mu_l(x_b) weights[b]`` at every leaf
        ``l`` of the probabilistic tree (0 elsewhere), for ``weights``
        ``(batch, U)``; differentiable (the soft counts of the refinement)."""
        x = self.features(inputs)
        weights = ops.cast(weights, x.dtype)
        if self._pruned_kernel():
            args, kwargs = self._pruned_args()
            return pruned_routing.pruned_leaf_statistics(x, *args, weights[:, None, :], **kwargs)[0]
        p = ops.exp(self._leaf_log_probabilities(x))
        return ops.matmul(ops.transpose(p), weights)

    def call(self, inputs, training=None):
        self._check_fit(training)
        x = self.features(inputs)
        if training and self._pruned_kernel():
            args, kwargs = self._pruned_args()
            out = pruned_routing.pruned_route(x, *args, ops.cast(self.leaf_values, x.dtype), **kwargs)[:, 0]
        elif training:
            p = ops.exp(self._leaf_log_probabilities(x))
            out = ops.matmul(p, ops.cast(self.leaf_values[0], p.dtype))
        else:
            out = ops.take(self.leaf_values[0], self._route_features(x)[:, 0], axis=0)
        # Leading axes of the inputs are kept (Dense semantics).
        return ops.cast(self._with_leading(out, self._leading_shape(inputs)), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        return (*input_shape[: len(input_shape) - self._sample_rank(len(input_shape))], self.output_dim)

    # ------------------------------------------------------------ leaves
    def _leaf_statistics(self, node, y, sample_weight=None):
        """Per-position weighted sums (subtree totals for internal positions):
        class weights ``(N, C)`` or ``(mass (N,), sum w y (N, units))``."""
        if self.is_classifier:
            values = np.eye(self.num_classes)[y]
        else:
            values = np.concatenate([np.ones((len(y), 1)), y.reshape(len(y), -1)], 1)
        return node_sums(node, values, self.num_positions, sample_weight, subtrees=True)

    def _values_from_stats(self, stats, old):
        if self.is_classifier:
            total = stats.sum(-1, keepdims=True)
            return np.where(total > 0, stats / np.maximum(total, 1e-300), old)
        mass = stats[:, :1]
        return np.where(mass > 0, stats[:, 1:] / np.maximum(mass, 1e-300), old)

    def set_leaves_from_data(self, x, y=None, batch_size=4096, sample_weight=None, class_weight=None):
        """Sets every position's value to the empirical class distribution (or
        mean response) of the training samples routed deterministically through
        it (Section 3.3.1), weighted by ``sample_weight`` times
        ``class_weight[y]`` when given (as in ``keras.Model.fit``); positions no
        sample (of positive weight) reaches keep their value. Internal
        positions get the value of their subtree, so pruning needs no new
        statistics. Returns the (weighted) number of samples per position.

        ``x`` are the layer's inputs ``(n, features)`` with ``y``, or a stream
        of ``(x, y)`` / ``(x, y, sample_weight)`` batches (a batched
        ``tf.data.Dataset``, a ``keras.utils.PyDataset``, a list of batches or
        a function returning a fresh iterable of them; ``y`` None; the
        per-sample weights are the batches' third element, times
        ``class_weight[y]``). The statistics are summed batch by batch (the
        data never has to fit in memory) and, in a distributed run, over the
        workers ([`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum]; each worker
        reads its share of the data), so every replica sets the same leaves.
        """
        if y is not None or streaming.is_array_like(x):
            if y is None:
                raise ValueError("set_leaves_from_data: x is an array, so y (the labels or targets) is needed "
                                 "as well")
            self._ensure_built(x)
            x, y = self._check_xy(x, y, "set_leaves_from_data")
            w = _validation.sample_weights(y, sample_weight, class_weight, self.num_classes,
                                           "set_leaves_from_data")
            data = streaming.stream(x, y, w, batch_size, name="set_leaves_from_data")
            class_weight = None
        else:
            data = streaming.stream(x, None, sample_weight, batch_size, name="set_leaves_from_data")
            if not self.built:
                self._ensure_built(data.sample())
        stats = self._stream_leaf_statistics(data, batch_size=batch_size, class_weight=class_weight,
                                             where="set_leaves_from_data", checked=data.in_memory)
        return self._set_leaves_from_statistics(stats)

    def _stream_leaf_statistics(self, data, batch_size=4096, class_weight=None, to_input=None,
                                where="set_leaves_from_data", model=None, checked=False):
        """``(num_positions, U)`` `_leaf_statistics` of a
        [`keras_trees.streaming.Batches`][keras_trees.streaming.Batches] stream, summed batch by batch
        and over the workers (``to_input`` maps a batch's x to the layer's
        inputs; ``class_weight`` multiplies the batches' weights; ``checked``:
        the batches are arrays `_check_xy` has checked already)."""
        table = None if class_weight is None else _validation.class_weight_table(class_weight, self.num_classes,
                                                                                  where)
        width = self.num_classes if self.is_classifier else 1 + self.units
        stats = np.zeros((self.num_positions, width))
        for xb, yb, wb in data:
            if to_input is not None:
                xb = np.asarray(to_numpy(to_input(xb)))
            if not checked:
                xb, yb = self._check_xy(xb, yb, where)
            if not data.in_memory or table is not None:
                wb = _validation.batch_weights(yb, wb, table, where)
            stats += self._leaf_statistics(self._route_numpy(xb, batch_size), yb, wb)
        stats, = streaming.all_reduce_sum([stats], model=model)
        if not (stats[0].sum() if self.is_classifier else stats[0, 0]) > 0:  # the root holds the total mass
            raise ValueError(f"{where}: the data holds no samples of positive weight (the stream is empty or "
                             "all sample weights, sample_weight times class_weight, are 0)")
        return stats

    def _set_leaves_from_statistics(self, stats):
        old = np.asarray(to_numpy(self.leaf_values))[0].astype(np.float64)
        self.leaf_values.assign(self._values_from_stats(stats, old)[None].astype(np.float32))
        return stats.sum(-1) if self.is_classifier else stats[:, 0]

    # ------------------------------------------------------------ checks
    def _ensure_built(self, x):
        if not self.built and np.ndim(x) >= 2:  # else _check_xy says what x must be
            self.build((None,) + tuple(np.shape(x)[1:]))

    def _check_xy(self, x, y, where):
        x = np.asarray(x)
        if x.dtype.kind not in "biuf":
            tensors.as_tensor(x, "x")  # the TypeError naming x for strings and objects
            raise TypeError(f"{where}: x must be real numbers, got dtype {x.dtype}")
        x = x.astype(np.float32)
        if x.ndim < 2 or len(x) == 0:
            raise ValueError(f"{where}: x must be a non-empty array of shape (n, features), got {x.shape} (empty)")
        if x.ndim != 2:
            raise ValueError(
                f"{where}: x must have shape (n, {self.feature_dim}): one row of features per label (extra "
                f"leading axes are kept when the layer is called, but {where} needs one row per sample), "
                f"got {x.shape}")
        if x.shape[1] != self.feature_dim:
            raise ValueError(f"{where}: x has {x.shape[1]} features, the layer expects {self.feature_dim}")
        tensors.finite(x, "x", f"{where} needs finite inputs")
        y = np.asarray(y)
        if len(y) != len(x):
            raise ValueError(f"{where}: x has {len(x)} samples but y has {len(y)}")
        if self.is_classifier:
            y = _validation.class_labels(y, self.num_classes, where).astype(np.int64)
        else:
            y = y.astype(np.float64).reshape(len(y), -1)
            if y.shape[1] != self.units:
                raise ValueError(f"{where}: y has {y.shape[1]} outputs, the layer has units={self.units}")
            if not np.all(np.isfinite(y)):
                raise ValueError(f"{where}: y contains NaN or Inf")
        return x, y

    def _host_fn(self, name):
        """``self.<name>`` for NumPy batches on the host. On JAX it is one
        ``jax.jit`` of the whole method with the variables as arguments (eager
        JAX would compile every primitive for every new batch shape)."""
        method = getattr(self, name)
        if keras.backend.backend() != "jax":
            return method
        cache = self.__dict__.setdefault("_host_fns", {})
        if name not in cache:
            import jax

            variables = list(self.variables)

            def pure(values, x):
                with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                    return method(x)

            jitted = jax.jit(pure)
            cache[name] = lambda x: jitted([v.value for v in variables], x)
        return cache[name]

    def _map_numpy(self, name, x, batch_size):
        """``self.<name>`` over ``x`` in batches, as NumPy (``_map_rows``)."""
        return self._map_rows(self._host_fn(name), x, batch_size)

    def _route_numpy(self, x, batch_size=4096):
        """``(n,)`` heap position of the leaf each row of ``x`` reaches (the one tree)."""
        return self.route_rows(x, batch_size=batch_size)[:, 0]

    def _split_values_numpy(self, x, batch_size=4096):
        out = self._map_numpy("split_values", x, batch_size)
        return np.concatenate(out).astype(np.float64) if out else np.zeros((0, self.num_internal))

    # ------------------------------------------------------------ growth
    # Hooks of the level-growth engine (keras_trees.layers._level_growth),
    # driven by fit_greedy (keras_trees.layers._polytope_training).
    def _read_growth(self):
        get = lambda v: np.array(to_numpy(v))  # noqa: E731
        return {"state": get(self.node_state), "candidate": get(self.trained_splits),
                "kernel": get(self.expert_kernel), "bias": get(self.expert_bias),
                "log_r": get(self.log_expert_weight), "p0": get(self.p0_logit), "threshold": get(self.threshold)}

    def _write_growth(self, a):
        for var, key in ((self.node_state, "state"), (self.trained_splits, "candidate"),
                         (self.expert_kernel, "kernel"), (self.expert_bias, "bias"),
                         (self.log_expert_weight, "log_r"), (self.p0_logit, "p0"), (self.threshold, "threshold")):
            var.assign(a[key].astype(var.dtype))

    def _init_stump(self, growth, a, t, n, nodes):
        """A fresh stump: a random polytope around the node's samples (their
        weighted mean and standard deviation per feature). On a stream the
        expert weights and ``S0``, which need the drawn split's values on the
        node's samples, are set by `_finish_stumps`."""
        if not growth.in_memory:
            k, b = self._draw_experts(1, growth.center(t, nodes), np.maximum(growth.feature_std(t, nodes), 1e-3))
            a["kernel"][t, n], a["bias"][t, n] = k[0], b[0]
            return
        at = growth.rows(t, nodes)
        xc, wc = growth.feats[at], growth.weights[at]
        mean = np.average(xc, axis=0, weights=wc)
        std = np.sqrt(np.average((xc - mean) ** 2, axis=0, weights=wc))
        k, b = self._draw_experts(1, mean, np.maximum(std, 1e-3))
        a["kernel"][t, n], a["bias"][t, n] = k[0], b[0]
        # r_k = 1/K scaled so the rate S spreads by about one unit over the
        # node's samples (a usable slope of f_lambda at lambda ~ 1), and S0
        # at the median rate (half of the samples on each side).
        rate = np.logaddexp(0.0, xc @ k[0].T + b[0]).mean(-1)
        rate_mean = np.average(rate, weights=wc)
        rate_std = math.sqrt(float(np.average((rate - rate_mean) ** 2, weights=wc)))
        scale = 1.0 / max(rate_std, 1e-6)
        log_scale = float(np.clip(np.log(scale), -9.0, 9.0))
        a["log_r"][t, n] = log_scale - math.log(self.num_experts)
        a["p0"][t, n] = _polytope_training.softplus_inverse(_polytope_training.weighted_median(rate, wc) * math.exp(log_scale))

    def _finish_stumps(self, growth, a, stumps):
        """On a stream: the new stumps' expert weights and ``S0`` from one pass
        (the rates' weighted moments and a log-spaced histogram for their
        median); with arrays `_init_stump` set them already."""
        if not growth.in_memory:
            _polytope_training.stream_finish_stumps(self, growth, a, stumps)

    def _judge_stumps(self, growth, a, stumps):
        """The threshold on each trained stump's split function with the
        largest information gain (variance reduction) on its samples becomes
        the deterministic split; a stump fails without a cut of gain above
        ``min_gain``. Arrays: the exact search over the sorted values; a
        stream: the search over histogram bins
        (`keras_trees.layers._polytope_training.stream_thresholds`)."""
        if not growth.in_memory:
            return _polytope_training.stream_judge_stumps(self, growth, a, stumps), True
        stop = growth.stops[:, 0]
        idx = np.flatnonzero(np.isin((stop - 1) // 2, [n for _, n in stumps]) & (stop > 0) & (growth.weights > 0))
        rate = self._split_values_numpy(growth.feats[idx])
        parent = (stop[idx] - 1) // 2
        results = {}
        for t, n in stumps:
            at = parent == n
            threshold, gain, _ = _polytope_training.best_threshold(
                rate[at, n], growth.targets[idx][at], self.num_classes, growth.options["min_samples_leaf"],
                sample_weight=growth.weights[idx][at])
            ok = threshold is not None and gain > growth.options["min_gain"]
            if ok:
                a["threshold"][t, n] = threshold
            results[(t, n)] = gain if ok else None
        return results, True

    # ------------------------------------------------------- interpretation
    def polytopes(self):
        """One dict per split node: the active facets and Theorem 1's inequalities.

        ``left`` (``S(x) <= c``) is a convex set inside the polytope
        ``{x : weights[k] . x + bias[k] <= offsets[k] for the active k}``;
        ``right`` is its complement. ``active`` lists experts with
        ``r_k >= facet_tolerance * max r``. ``p_threshold = 1 - exp(-c)`` is the
        threshold on the noisy-OR probability ``f``.
        """
        state = np.asarray(to_numpy(self.node_state))[0]
        kernel = np.asarray(to_numpy(self.expert_kernel))[0]
        bias = np.asarray(to_numpy(self.expert_bias))[0]
        r = np.exp(np.asarray(to_numpy(self.log_expert_weight), dtype=np.float64))[0]
        c = np.asarray(to_numpy(self.threshold), dtype=np.float64)[0]
        out = []
        for n in topology.splits(state[None], 0):
            active = np.flatnonzero(r[n] >= self.facet_tolerance * r[n].max())
            offsets = poly.facet_offsets(r[n], c[n])
            out.append({
                "node": int(n),
                "depth": int(topology.position_depth(n)),
                "threshold": float(c[n]),
                "p_threshold": float(-np.expm1(-c[n])),
                "active": active.tolist(),
                "expert_weights": r[n].tolist(),
                "weights": kernel[n][active],
                "bias": bias[n][active],
                "offsets": offsets[active],
            })
        return out

    def describe(self):
        """A readable summary: the topology with facets per split."""
        lines = []
        info = {p["node"]: p for p in self.polytopes()}
        state = np.asarray(to_numpy(self.node_state))
        values = np.asarray(to_numpy(self.leaf_values))[0]
        for n in np.flatnonzero(state[0] != topology.ABSENT):
            pad = "  " * int(topology.position_depth(n))
            if n in info:
                p = info[n]
                lines.append(f"{pad}{n}: split, {len(p['active'])}/{self.num_experts} active facets, "
                             f"right iff f(x) > {p['p_threshold']:.4g}")
            else:
                v = values[n]
                desc = f"class {int(np.argmax(v))} (p={v.max():.3f})" if self.is_classifier else f"value {np.round(v, 4).tolist()}"
                lines.append(f"{pad}{n}: leaf, {desc}")
        return "\n".join(lines)

    def _forest(self):
        return Forest(
            family="convex_polytope_tree",
            node_state=numpy(self.node_state),
            split_kind="noisy_or",
            weights=numpy(self.expert_kernel),
            bias=numpy(self.expert_bias),
            expert_weights=numpy(self.expert_weights()),
            threshold=numpy(self.threshold),
            leaves=numpy(self.leaf_values),
            aggregation="mean",
            leaf_output="class distribution" if self.is_classifier else "regression value",
            input_dim=self.feature_dim,
            num_classes=self.num_classes,
            extra={"probability_right": "1 - exp(-sum_k r_k softplus(<w_k, x> + b_k))"},
        )

    # ------------------------------------------------------------ config
    def get_config(self):
        config = super().get_config()
        config.update({
            "max_depth": self.max_depth,
            "num_experts": self.num_experts,
            "num_classes": self.num_classes,
            "units": self.units,
            "prior": None if self.prior is None else self.prior.get_config(),
            "steepness": self.initial_steepness,
            "annealing": self.annealing,
            "facet_tolerance": self.facet_tolerance,
            "prune_threshold": self.prune_threshold,
            "seed": self.seed,
        })
        return config

    @classmethod
    def from_config(cls, config):
        # The constructor's own errors (a bad argument's ValueError naming it),
        # not Keras' wrapper, which turns them into a TypeError after a dump
        # of the whole config.
        return cls(**config)

    # ------------------------------------------------------------ training
    def fit_greedy(self, x, y=None, validation_data=None, **kwargs):
        """Greedy topology learning (Section 3.3.2).

        ``x`` are the layer's inputs (with labels ``y``), or a stream of
        ``(x, y[, sample_weight])`` batches (a ``tf.data.Dataset``, a
        ``keras.utils.PyDataset``, a list; ``y=None``): every statistic is then
        summed batch by batch and across workers, and thresholds come from a
        histogram search instead of the exact one. Keyword arguments (see
        `keras_trees.layers._polytope_training.fit_greedy`): ``max_depth``,
        ``epochs`` (per level), ``batch_size``, ``learning_rate``,
        ``annealing_increment``, ``min_samples_split``, ``min_samples_leaf``,
        ``min_gain``, ``refine_epochs``, ``refine_learning_rate``, ``verbose``
        (``"auto"``, 0, 1, 2: one line per level), ``sample_weight`` and
        ``class_weight`` (as in ``keras.Model.fit``). Works on every backend
        and inside a ``tf.distribute`` strategy's scope. Returns a history dict.
        """
        with _gradient_step.distribution_scope(self.variables):
            return _polytope_training.fit_greedy(self, x, y, validation_data=validation_data, **kwargs)

    def refine(self, x, y=None, validation_data=None, **kwargs):
        """Joint refinement of all splits (Section 3.3.1, Algorithm 1); see
        `keras_trees.layers._polytope_training.refine` (``epochs``,
        ``batch_size``, ``learning_rate``, ``annealing_increment``,
        ``start_steepness``, ``verbose``, ``sample_weight``, ``class_weight``);
        ``x`` may be a stream of batches (``y=None``) as for [`fit_greedy`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.fit_greedy]."""
        with _gradient_step.distribution_scope(self.variables):
            return _polytope_training.refine(self, x, y, validation_data=validation_data, **kwargs)
