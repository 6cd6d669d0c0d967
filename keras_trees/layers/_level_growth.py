"""One level-growth engine for the heap tree layers (`keras_trees.layers._heap`).

Greedy growth of end-to-end trees ([`keras_trees.callbacks.GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth],
Hehn et al. 2019, Section 2.5) and of convex polytope trees
([`ConvexPolytopeTree.fit_greedy`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree.fit_greedy], Armandpour & Zhou 2021, Section 3.3.2)
is the same procedure with a different objective:

1. every leaf that may still split holds a *candidate stump* (a split being
   trained at that leaf, marked in the layer's ``candidate`` state);
2. a driver trains the stumps, each on the samples routed to it (Keras ``fit``
   for end-to-end trees, the layer's own steps for polytope trees);
3. `LevelGrowth.end_round` routes the training data with the stumps
   acting as splits, asks the layer to judge every stump with its objective
   (``_judge_stumps``), retries failed stumps (up to ``max_attempts``),
   commits the others (level by level, or best gain first) and puts fresh
   stumps on the new leaves that may still split (``_init_stump``).

The engine owns routing the data, the node statistics, the eligibility of a
leaf and the topology edits. The statistics are sums over samples, computed
by one pass over the data per routing (batch by batch; for a stream summed
across workers with one [`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum], so that
every worker takes the same decisions); all state lives in the layer's variables (read
and written through ``_read_growth`` / ``_write_growth``: NumPy arrays with at
least ``"state"`` (``node_state``) and ``"candidate"`` (``(num_trees,
2**max_depth - 1)`` 0/1), and optionally ``"attempts"`` and ``"gain"``,
persisted where the layer keeps them). Nothing is added during training.

Layer hooks (the family's objective and split proposal):

* ``_init_stump(growth, arrays, t, n, nodes)``: a fresh stump at leaf ``n`` of
  tree ``t`` (writes its split parameters into ``arrays``); its samples are
  those that stop at the heap positions ``nodes`` under the current routing
  (`LevelGrowth.center`, `LevelGrowth.feature_std` from the
  node statistics; `LevelGrowth.rows` for arrays only).
* ``_finish_stumps(growth, arrays, stumps)`` (optional): completes the
  round's new stumps ``[(t, n, nodes)]`` at once, after all were drawn (a
  stream needs a pass over the data for statistics of a drawn split).
* ``_judge_stumps(growth, arrays, stumps)``: ``({(t, n): gain or None}, moved)``
  for the trained stumps: None where the stump failed, else its gain (used
  by best-first growth); ``moved`` when the test changed split parameters
  (then the data is routed again before the children are looked at).
"""

import numpy as np

from keras_trees import topology
from keras_trees.forest import node_sums

# Growth phases of layers grown inside ``fit`` (their ``growth_phase`` variable).
PHASE_IDLE, PHASE_GROWING, PHASE_FINETUNING, PHASE_DONE = 0, 1, 2, 3


