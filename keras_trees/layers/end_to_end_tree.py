"""End-to-end learned deterministic decision tree (Hehn, Kooij & Hamprecht, IJCV 2019)."""

from keras_trees.api_export import keras_trees_export
from keras_trees.layers._end_to_end import EndToEndTreesBase


@keras_trees_export("keras_trees.layers")
class EndToEndTree(EndToEndTreesBase):
    """A decision tree that is probabilistic while training and deterministic at test time.

    Split ``i`` computes the split feature ``f_i(x) = (x, 1) . beta_i`` (oblique
    by default; ``split_type="axis_aligned"`` uses one input feature per split;
    ``split_features`` puts any Keras layer or model in front, trained end to
    end; ``split_type="per_split"`` with [`keras_trees.layers.per_split_features`][keras_trees.layers.per_split_features.per_split_features]
    gives every split its own small CNN, Section 3.4) and sends a sample right with probability
    ``sigmoid(steepness_i f_i(x))`` during training (Eq. 3, 5; the paper's
    ``gamma_i``). At inference (``predict``, ``call(training=False)``) every
    sample follows a single path (steepness -> infinity: right iff
    ``f_i(x) > 0``) through the compiled
    hard-routing op, so at most ``max_depth`` splits are evaluated; the
    probabilistic posterior of Eq. 2 is available with ``posterior(x)`` or
    ``call(x, routing="soft")``.

    Classification leaves hold categorical distributions (outputs are class
    probabilities; train with ``SparseCategoricalCrossentropy()``). With
    [`keras_trees.callbacks.EMLeafUpdate`][keras_trees.callbacks.em_leaf_update.EMLeafUpdate] they are learned by the
    closed-form EM update of Eq. 13 while the optimizer updates the splits
    (Eq. 14: the gradient of the log-likelihood with respect to the splits
    equals the gradient of Eq. 14 at the current responsibilities). Without
    the callback (plain ``fit``, scikit-learn wrappers, ...) the optimizer
    trains them too, as the softmax of trainable logits (``leaf_learning``).
    Regression leaves (``units=...``) are trained by the optimizer.

    Inputs: one sample is everything after the batch axis of the shape the
    layer is built on (a feature vector, or an image for ``patch_size``,
    [`keras_trees.regularizers.SpatialLaplacian`][keras_trees.regularizers.spatial_laplacian.SpatialLaplacian] or a ``split_features``
    CNN), flattened for the splits. Axes in front of it are kept, like
    ``keras.layers.Dense``: built on ``(None, 4)`` and called on ``(2, 5, 4)``
    the layer returns ``(2, 5, K)`` (``call``, ``posterior``, ``route``);
    growth and EM need one row per label. ``x`` must be real numbers (strings
    raise ``TypeError``) and finite: NaN or Inf in ``x``, in a split
    parameter, steepness or leaf, and a ``node_state`` that breaks the rules of
    `keras_trees.topology` raise an error naming ``x`` or the layer and the
    variable, in eager calls, inside ``fit``/``predict`` and ``jax.jit``, and
    when a ``.keras`` file or ``load_weights`` loads them.

    Mixed precision: the layer routes in its variable dtype (float32) under
    ``mixed_float16``/``mixed_bfloat16`` policies (inputs are cast to it) and
    returns outputs in the compute dtype. The topology (`keras_trees.topology`) is a
    heap of maximum depth ``max_depth`` held in Keras variables;
    [`keras_trees.callbacks.GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth] grows it from a root stump
    (Section 2.5) and [`keras_trees.callbacks.SteepnessAnnealing`][keras_trees.callbacks.steepness_annealing.SteepnessAnnealing] raises
    each split's steepness (Table 1).

    Variables (per position of the heap, see `keras_trees.topology`):
    ``split_kernel`` ``(1, 2**D - 1, q)``, ``split_bias`` ``(1, 2**D - 1)``,
    ``feature_mask`` (which features each split may use), ``gamma`` (the
    current steepness per split; the variable keeps the paper's name so that
    saved weight paths stay stable), ``node_state`` (topology), the leaves ``(1, 2**(D+1) - 1, K)``
    (classification: ``leaf_table``, the EM distributions, and the trainable
    ``leaf_logits``, selected by ``leaf_mode``; read the leaves in use with the
    ``leaf_values`` property, write them with ``set_leaf_values``; regression:
    the trainable ``leaf_table``), and growth bookkeeping (``candidate``,
    ``node_epochs``, ``attempts``, ``candidate_gain``, ``growing``,
    ``growth_phase``, ``phase_epoch``). All are allocated when the layer is built;
    growth only assigns values.

    Args:
        max_depth: maximum depth ``D`` (the heap holds ``2**D`` leaves).
        num_classes: number of classes: leaves hold class distributions and
            the layer outputs class probabilities (train with
            ``SparseCategoricalCrossentropy()``, not ``from_logits``); or
        units: number of raw outputs, here regression values (exactly one of
            the two).
        initial_topology: ``"perfect"`` (balanced tree of ``max_depth``, for
            plain end-to-end training, "Finetune"), ``"stump"`` or ``"leaf"``;
            ``GreedyLevelGrowth`` resets it to a root stump.
        split_type: ``"oblique"``, ``"axis_aligned"`` (one random feature per
            split, redrawn on every growth attempt) or ``"per_split"`` (split
            ``n`` reads only output ``n`` of ``split_features``: one feature
            model per split, the paper's Section 3.4; see
            [`keras_trees.layers.per_split_features`][keras_trees.layers.per_split_features.per_split_features]).
        split_features: optional Keras layer/model computing split features
            from the input (shared by all splits unless ``split_type="per_split"``,
            trained end to end).
        steepness: initial steepness of every split's sigmoid (the paper's
            ``gamma``, 1.0), > 0; bigger is harder. Its deprecated name
            ``gamma`` still works, with a warning.
        inference_routing: ``"hard"`` (default) or ``"soft"`` for ``call(training=False)``.
        split_regularizer: regularizer of ``split_kernel``, e.g.
            [`keras_trees.regularizers.SpatialLaplacian`][keras_trees.regularizers.spatial_laplacian.SpatialLaplacian] (Eq. 15).
        leaf_smoothing: pseudo-count (relative to a leaf's data mass) that keeps
            EM leaf probabilities away from exactly 0.
        leaf_learning: how classification leaves learn: ``"em"`` (only by
            ``EMLeafUpdate``; a ``fit`` without it leaves them unchanged),
            ``"gradient"`` (by the optimizer, as trainable logits; ``EMLeafUpdate``
            refuses the layer) or ``"auto"`` (default: by EM during a ``fit``
            with ``EMLeafUpdate``, which takes over the current leaves and hands
            its result back to the logits when training ends; by the optimizer
            in every other ``fit``).
        prune_threshold: probabilistic routing (training, ``routing="soft"``,
            the EM statistics) walks each sample depth first and drops a
            subtree once the sample's path probability into it falls below
            this value, except the child a split favours (the deterministic
            path), so every sample keeps at least one leaf per tree; the kept
            paths are all the compiled kernel evaluates, forward and backward
            (`keras_trees.ops.pruned_routing`). Bound: the probability
            mass a sample loses in a tree is below ``prune_threshold`` times
            the subtrees dropped there (at most one per visited split), and the
            tree's output (a class distribution) moves by at most that mass.
            The default ``1e-4`` keeps every subtree holding 0.01% of a
            sample's mass, so even a sample that visits 100 splits of a tree
            loses less than 1% of its mass there; as the steepness anneals
            almost every sample keeps one path. ``0`` is exact: the dense
            computation (every present split for every sample), unchanged.
        split_screening: None (default: every stump reads all its features,
            the paper's split) or ``r`` in (0, 1]: while
            [`keras_trees.callbacks.GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth] grows the tree,
            each new stump reads only the features whose best single
            threshold on the training rows reaching it gains at least ``r``
            times the best feature's (information gain; variance reduction
            for regression), searched exactly in one pass over the data; the
            others are masked out (``feature_mask``). Sparse splits where one
            column carries a node's signal (one-hot and coded columns), dense
            ones where many do. Needs every training row on one worker.
        seed: seed of the random split directions (unit sphere) and feature subsets.

    Example:

    >>> import numpy as np, keras
    >>> from keras_trees.layers import EndToEndTree
    >>> from keras_trees.callbacks import EMLeafUpdate, SteepnessAnnealing
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(256, 4)).astype("float32"); y = (x[:, 0] > 0).astype("int32")
    >>> model = keras.Sequential([keras.Input((4,)), EndToEndTree(max_depth=2, num_classes=2, seed=0)])
    >>> model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    >>> _ = model.fit(x, y, batch_size=64, epochs=3, verbose=0,
    ...               callbacks=[EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    >>> model.predict(x, verbose=0).shape
    (256, 2)
    """

    # One tree: num_leaves() and num_splits() return plain ints.
    single_tree = True

    def __init__(self, max_depth=6, num_classes=None, units=None, **kwargs):
        kwargs.pop("num_trees", None)
        super().__init__(num_trees=1, max_depth=max_depth, num_classes=num_classes, units=units, **kwargs)

    def get_config(self):
        return super().get_config()
