"""Greedy growth of end-to-end trees and forests (Hehn et al. 2019, Sections 2.5, 3.4)."""

import warnings

import keras
import numpy as np
from keras import ops

from keras_trees._arrays import to_numpy
from keras_trees import streaming
from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks._common import (
    check_data, check_labels, check_weights, compiled, end_to_end_layers,
    ensure_built, flag, identity, layer_input_fn, layer_names, nonnegative_int, positive_int, reset_optimizer,
    weights_config,
)
from keras_trees.layers import _validation
from keras_trees.layers._level_growth import (
    PHASE_DONE, PHASE_FINETUNING, PHASE_GROWING, PHASE_IDLE, LevelGrowth,
)


@keras_trees_export("keras_trees.callbacks")
class GreedyLevelGrowth(keras.callbacks.Callback):
    """Grows trees from a root stump inside ``model.fit``, then finetunes them jointly.

    Greedy phase (Section 2.5). Every candidate node holds a *stump* (one split
    and two leaves) that is trained for ``epochs_per_level`` epochs on only the
    samples deterministically routed to it (the layer's growth-time model is
    hard through committed splits and probabilistic at the stumps). After a
    level:

    * a stump whose samples all go one way has *failed* and is retrained from a
      fresh random split (new feature subset, steepness reset) up to ``max_attempts``
      times in total, after which the node stays a leaf;
    * a successful stump is committed: the node becomes a split and its two
      leaves keep the stump's leaf distributions;
    * each new leaf becomes a candidate unless its data is pure, has fewer than
      ``min_samples_split`` samples, it is at ``max_depth``, or the tree has
      ``max_leaves`` leaves.

    With ``best_first=True`` (Section 3.4) every leaf holds a trained candidate
    stump and only the one with the largest information gain (computed from the
    stump's leaf distributions and its hard split fractions, as in the authors'
    code) is committed per round, until ``max_leaves``. Trees of a forest grow
    at the same time; this equals growing them one by one because a stump's
    loss only depends on its own parameters and data.

    Finetune phase. When no candidate is left, all splits become probabilistic
    and the whole model trains end to end for ``finetune_epochs`` (default
    ``3 * epochs_per_level``, the paper's forest setting); then training stops
    (``model.stop_training``), so pass ``epochs=callback.max_epochs`` (an upper
    bound) to ``fit``. Each new level and the finetune phase start with a fresh
    optimizer state, like the authors' fresh Adam per stump.

    New stumps start at the layer's initial ``steepness`` (anneal with
    [`SteepnessAnnealing`][keras_trees.callbacks.steepness_annealing.SteepnessAnnealing]), a split direction uniform on the unit sphere
    and a bias placing the hyperplane through the mean of the node's samples.
    All progress lives in the layer's variables (``node_state``, ``candidate``,
    ``attempts``, ``candidate_gain``, ``growing``, ``growth_phase``,
    ``phase_epoch``). New split directions and feature subsets come from the
    layer's generator (seeded by its ``seed``, or with ``seed=None`` by NumPy's
    global generator, so ``keras.utils.set_random_seed`` makes growth
    reproducible).

    Weights: a callback cannot see the ``sample_weight``/``class_weight`` given
    to ``fit``; pass them here as well. They weight every statistic growth
    computes: class counts and leaf distributions (or regression sums), the
    purity, ``min_samples_split`` and failed-split checks, the information
    gains of ``best_first`` and the data centers new stumps start from (an
    integer weight equals repeating the sample; zero-weight samples are
    ignored). ``class_weight`` (classification only) maps class ids to
    weights, omitted classes weigh 1, and excludes ``sample_weight`` (as in Keras).

    Progress: at the end of every epoch the callback writes ``growth_phase``
    (1 growing, 2 finetuning, 3 done, for the next epoch) and ``num_leaves``
    (leaves of all trees) into ``logs`` (with several grown layers:
    ``<layer name>/growth_phase`` and ``<layer name>/num_leaves``), so
    ``History``, ``CSVLogger`` and ``TensorBoard`` record them; list this
    callback before those in ``callbacks``. With ``verbose=1`` it prints one
    line per finished level (depth, leaves, the epoch's loss and validation
    metrics) and one when finetuning starts and ends.

    Data: arrays ``x``, ``y`` (as given to ``fit``), or a stream of batches
    with ``y=None``: a batched ``tf.data.Dataset``, a ``keras.utils.PyDataset``
    or any re-iterable (or function returning an iterable) of ``(x, y)`` or
    ``(x, y, sample_weight)`` batches ([`keras_trees.streaming.stream`][keras_trees.streaming.stream]).
    Every round makes one pass over the data: each batch is mapped to the
    layer's split features, routed, and its node statistics (class counts or
    target moments, sample counts, feature sums for the stump centers) are
    added up; under a multi-worker strategy each worker reads its shard and
    the sums are added across workers (one
    [`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum] per pass) before any leaf,
    split or topology changes, so every replica decides the same (give the
    layer a ``seed``, or the same global seed on every worker, so their new
    stumps are drawn alike). No row is kept (arrays are read the same way,
    in blocks of ``batch_size``).

    Args:
        x, y: training inputs and labels (integer classes; float targets for
            regression layers), or a stream of batches as ``x`` and no ``y``.
        epochs_per_level: epochs each stump trains (paper: 20-65; 45 for forests).
        finetune_epochs: joint finetuning epochs after growth (default 3x).
        max_leaves: optional leaf limit per tree (required for ``best_first``).
        min_samples_split: nodes with fewer samples become leaves.
        max_attempts: tries per split (authors: 5).
        best_first: grow by largest information gain instead of level by level.
        batch_size: samples per batch of arrays (a stream keeps its batches).
        layers: optional layer name(s) to grow (default: every end-to-end layer,
            also inside nested sub-models).
        sample_weight: optional ``(n,)`` non-negative weights of the samples
            (arrays only: a stream gives them in its batches).
        class_weight: optional dict class id -> weight.
        verbose: 0 (silent) or 1 (one line per level).

    Example:

    >>> import numpy as np
    >>> from keras_trees.callbacks import GreedyLevelGrowth
    >>> g = GreedyLevelGrowth(np.zeros((4, 2), "float32"), np.array([0, 1, 0, 1]), epochs_per_level=5)
    >>> g.finetune_epochs
    15
    """

    def __init__(self, x, y=None, epochs_per_level=45, finetune_epochs=None, max_leaves=None,
                 min_samples_split=2, max_attempts=5, best_first=False, batch_size=4096, layers=None,
                 sample_weight=None, class_weight=None, verbose=0):
        super().__init__()
        self.x, self.y = x, y
        self.in_memory = y is not None or streaming._is_array_like(x)
        if self.in_memory:
            self.num_samples = check_data(x, y, "GreedyLevelGrowth")
            self.y = np.asarray(y)
        else:
            self.num_samples = None
            if sample_weight is not None:
                raise ValueError("GreedyLevelGrowth: with a dataset, give the sample weights inside its batches "
                                 "(x, y, sample_weight), not as sample_weight")
            streaming.stream(x, name="GreedyLevelGrowth")  # a data source it can read (else a clear error)
        self.epochs_per_level = positive_int("epochs_per_level", epochs_per_level)
        if finetune_epochs is None:
            finetune_epochs = 3 * self.epochs_per_level
        self.finetune_epochs = nonnegative_int("finetune_epochs", finetune_epochs)
        self.max_leaves = None if max_leaves is None else positive_int("max_leaves", max_leaves)
        self.min_samples_split = positive_int("min_samples_split", min_samples_split)
        self.max_attempts = positive_int("max_attempts", max_attempts)
        self.best_first = flag("best_first", best_first)
        if self.best_first and self.max_leaves is None:
            raise ValueError("best_first=True needs max_leaves")
        self.batch_size = positive_int("batch_size", batch_size)
        self.layer_names = layer_names(layers)
        self.sample_weight, self.class_weight = check_weights(
            sample_weight, class_weight, self.num_samples, "GreedyLevelGrowth"
        )
        self.verbose = nonnegative_int("verbose", verbose)
        self._fns = {}

    def max_epochs(self, max_depth):
        """Upper bound of the epochs growth plus finetuning can take (pass it to ``fit``).

        Growth proceeds in rounds of ``epochs_per_level`` epochs. A node can use
        up to ``max_attempts`` rounds before it is committed or given up, and its
        children only start after it is committed, so level by level the last
        round ends by ``max_depth * max_attempts`` (not ``max_depth +
        max_attempts``: retries on different levels of one path add up).
        Best-first commits at most one split per tree and round, and between two
        commits at most ``max_attempts`` rounds pass (every candidate stump
        failed in each of them), hence ``max_leaves * max_attempts`` rounds.
        ``fit`` stops as soon as growth and finetuning are done.
        """
        depth = positive_int("max_depth", max_depth)
        rounds = (self.max_leaves if self.best_first else depth) * self.max_attempts
        return rounds * self.epochs_per_level + self.finetune_epochs

    def get_config(self):  # the data (x, y, sample_weight) is not part of the config
        return {k: getattr(self, k) for k in (
            "epochs_per_level", "finetune_epochs", "max_leaves", "min_samples_split",
            "max_attempts", "best_first", "batch_size", "verbose")} | {
            "layers": self.layer_names, "class_weight": weights_config(self.class_weight)}

    def __deepcopy__(self, memo):
        clone = GreedyLevelGrowth(self.x, self.y, sample_weight=self.sample_weight,
                                  **self.get_config())
        memo[id(self)] = clone
        return clone

    # ---------------------------------------------------------------- data
    def _stream(self):
        """The training data as batches (this worker's part in a distributed run)."""
        if self.in_memory:
            return streaming.stream(self.x, self.y, self.sample_weight, batch_size=self.batch_size,
                                    name="GreedyLevelGrowth", model=self.model)
        return streaming.stream(self.x, name="GreedyLevelGrowth", model=self.model)

    def _class_table(self, layer):
        """Weights per class from ``class_weight`` (None without)."""
        if self.class_weight is None:
            return None
        if not layer.is_classifier:
            raise ValueError("GreedyLevelGrowth: class_weight needs a classification layer (num_classes=...)")
        return _validation.class_weight_table(self.class_weight, layer.num_classes, "GreedyLevelGrowth")

    def _targets(self, layer, y):
        if layer.is_classifier:
            return check_labels(y, layer.num_classes, "GreedyLevelGrowth")
        y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        if y.shape[1] != layer.units:
            raise ValueError(f"GreedyLevelGrowth: targets have {y.shape[1]} columns, the layer has units={layer.units}")
        if not np.all(np.isfinite(y)):
            raise ValueError("GreedyLevelGrowth: targets contain NaN or Inf")
        return y

    def _features(self, layer, x):
        """The split features ``(b, feature_dim)`` of one batch of inputs."""
        key = id(layer)
        if key not in self._fns:
            to_input = layer_input_fn(self.model, layer)
            if to_input is identity and layer.split_features is None:
                self._fns[key] = None  # the features are the inputs: no model to run
            else:
                self._fns[key] = compiled(lambda x: layer.features(to_input(x), training=False), self.model)
        fn = self._fns[key]
        if fn is None:
            feats = np.asarray(to_numpy(layer.features(x))).astype(np.float64)
        else:
            x = keras.tree.map_structure(ops.convert_to_tensor, x)
            feats = np.asarray(to_numpy(fn(x))).astype(np.float64)
        if not np.all(np.isfinite(feats)):
            raise ValueError("GreedyLevelGrowth: the split features contain NaN or Inf")
        return feats

    def _engine(self, layer):
        """The level-growth engine on this data: every round maps each batch to
        the layer's split features (they change while ``split_features``
        trains), routes it and adds up the node statistics, summed across
        workers once per pass."""
        table = self._class_table(layer)

        def batches():
            for x, y, w in self._stream():
                targets = self._targets(layer, y)
                yield self._features(layer, x), targets, _validation.batch_weights(targets, w, table, "GreedyLevelGrowth")

        return LevelGrowth.streamed(
            layer, batches, model=self.model,
            min_samples_split=self.min_samples_split, max_leaves=self.max_leaves,
            max_attempts=self.max_attempts, best_first=self.best_first, batch_size=self.batch_size,
        )

    def _sample(self):
        """A few inputs (to build the model)."""
        if self.in_memory:
            return self.x
        return self._stream().sample()

    # ------------------------------------------------------------ callbacks
    def on_train_begin(self, logs=None):
        self._fns = {}
        for layer in ensure_built(self.model, end_to_end_layers(self.model, self.layer_names), self._sample()):
            if int(to_numpy(layer.growth_phase)) in (PHASE_GROWING, PHASE_FINETUNING):
                continue  # resume where a previous fit stopped
            a = self._engine(layer).start(before_stumps=_root_leaf_values)
            layer.growing.assign(1)
            layer.growth_phase.assign(PHASE_GROWING)
            layer.phase_epoch.assign(0)
            if not a["candidate"].any():
                self._start_finetune(layer)

    def on_epoch_end(self, epoch, logs=None):
        layers = end_to_end_layers(self.model, self.layer_names)
        for layer in layers:
            phase = int(to_numpy(layer.growth_phase))
            if phase not in (PHASE_GROWING, PHASE_FINETUNING):
                continue
            done = int(to_numpy(layer.phase_epoch)) + 1
            layer.phase_epoch.assign(done)
            if phase == PHASE_GROWING and done >= self.epochs_per_level:
                layer.phase_epoch.assign(0)
                self._end_level(layer)
                self._report(layer, epoch, logs, "level")
            elif phase == PHASE_FINETUNING and done >= self.finetune_epochs:
                layer.growth_phase.assign(PHASE_DONE)
                self._report(layer, epoch, logs, "finetuned")
        phases = [int(to_numpy(layer.growth_phase)) for layer in layers]
        if logs is not None:
            for layer, phase in zip(layers, phases):
                prefix = "" if len(layers) == 1 else f"{layer.name}/"
                logs[prefix + "growth_phase"] = float(phase)
                logs[prefix + "num_leaves"] = float(np.sum(layer.num_leaves()))
        if all(p in (PHASE_DONE, PHASE_IDLE) for p in phases):
            self.model.stop_training = True

    def may_end_growth(self):
        """Whether the epoch now running can end greedy growth, read at its end
        before this callback's ``on_epoch_end``: growth only ends with a level,
        ``epochs_per_level`` epochs into it, so False inside a level of every
        growing layer (True once a layer finetunes, is done or never grew).
        The estimators' validation skips the epochs where it is False: early
        stopping does not read them (a partly grown tree is no candidate)."""
        for layer in end_to_end_layers(self.model, self.layer_names):
            if (int(to_numpy(layer.growth_phase)) != PHASE_GROWING
                    or int(to_numpy(layer.phase_epoch)) + 1 >= self.epochs_per_level):
                return True
        return False

    def _report(self, layer, epoch, logs, event):
        if not self.verbose:
            return
        leaves = np.atleast_1d(layer.num_leaves())  # an int for EndToEndTree
        parts = [f"GreedyLevelGrowth: epoch {epoch + 1}, {layer.name}"]
        if event == "finetuned":
            parts.append("finetuning done")
        else:
            phase = int(to_numpy(layer.growth_phase))
            parts.append(f"depth {int(layer.tree_depths().max())}")
            if phase == PHASE_FINETUNING:
                parts.append("growth done, finetuning")
            elif phase == PHASE_DONE:
                parts.append("growth done")
        parts.append(f"leaves {int(leaves.sum())}" + (f" ({leaves.min()}-{leaves.max()} per tree)"
                                                       if len(leaves) > 1 else ""))
        for key, value in sorted((logs or {}).items()):
            if key == "loss" or key.startswith("val_"):
                try:
                    parts.append(f"{key} {float(value):.4f}")
                except (TypeError, ValueError):
                    pass
        print(", ".join(parts), flush=True)

    def on_train_end(self, logs=None):
        for layer in end_to_end_layers(self.model, self.layer_names):
            if int(to_numpy(layer.growth_phase)) == PHASE_GROWING:
                warnings.warn(
                    f"GreedyLevelGrowth: fit() ended while {layer.name} was still growing (the "
                    "layer stays in its greedy-growth mode, where only candidate stumps train). "
                    "Call fit() again with this callback to resume, and pass "
                    "epochs=callback.max_epochs(max_depth) to fit.",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def _start_finetune(self, layer):
        layer.candidate.assign(np.zeros(layer.candidate.shape, "int32"))
        layer.growing.assign(0)
        layer.phase_epoch.assign(0)
        layer.growth_phase.assign(PHASE_FINETUNING if self.finetune_epochs > 0 else PHASE_DONE)
        reset_optimizer(getattr(self.model, "optimizer", None))

    def _end_level(self, layer):
        self._engine(layer).end_round()
        if not np.asarray(to_numpy(layer.candidate)).any():
            self._start_finetune(layer)
        else:
            reset_optimizer(getattr(self.model, "optimizer", None))

def _root_leaf_values(growth, a):
    """Growth starts from root leaves holding the data's class distribution (mean target)."""
    a["epochs"][:] = 0
    for t in range(growth.layer.num_trees):
        a["leaves"][t, 0] = growth.node_value(t, 0, a["leaves"][t, 0])