def _same_mask(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a is b or np.array_equal(a, b)


def _check_rows(layer, feats, targets, weights):
    rows = {len(feats), len(targets), len(weights)}
    if len(rows) != 1 or np.ndim(feats) != 2:
        raise ValueError(
            f"growing {type(layer).__name__} {layer.name!r} needs one row of features per target and "
            f"weight, got features of shape {np.shape(feats)}, {len(targets)} targets and "
            f"{len(weights)} weights (growth reads inputs of shape (samples, features); inputs "
            "with extra leading axes are not supported here)"
        )


class LevelGrowth:
    """The growth engine for one layer and one training set (see the module docs).

    Two kinds of data:

    * arrays (``LevelGrowth(layer, feats, targets, weights, ...)``): kept in
      memory; every worker holds all of them (nothing is summed across
      workers), and the hooks may read rows (`rows`, ``stops``,
      ``feats``, ``targets``, ``weights``);
    * a stream (`LevelGrowth.streamed`): re-iterable batches of
      ``(feats, targets, weights)`` (this worker's part of the data). Every
      statistic is accumulated batch by batch and summed across workers with
      one [`keras_trees.streaming.all_reduce_sum`][keras_trees.streaming.all_reduce_sum] per pass, so every
      worker takes the same decisions; no per-row array is kept (memory does
      not grow with the number of rows) and `rows` is not available
      (hooks use the node statistics, or their own passes through
      `accumulate`).

    Args:
        layer: a heap tree layer implementing the hooks.
        feats: ``(n, feature_dim)`` NumPy rows the splits read.
        targets: ``(n,)`` class ids (classification) or ``(n, units)`` targets.
        weights: ``(n,)`` sample weights.
        min_samples_split: leaves with less stay leaves.
        count_samples: count samples of positive weight (True) or the weight
            (False; an integer weight equals repeating the sample).
        max_depth: deepest level a split may sit on, minus one (default: the
            layer's ``max_depth``).
        max_leaves: optional leaf budget per tree.
        max_attempts: tries per stump.
        best_first: commit the stump of largest gain, one per tree and round.
        batch_size: rows per routing batch.
        options: the family's own settings, for its hooks.
        feature_moments: per-position feature statistics every pass computes:
            0 none, 1 weighted sums (`center`), 2 also weighted squared
            sums (`feature_std`).
    """

    def __init__(self, layer, feats, targets, weights, min_samples_split=2, count_samples=False,
                 max_depth=None, max_leaves=None, max_attempts=1, best_first=False, batch_size=4096, options=None,
                 feature_moments=1):
        self.feats, self.targets = feats, targets
        self.weights = np.asarray(weights, np.float64)
        _check_rows(layer, feats, targets, self.weights)
        self._setup(layer, lambda: iter([(feats, targets, self.weights)]), True, None, min_samples_split,
                    count_samples, max_depth, max_leaves, max_attempts, best_first, batch_size, options,
                    feature_moments)

    @classmethod
    def streamed(cls, layer, batches, model=None, min_samples_split=2, count_samples=False, max_depth=None,
                 max_leaves=None, max_attempts=1, best_first=False, batch_size=4096, options=None,
                 feature_moments=1):
        """The engine on a stream: ``batches`` is a re-iterable (or a function
        returning an iterator) of ``(feats (b, feature_dim), targets, weights
        (b,))`` NumPy batches, this worker's part of the data; ``model`` selects
        the distribution strategy whose workers the statistics are summed over.
        Other arguments as for the constructor."""
        self = cls.__new__(cls)
        self.feats = self.targets = self.weights = None
        source = batches if callable(batches) else (lambda: iter(batches))
        self._setup(layer, source, False, model, min_samples_split, count_samples, max_depth, max_leaves,
                    max_attempts, best_first, batch_size, options, feature_moments)
        return self

    def _setup(self, layer, source, in_memory, model, min_samples_split, count_samples, max_depth, max_leaves,
               max_attempts, best_first, batch_size, options, feature_moments):
        self.layer = layer
        self._source, self.in_memory, self.model = source, in_memory, model
        self.min_samples_split = min_samples_split
        self.count_samples = count_samples
        self.max_depth = layer.max_depth if max_depth is None else int(max_depth)
        self.max_leaves = max_leaves
        self.max_attempts = max_attempts
        self.best_first = best_first
        self.batch_size = batch_size
        self.options = dict(options or {})
        self.feature_moments = int(feature_moments)
        self.stops = self.stats = None
        self.is_split = None
        self._new_stumps = []

    # ------------------------------------------------------------- data
    def _stops(self, feats, is_split):
        if is_split is None:
            return np.zeros((len(feats), self.layer.num_trees), np.int64)
        return self.layer.route_rows(feats, is_split, self.batch_size)

    def accumulate(self, fn, is_split="current"):
        """One pass over the data: ``fn(feats, targets, weights, stops)`` on every
        batch (``stops``: ``(b, num_trees)`` heap positions the rows reach,
        routed with ``is_split`` acting as the splits; default: the routing of
        the last [`route`][keras_trees.topology.route]) returns a list of arrays of fixed shapes; their
        sums over all batches (and over all workers, for a stream: one
        all-reduce) are returned as float64 arrays. Every worker must call it
        at the same point (it is a collective for streams)."""
        from keras_trees import streaming

        if isinstance(is_split, str):
            is_split = self.is_split
        total = None
        for feats, targets, weights in self._source():
            if not self.in_memory:
                _check_rows(self.layer, feats, targets, weights)
            if self.in_memory and self.stops is not None and _same_mask(is_split, self.is_split):
                stops = self.stops  # routed already
            else:
                stops = self._stops(feats, is_split)
            parts = [np.asarray(p, np.float64) for p in fn(feats, targets, weights, stops)]
            total = parts if total is None else [a + b for a, b in zip(total, parts)]
        if total is None:  # this worker has no batch: it adds zeros (an empty batch)
            layer = self.layer
            targets = np.zeros(0, np.int64) if layer.is_classifier else np.zeros((0, layer.units))
            feats = np.zeros((0, layer.feature_dim))
            total = [np.asarray(p, np.float64) for p in fn(feats, targets, np.zeros(0), self._stops(feats, is_split))]
        if self.in_memory:
            return total  # every worker holds all the rows
        return streaming.all_reduce_sum(total, model=self.model)

    def route(self, is_split=None):
        """Routes the data (``is_split``: the positions acting as splits) and
        computes the node statistics of where it stops (one pass)."""
        self.is_split = None if is_split is None else np.asarray(is_split, bool)
        if self.in_memory:
            self.stops = None
            self.stops = self._stops(self.feats, self.is_split)
        names = ["counts", "reg", "sq", "samples", "fsum", "fsq"]
        sums = self.accumulate(self._batch_statistics)
        out = dict(zip(names, sums))
        self.stats = {"counts": out["counts"], "samples": out["samples"],
                      "reg": None if self.layer.is_classifier else (out["reg"], out["sq"])}
        self._feature_sums = out["fsum"] if self.feature_moments >= 1 else None
        self._feature_squares = out["fsq"] if self.feature_moments >= 2 else None

    def _batch_statistics(self, feats, targets, weights, stops):
        """Per position (where samples stop): weighted class counts ``(T, N, K)``
        or mass ``(T, N, 1)`` with target sums ``(T, N, U)`` and squared sums
        ``(T, N)``, the samples of positive weight ``(T, N)`` and the weighted
        feature sums (squares) ``(T, N, q)`` (empty when not asked for)."""
        layer, N = self.layer, self.layer.num_positions
        w, y = np.asarray(weights, np.float64), targets
        T = stops.shape[1]
        samples = node_sums(stops, w > 0, N)[..., 0]
        empty = np.zeros((T, N, 0))
        if layer.is_classifier:
            counts = node_sums(stops, np.eye(layer.num_classes)[np.asarray(y, np.int64)], N, w)
            reg, sq = empty, np.zeros((T, N))
        else:
            y = np.asarray(y, np.float64)
            moments = node_sums(stops, np.concatenate([np.ones((len(y), 1)), y, (y * y).sum(1, keepdims=True)], 1),
                                N, w)
            counts, reg, sq = moments[..., :1], moments[..., 1:-1], moments[..., -1]
        fsum = node_sums(stops, feats, N, w) if self.feature_moments >= 1 else empty
        fsq = node_sums(stops, np.square(np.asarray(feats, np.float64)), N, w) if self.feature_moments >= 2 else empty
        return [counts, reg, sq, samples, fsum, fsq]

    def rows(self, t, nodes):
        """Indices of the samples of positive weight stopping at ``nodes`` of
        tree ``t`` (arrays only: a stream keeps no rows)."""
        if not self.in_memory:
            raise RuntimeError("LevelGrowth.rows: the data is a stream (no rows are kept); use the node statistics")
        return np.flatnonzero(np.isin(self.stops[:, t], nodes) & (self.weights > 0))

    def _node_total(self, t, nodes):
        sizes = self.stats["counts"].sum(-1)
        return sum(sizes[t, c] for c in nodes)

    def center(self, t, nodes):
        """Weighted mean of the rows stopping at ``nodes`` of tree ``t`` (of all
        rows when they hold none)."""
        total = self._node_total(t, nodes)
        if total > 0 and list(nodes) != [0]:
            return sum(self._feature_sums[t, c] for c in nodes) / total
        # All rows: every row stops somewhere in tree 0.
        return self._feature_sums[0].sum(0) / self.stats["counts"][0].sum()

    def feature_std(self, t, nodes):
        """Weighted standard deviation per feature of the rows at ``nodes`` of
        tree ``t`` (of all rows when they hold none); needs ``feature_moments=2``."""
        total = self._node_total(t, nodes)
        if total > 0:
            s = sum(self._feature_sums[t, c] for c in nodes)
            q = sum(self._feature_squares[t, c] for c in nodes)
        else:
            total = self.stats["counts"][0].sum()
            s, q = self._feature_sums[0].sum(0), self._feature_squares[0].sum(0)
        mean = s / total
        return np.sqrt(np.maximum(q / total - mean * mean, 0.0))

    def node_value(self, t, n, fallback):
        """Class distribution (mean target) of the samples at ``n``, or ``fallback``."""
        counts = self.stats["counts"]
        total = counts[t, n].sum()
        if total == 0:
            return fallback
        return counts[t, n] / total if self.layer.is_classifier else self.stats["reg"][0][t, n] / total

    # ------------------------------------------------------------- rules
    def splittable(self, state, t, n):
        """Whether leaf ``n`` of tree ``t`` may get a stump: inside the depth
        limit, enough samples, not pure (classes) or constant (targets), and
        leaf budget left."""
        if n >= self.layer.num_internal or topology.position_depth(n) >= self.max_depth:
            return False
        counts = self.stats["counts"]
        total = counts[t, n].sum()
        if (self.stats["samples"][t, n] if self.count_samples else total) < self.min_samples_split:
            return False
        if self.layer.is_classifier:
            if np.count_nonzero(counts[t, n]) <= 1:
                return False  # pure
        else:
            sums, sq = self.stats["reg"]
            var = sq[t, n] / total - (sums[t, n] ** 2).sum() / total ** 2
            if var <= 1e-12 * max(1.0, sq[t, n] / total):
                return False
        if self.max_leaves is not None and topology.num_leaves(state)[t] >= self.max_leaves:
            return False
        return True

    # ------------------------------------------------------------ rounds
    def _arrays(self):
        a = self.layer._read_growth()
        shape = a["candidate"].shape
        a.setdefault("attempts", np.zeros(shape, np.int32))
        a.setdefault("gain", np.full(shape, -np.inf))
        return a

    def _stump(self, a, t, n, nodes):
        self.layer._init_stump(self, a, t, n, nodes)
        a["candidate"][t, n] = 1
        a["gain"][t, n] = -np.inf
        self._new_stumps.append((t, n, list(nodes)))

    def _finish_stumps(self, a):
        """The layer's optional ``_finish_stumps(growth, arrays, stumps)`` hook
        completes this round's new stumps ``[(t, n, nodes)]`` together (e.g.
        with one more pass over a stream, under the current routing)."""
        new, self._new_stumps = self._new_stumps, []
        finish = getattr(self.layer, "_finish_stumps", None)
        if new and finish is not None:
            finish(self, a, new)

    def start(self, arrays=None, before_stumps=None):
        """Root leaves everywhere, with a stump where the root may split.
        ``before_stumps(growth, arrays)`` runs once the root statistics are
        known (e.g. to set the root's leaf value). Returns the arrays written."""
        a = self._arrays() if arrays is None else arrays
        T = a["state"].shape[0]
        a["state"] = topology.root_leaf(T, self.layer.max_depth)
        for key in ("candidate", "attempts"):
            a[key][:] = 0
        a["gain"][:] = -np.inf
        self.route(None)
        if not self.stats["counts"][0].sum() > 0:
            raise ValueError(f"growing {self.layer.name!r}: the sample weights are zero for every sample")
        if before_stumps is not None:
            before_stumps(self, a)
        for t in range(T):
            if self.splittable(a["state"], t, 0):
                self._stump(a, t, 0, [0])
        self._finish_stumps(a)
        self.layer._write_growth(a)
        return a

    def end_round(self):
        """Judges the trained stumps, retries or commits them and puts stumps
        on the new leaves that may split. Returns ``(stumps, committed)``:
        the ``(tree, node)`` pairs judged and those that became splits."""
        a = self._arrays()
        state, I = a["state"], self.layer.num_internal
        leaf = state[:, :I] == topology.LEAF
        training = (a["candidate"] == 1) & leaf
        # Best-first: stumps that succeeded in earlier rounds but were not
        # committed yet wait (finite gain, no longer trained).
        waiting = leaf & np.isfinite(a["gain"]) & ~training
        # Routed with the stumps acting as splits, the statistics at their
        # children are the data each child would receive.
        mask = topology.is_split_mask(state) | training | waiting
        self.route(mask)
        stumps = [(int(t), int(n)) for t, n in zip(*np.nonzero(training))]
        results, moved = self.layer._judge_stumps(self, a, stumps)
        passed = []
        for t, n in stumps:
            a["candidate"][t, n] = 0
            gain = results[(t, n)]
            if gain is None:  # failed
                a["attempts"][t, n] += 1
                if a["attempts"][t, n] < self.max_attempts:
                    self._stump(a, t, n, [2 * n + 1, 2 * n + 2])
                continue
            if self.best_first:
                a["gain"][t, n] = gain
            else:
                passed.append((t, n))
        if moved:  # the judge moved splits: route again for the children
            self.layer._write_growth(a)
            self.route(mask)
        committed = []

        def commit(t, n):
            if self.max_leaves is not None and topology.num_leaves(a["state"])[t] >= self.max_leaves:
                return  # leaf budget used up: the node stays a leaf
            a["state"] = topology.split_leaf(a["state"], t, n)
            a["gain"][t, n] = -np.inf
            committed.append((t, n))
            for c in (2 * n + 1, 2 * n + 2):  # new candidates: the children of the split
                if c < I and a["attempts"][t, c] == 0 and self.splittable(a["state"], t, c):
                    self._stump(a, t, c, [c])

        def best_waiting(t):
            if topology.num_leaves(a["state"])[t] >= self.max_leaves:
                return None
            gains = np.where(a["state"][t, :I] == topology.LEAF, a["gain"][t], -np.inf)
            return int(np.argmax(gains)) if np.isfinite(gains.max()) else None

        for t, n in passed:
            commit(t, n)
        if self.best_first:
            for t in range(state.shape[0]):
                # One commit per round; while the tree has no stump to train, the
                # next best already-trained stump is committed right away (a round
                # training nothing would only waste epochs, and stopping would
                # leave trained stumps and leaf budget unused).
                n = best_waiting(t)
                while n is not None:
                    commit(t, n)
                    if (a["candidate"][t] == 1).any():
                        break
                    n = best_waiting(t)
        topology.validate(a["state"])
        self._finish_stumps(a)
        self.layer._write_growth(a)
        return stumps, committed
