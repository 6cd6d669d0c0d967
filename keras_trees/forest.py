"""One value type for a trained forest of every family: :class:`Forest`.

A :class:`Forest` holds, as NumPy arrays, what trained trees say independently
of how their family trains them, in the spirit of scikit-learn's ``Tree``:

* the topology: ``node_state`` of :mod:`keras_trees.topology` (heap order; the
  children of position ``i`` are ``2i + 1`` (left) and ``2i + 2`` (right)),
* one split test per internal position (``split_kind``: oblique ``"linear"``,
  ``"axis_aligned"`` or ``"noisy_or"``) and the sign that sends a sample right,
* one output per leaf position and how the trees' outputs combine.

Every tree layer returns one from ``layer.to_forest()``; scikit-learn trees
convert with :func:`keras_trees.interop.sklearn.from_sklearn`. Export to JSON
(:meth:`Forest.to_dict`, :mod:`keras_trees.inspection`), statistics and plots
read forests only. Everything here is NumPy: a forest routes, predicts and
counts samples without Keras or the compiled ops.

Routing convention (one for all methods): a sample starts at the root (heap
position 0); at a split it goes right iff the split's value has the sign
``right_if`` says (``"positive"``: value > 0; ``"negative"``: value < 0), else
left; it stops at a leaf. Leaf ids are heap positions (``route``, ``apply``).

>>> import numpy as np
>>> from keras_trees import topology
>>> stump = Forest(node_state=topology.stump(1, 1), split_kind="axis_aligned",
...                feature=np.array([[1]]), threshold=np.array([[0.5]]),
...                leaves=np.array([[[0.0], [-1.0], [1.0]]]), input_dim=2)
>>> x = np.array([[0.0, 0.0], [0.0, 2.0]])
>>> stump.route(x)[:, 0].tolist(), stump.predict(x)[:, 0].tolist()
([1, 2], [-1.0, 1.0])
"""

import dataclasses

import numpy as np

from keras_trees import topology
from keras_trees.api_export import keras_trees_export

SPLIT_KINDS = ("linear", "axis_aligned", "noisy_or")
RIGHT_IF = ("positive", "negative")
AGGREGATIONS = ("sum", "mean", "none")
_PARAMETERS = ("weights", "bias", "feature", "threshold", "expert_weights")
FORMAT = "keras_trees.inspection/1"
_SPLIT_RULES = {"positive": "right if value > 0", "negative": "right if value < 0"}
# Samples routed together: bounds the gathered split parameters to ~32 MiB.
_CHUNK_VALUES = 2**22


def class_ids(y, num_classes, where="y"):
    """Integer class ids of shape ``(n,)`` in ``[0, num_classes)``, or a ValueError
    starting with ``where``."""
    y = np.asarray(y)
    y = y.reshape(len(y), -1)
    if y.shape[1] != 1:
        raise ValueError(f"{where}: labels must be integer class ids of shape (n,) or (n, 1), got {y.shape}")
    y = y[:, 0]
    if not np.all(np.isfinite(y.astype(np.float64))) or np.any(y != np.round(y)):
        raise ValueError(f"{where}: labels must be integer class ids")
    y = y.astype(np.int64)
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(
            f"{where}: labels must lie in [0, {num_classes}) for num_classes={num_classes}, "
            f"got values in [{y.min()}, {y.max()}]"
        )
    return y


def heap_leaves(values):
    """Leaves of perfect trees, ``(num_trees, 2**D, K)`` left to right, placed at
    their heap positions: ``(num_trees, 2**(D+1) - 1, K)``, zero elsewhere."""
    values = np.asarray(values)
    trees, count, k = values.shape
    out = np.zeros((trees, 2 * count - 1, k), values.dtype)
    out[:, count - 1:] = values
    return out


def node_sums(positions, values, num_positions, weights=None, subtrees=False):
    """Per-position sums of per-sample ``values`` (the one implementation of
    node and leaf statistics: counts, class counts, target sums, moments).

    Args:
        positions: ``(n, T)`` heap position each sample stops at in each tree
            (:meth:`Forest.route`, a layer's ``route``), or ``(n,)`` for one tree.
        values: ``(n, U)`` (or ``(n,)``) values to add up, e.g. ones (counts),
            one-hot labels (class counts) or targets.
        num_positions: ``N``, the positions per tree.
        weights: optional ``(n,)`` sample weights multiplied into ``values``.
        subtrees: add every position's children into it, deepest first, so a
            split holds the totals of its subtree (positions must be a heap).

    Returns:
        ``(T, N, U)`` float64 sums (``(N, U)`` for one-dimensional ``positions``).
    """
    pos = np.asarray(positions, np.int64)
    single = pos.ndim == 1
    pos = pos.reshape(len(pos), -1)
    n = len(pos)
    v = np.asarray(values, np.float64).reshape(n, -1)
    if weights is not None:
        v = v * np.asarray(weights, np.float64).reshape(n, 1)
    out = np.zeros((pos.shape[1], int(num_positions), v.shape[1]))
    for t in range(pos.shape[1]):
        for u in range(v.shape[1]):
            out[t, :, u] = np.bincount(pos[:, t], v[:, u], int(num_positions))
    if subtrees:
        for level in range(topology.max_depth_from_positions(num_positions) - 1, -1, -1):
            at = np.arange(2**level - 1, 2 ** (level + 1) - 1)
            out[:, at] += out[:, 2 * at + 1] + out[:, 2 * at + 2]
    return out[0] if single else out


def _shape_error(name, array, shape):
    if array is None:
        raise ValueError(f"{name} is required for these splits: expected shape {shape}")
    if tuple(np.shape(array)) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(np.shape(array))}")


@keras_trees_export("keras_trees")
@dataclasses.dataclass(eq=False, repr=False)
class Forest:
    """Trained trees of any family as NumPy arrays (see the module docs).

    ``T`` trees of maximum depth ``D`` (``I = 2**D - 1`` internal positions,
    ``N = 2**(D+1) - 1`` positions), ``p = input_dim``, ``K`` outputs per leaf.
    Parameters at positions that are not splits, and leaf values at positions
    that are not leaves, are set to zero when the forest is made; parameters
    its ``split_kind`` does not use are None. Arguments are checked there
    (``ValueError`` naming the argument).

    Attributes:
        node_state: ``(T, N)`` topology codes ``ABSENT``/``LEAF``/``SPLIT``.
        split_kind: what a split computes from a sample ``x``:
            ``"linear"``: ``<weights, x> + bias``;
            ``"axis_aligned"``: ``x[feature] - threshold``;
            ``"noisy_or"`` (convex polytope trees):
            ``sum_k expert_weights[k] * softplus(<weights[k], x> + bias[k]) - threshold``.
        leaves: ``(T, N, K)`` outputs at leaf positions.
        input_dim: ``p``, the number of features the splits read.
        weights, bias: linear splits: ``(T, I, p)`` and ``(T, I)``; noisy-OR
            splits: ``(T, I, K_experts, p)`` and ``(T, I, K_experts)``.
        feature, threshold: axis-aligned splits: ``(T, I)`` feature ids and
            thresholds (``threshold`` also for noisy-OR splits).
        expert_weights: noisy-OR splits: ``(T, I, K_experts)`` ``r_k >= 0``.
        right_if: ``"positive"`` (right iff value > 0) or ``"negative"``
            (right iff value < 0: the Tree Ensemble Layer, whose activation of
            the value is the probability of going left).
        aggregation: how tree outputs combine: ``"sum"``, ``"mean"`` or ``"none"``.
        family: where the trees come from (``"end_to_end_tree"``,
            ``"sklearn"``, ...).
        leaf_output: one line on what a leaf's value means.
        inputs: what the splits read (``"layer input"`` or a description).
        leaf_prediction: whether the source's (inference) output is exactly
            :meth:`predict` (false for soft or margin-scaled families).
        num_classes: classes of a classifier whose leaves hold class
            distributions (``K`` of them); None otherwise.
        feature_names: optional ``p`` names of the features.
        source_node: optional ``(T, N)`` id of each position's node in the
            source model (e.g. scikit-learn node ids), ``-1`` where none.
        extra: family facts (steepness, transition_width, activation, ...), JSON-serializable; they
            describe the whole source (``tree(i)`` keeps them as they are).
    """

    node_state: np.ndarray
    split_kind: str
    leaves: np.ndarray
    input_dim: int
    weights: np.ndarray = None
    bias: np.ndarray = None
    feature: np.ndarray = None
    threshold: np.ndarray = None
    expert_weights: np.ndarray = None
    right_if: str = "positive"
    aggregation: str = "mean"
    family: str = "forest"
    leaf_output: str = "value"
    inputs: str = "layer input"
    leaf_prediction: bool = True
    num_classes: int = None
    feature_names: list = None
    source_node: np.ndarray = None
    extra: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for name, value, allowed in (("split_kind", self.split_kind, SPLIT_KINDS),
                                     ("right_if", self.right_if, RIGHT_IF),
                                     ("aggregation", self.aggregation, AGGREGATIONS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        state = np.asarray(self.node_state)
        topology.validate(state)
        self.node_state = state.astype(np.int32)
        T, N = state.shape
        I = topology.num_internal(self.max_depth)
        if isinstance(self.input_dim, bool) or int(self.input_dim) != self.input_dim or self.input_dim < 1:
            raise ValueError(f"input_dim must be an integer >= 1, got {self.input_dim!r}")
        self.input_dim = p = int(self.input_dim)
        leaves = np.asarray(self.leaves)
        if leaves.ndim != 3 or leaves.shape[:2] != (T, N):
            raise ValueError(f"leaves must have shape ({T}, {N}, output_dim), got {leaves.shape}")
        self.leaves = np.where((state == topology.LEAF)[..., None], leaves, 0).astype(leaves.dtype)
        split = topology.is_split_mask(state)
        experts = np.shape(self.expert_weights)[2:3] or np.shape(self.bias)[2:3] or (1,)
        shapes = {"linear": {"weights": (T, I, p), "bias": (T, I)},
                  "axis_aligned": {"feature": (T, I), "threshold": (T, I)},
                  "noisy_or": {"weights": (T, I, *experts, p), "bias": (T, I, *experts),
                               "expert_weights": (T, I, *experts), "threshold": (T, I)}}[self.split_kind]
        for name in _PARAMETERS:  # the kind's parameters, zero where no split; the others None
            value = getattr(self, name)
            if name in shapes:
                _shape_error(name, value, shapes[name])
                value = np.asarray(value, np.int64 if name == "feature" else None)
                mask = split.reshape(split.shape + (1,) * (value.ndim - 2))
                value = np.where(mask, value, 0).astype(value.dtype)
            setattr(self, name, value if name in shapes else None)
        if self.feature is not None and ((self.feature < 0) | (self.feature >= p)).any():
            raise ValueError(f"feature ids must lie in [0, input_dim={p})")
        if self.expert_weights is not None and (self.expert_weights < 0).any():
            raise ValueError("expert_weights must be >= 0")
        if self.num_classes is not None:
            if int(self.num_classes) != leaves.shape[-1]:
                raise ValueError(f"num_classes={self.num_classes} but the leaves hold {leaves.shape[-1]} values")
            self.num_classes = int(self.num_classes)
        self.leaf_prediction = bool(self.leaf_prediction)
        self.extra = dict(self.extra)
        if self.feature_names is not None:
            self.feature_names = [str(name) for name in self.feature_names]
            if len(self.feature_names) != p:
                raise ValueError(f"feature_names must hold input_dim={p} names, got {len(self.feature_names)}")
        if self.source_node is not None:
            _shape_error("source_node", self.source_node, (T, N))
            self.source_node = np.asarray(self.source_node, np.int64)

    # ------------------------------------------------------------- sizes
    @property
    def num_trees(self):
        return self.node_state.shape[0]

    @property
    def max_depth(self):
        """``D``: the depth of the heap (the deepest a tree may be)."""
        return topology.max_depth_from_positions(self.node_state.shape[1])

    @property
    def output_dim(self):
        return self.leaves.shape[-1]

    def tree_depths(self):
        """``(T,)`` depth of each tree's deepest leaf."""
        return np.array([topology.tree_depth(self.node_state, t) for t in range(self.num_trees)])

    def num_leaves(self):
        """``(T,)`` leaves per tree."""
        return topology.num_leaves(self.node_state)

    def num_splits(self):
        """``(T,)`` splits per tree."""
        return (self.node_state == topology.SPLIT).sum(axis=1)

    def tree(self, i):
        """Tree ``i`` alone, as a one-tree :class:`Forest` (same kind, outputs, facts)."""
        if isinstance(i, bool) or int(i) != i or not -self.num_trees <= i < self.num_trees:
            raise ValueError(f"tree index i must be an integer in [0, {self.num_trees}), got {i!r}")
        one = slice(int(i) % self.num_trees, int(i) % self.num_trees + 1)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("node_state", "leaves", "source_node") + _PARAMETERS:
            if fields[name] is not None:
                fields[name] = fields[name][one]
        return Forest(**fields)

    def linear_form(self):
        """``(weights (T, I, p), bias (T, I))`` such that a sample goes right iff
        ``<weights, x> + bias > 0`` (linear and axis-aligned splits)."""
        if self.split_kind == "noisy_or":
            raise ValueError("noisy-OR splits have no linear form")
        if self.split_kind == "linear":
            w, b = self.weights, self.bias
        else:
            T, I = self.feature.shape
            w = np.zeros((T, I, self.input_dim), self.threshold.dtype)
            np.put_along_axis(w, self.feature[..., None], 1.0, axis=-1)
            w *= topology.is_split_mask(self.node_state)[..., None]
            b = -self.threshold
        if self.right_if == "negative":
            w, b = -w, -b
        return w, b

    # ----------------------------------------------------------- routing
    def _rows(self, x, name="x"):
        """``x`` as float64 rows ``(n, input_dim)`` (per-sample dimensions flattened)."""
        x = np.asarray(x)
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (n, {self.input_dim}), got {x.shape}")
        x = x.reshape(len(x), -1).astype(np.float64)
        if x.shape[1] != self.input_dim:
            raise ValueError(
                f"{name} must have {self.input_dim} columns (the forest's input_dim), got {x.shape[1]}")
        if not np.isfinite(x).all():
            raise ValueError(f"{name} contains NaN or Inf; routing needs finite inputs")
        return x

    def _goes_right(self, t, pos, x):
        """Whether samples ``x`` (rows) go right at splits ``pos`` of tree ``t``."""
        if self.split_kind == "axis_aligned":
            value = x[np.arange(len(x)), self.feature[t, pos]] - self.threshold[t, pos]
        elif self.split_kind == "linear":
            value = np.einsum("np,np->n", x, self.weights[t, pos]) + self.bias[t, pos]
        else:
            z = np.einsum("np,nkp->nk", x, self.weights[t, pos]) + self.bias[t, pos]
            value = (np.logaddexp(0.0, z) * self.expert_weights[t, pos]).sum(-1) - self.threshold[t, pos]
        return value > 0 if self.right_if == "positive" else value < 0

    def route(self, x):
        """``(n, T)`` int64 heap position of the leaf each sample of ``x`` reaches
        in each tree (routing convention in the module docs).

        ``x``: ``(n, input_dim)`` (or ``(n, ...)``, flattened per sample) finite
        values. Split values are computed in float64 (axis-aligned tests are
        exact); a layer's own float32 routing can differ only for samples
        within float32 rounding of an oblique or noisy-OR split.
        """
        x = self._rows(x)
        n = len(x)
        out = np.zeros((n, self.num_trees), np.int64)
        per_sample = self.input_dim * (1 if self.expert_weights is None else self.expert_weights.shape[-1])
        chunk = max(1, _CHUNK_VALUES // per_sample)
        for t in range(self.num_trees):
            state = self.node_state[t]
            for start in range(0, n, chunk):
                rows = x[start: start + chunk]
                out[start: start + len(rows), t] = topology.route(
                    state, lambda pos, at, t=t, rows=rows: self._goes_right(t, pos, rows[at]), len(rows))
        return out

    def apply(self, x):
        """scikit-learn's name for :meth:`route`: ``(n, T)`` leaf ids (heap positions;
        ``source_node[t, leaf]`` maps them back to a converted tree's node ids)."""
        return self.route(x)

    def decision_path(self, x):
        """``(n, T, D + 1)`` heap positions each sample visits, root first, ``-1``
        after its leaf (scikit-learn returns an indicator matrix instead; this
        form stays small for deep heaps)."""
        leaf = self.route(x)
        shift = topology.position_depth(leaf)[..., None] - np.arange(self.max_depth + 1)
        return np.where(shift >= 0, ((leaf[..., None] + 1) >> np.maximum(shift, 0)) - 1, -1)

    def predict(self, x):
        """Values of the leaves each sample reaches, combined by ``aggregation``:
        ``(n, K)`` (``(n, T, K)`` for ``"none"``). The source's own output only
        where ``leaf_prediction`` holds (soft and hinge trees differ)."""
        values = self.leaves[np.arange(self.num_trees), self.route(x)]
        if self.aggregation == "mean":
            return values.mean(1)
        if self.aggregation == "sum":
            return values.sum(1)
        return values

    def node_statistics(self, x, y=None, num_classes=None):
        """Samples of ``x`` routed through every node (hard routing).

        Args:
            x: ``(n, input_dim)`` samples.
            y: optional labels: class ids (classification) or ``(n,)`` /
                ``(n, U)`` targets (regression).
            num_classes: classes of ``y``; default ``self.num_classes``. With
                classes, ``y`` holds class ids; without, targets.

        Returns:
            A dict: ``"samples"`` ``(T, N)`` int64 counts (a split counts the
            samples of both children), with ``y`` also ``"class_counts"``
            ``(T, N, num_classes)`` int64 or ``"target_mean"`` ``(T, N, U)``
            float64 (NaN where no sample arrives).
        """
        leaf = self.route(x)
        n, T = leaf.shape
        N = self.node_state.shape[1]
        num_classes = self.num_classes if num_classes is None else int(num_classes)
        count = lambda v: np.rint(node_sums(leaf, v, N, subtrees=True)).astype(np.int64)  # noqa: E731
        stats = {"samples": count(np.ones(n))[..., 0]}
        if y is None:
            return stats
        if len(y) != n:
            raise ValueError(f"x has {n} samples but y has {len(y)}")
        if num_classes is not None:
            stats["class_counts"] = count(np.eye(num_classes)[class_ids(y, num_classes)])
        else:
            sums = node_sums(leaf, np.asarray(y, np.float64).reshape(n, -1), N, subtrees=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                stats["target_mean"] = sums / stats["samples"][..., None]
        return stats
        if len(y) != n:
            raise ValueError(f"x has {n} samples but y has {len(y)}")
        sample = np.broadcast_to(np.arange(n)[:, None, None], path.shape)[visited]
        if num_classes is not None:
            y = class_ids(y, num_classes)
            counts = np.bincount(flat * num_classes + y[sample], minlength=T * N * num_classes)
            stats["class_counts"] = counts.reshape(T, N, num_classes)
        else:
            y = np.asarray(y, np.float64).reshape(n, -1)
            sums = np.stack([np.bincount(flat, y[sample, u], T * N) for u in range(y.shape[1])], -1)
            with np.errstate(invalid="ignore", divide="ignore"):
                stats["target_mean"] = (sums / stats["samples"].reshape(-1, 1)).reshape(T, N, -1)
        return stats

    # -------------------------------------------------------------- JSON
    def _split_dict(self, t, i):
        if self.split_kind == "linear":
            return {"kind": "linear", "weights": self.weights[t, i].tolist(), "bias": float(self.bias[t, i])}
        if self.split_kind == "axis_aligned":
            return {"kind": "axis_aligned", "feature": int(self.feature[t, i]),
                    "threshold": float(self.threshold[t, i])}
        return {"kind": "noisy_or", "weights": self.weights[t, i].tolist(), "bias": self.bias[t, i].tolist(),
                "expert_weights": self.expert_weights[t, i].tolist(), "threshold": float(self.threshold[t, i])}

    def to_dict(self, x=None, y=None, num_classes=None):
        """The forest as a plain JSON-friendly dict (format in
        :mod:`keras_trees.inspection.export`); with ``x`` (and ``y``) its nodes
        carry the :meth:`node_statistics` of those samples. :meth:`from_dict`
        reads it back."""
        stats = None if x is None else self.node_statistics(x, y, num_classes)
        state = self.node_state
        sizes = zip(self.tree_depths(), self.num_leaves(), self.num_splits())
        trees = []
        for t, (depth, num_leaves, num_splits) in enumerate(sizes):
            nodes = []
            for i in map(int, np.flatnonzero(state[t] != topology.ABSENT)):
                node = {"id": i, "depth": int(topology.position_depth(i))}
                if state[t, i] == topology.SPLIT:
                    node.update(type="split", split=self._split_dict(t, i), left=2 * i + 1, right=2 * i + 2)
                else:
                    node.update(type="leaf", value=self.leaves[t, i].tolist())
                if self.source_node is not None:
                    node["source_node"] = int(self.source_node[t, i])
                if stats is not None:
                    node["samples"] = int(stats["samples"][t, i])
                    if "class_counts" in stats:
                        node["class_counts"] = stats["class_counts"][t, i].tolist()
                    if "target_mean" in stats and stats["samples"][t, i] > 0:
                        node["target_mean"] = stats["target_mean"][t, i].tolist()
                nodes.append(node)
            trees.append({"index": t, "depth": int(depth), "num_leaves": int(num_leaves),
                          "num_splits": int(num_splits), "nodes": nodes})
        return {
            "format": FORMAT, "family": self.family, "num_trees": self.num_trees, "max_depth": self.max_depth,
            "input_dim": self.input_dim, "output_dim": self.output_dim, "inputs": self.inputs,
            "split_kind": self.split_kind, "split_rule": _SPLIT_RULES[self.right_if],
            "aggregation": self.aggregation, "leaf_output": self.leaf_output,
            "leaf_prediction": bool(self.leaf_prediction), "num_classes": self.num_classes,
            "feature_names": self.feature_names, "extra": self.extra, "trees": trees,
        }

    @classmethod
    def from_dict(cls, doc):
        """The :class:`Forest` of a :meth:`to_dict` / :func:`~keras_trees.inspection.export_trees`
        dict (also one parsed from JSON, and documents written before this class
        existed). Arrays come back as float64; node statistics are not kept."""
        if not str(doc.get("format", "")).startswith("keras_trees.inspection/"):
            raise ValueError(f"doc is not a keras-trees forest export (format {doc.get('format')!r})")
        T, D, p, K = (int(doc[k]) for k in ("num_trees", "max_depth", "input_dim", "output_dim"))
        I, N = topology.num_internal(D), topology.num_positions(D)
        splits = [n["split"] for tree in doc["trees"] for n in tree["nodes"] if n["type"] == "split"]
        kind = doc.get("split_kind") or (splits[0]["kind"] if splits else "linear")
        experts = len(splits[0]["expert_weights"]) if kind == "noisy_or" and splits else 1
        state = topology.empty(T, D)
        leaves = np.zeros((T, N, K))
        source = np.full((T, N), -1, np.int64)
        params = {"weights": np.zeros((T, I) + ((experts,) if kind == "noisy_or" else ()) + (p,)),
                  "bias": np.zeros((T, I) + ((experts,) if kind == "noisy_or" else ())),
                  "feature": np.zeros((T, I), np.int64), "threshold": np.zeros((T, I)),
                  "expert_weights": np.zeros((T, I, experts))}
        for t, tree in enumerate(doc["trees"]):
            for node in tree["nodes"]:
                i = node["id"]
                source[t, i] = node.get("source_node", -1)
                if node["type"] == "leaf":
                    state[t, i] = topology.LEAF
                    leaves[t, i] = node["value"]
                    continue
                state[t, i] = topology.SPLIT
                for name, value in node["split"].items():
                    if name != "kind":
                        params[name][t, i] = value
        rules = {rule: side for side, rule in _SPLIT_RULES.items()}
        return cls(
            node_state=state, split_kind=kind, leaves=leaves, input_dim=p,
            right_if=rules[doc["split_rule"]], aggregation=doc["aggregation"], family=doc["family"],
            leaf_output=doc["leaf_output"], inputs=doc.get("inputs", "layer input"),
            leaf_prediction=bool(doc.get("leaf_prediction", False)), num_classes=doc.get("num_classes"),
            feature_names=doc.get("feature_names"), source_node=source if (source >= 0).any() else None,
            extra=doc.get("extra", {}), **params,
        )

    # --------------------------------------------------------- conversion
    def pad_to_perfect(self, depth=None):
        """Perfect linear trees of ``depth`` (default ``max_depth``) with the same
        routing to values (the form non-greedy trees train).

        Every leaf above the last level becomes a subtree of zero split rows
        (``w = 0, b = 0``: samples always go left) whose leaves copy its value;
        ``source_node`` of every copy names the original leaf. Splits must have a
        :meth:`linear_form`; ``depth`` may be below ``max_depth`` when every tree
        fits in it.
        """
        depth = self.max_depth if depth is None else int(depth)
        deepest = int(self.tree_depths().max())
        if deepest > depth:
            raise ValueError(f"the forest has a tree of depth {deepest}, more than the requested depth {depth}")
        w, b = self.linear_form()
        I, N = topology.num_internal(depth), topology.num_positions(depth)
        old_n = self.node_state.shape[1]
        state = np.concatenate([self.node_state, np.zeros((self.num_trees, max(0, N - old_n)), np.int32)], 1)
        t = np.arange(self.num_trees)[:, None]
        anc = np.broadcast_to(np.arange(N), (self.num_trees, N)).copy()
        for _ in range(depth + 1):  # climb to the position each new one descends from (or is)
            absent = state[t, anc] == topology.ABSENT
            anc = np.where(absent, (anc - 1) // 2, anc)
        is_split = state[t, anc[:, :I]] == topology.SPLIT  # then anc is the position itself
        old_i = np.minimum(anc[:, :I], w.shape[1] - 1)
        source = None if self.source_node is None else self.source_node[t, anc]
        return dataclasses.replace(
            self, node_state=topology.perfect(self.num_trees, depth), split_kind="linear", right_if="positive",
            weights=np.where(is_split[..., None], w[t, old_i], 0), bias=np.where(is_split, b[t, old_i], 0),
            feature=None, threshold=None, expert_weights=None,
            leaves=self.leaves[t, anc], source_node=source,
        )

    def __repr__(self):
        return (f"Forest(family={self.family!r}, num_trees={self.num_trees}, max_depth={self.max_depth}, "
                f"split_kind={self.split_kind!r}, input_dim={self.input_dim}, output_dim={self.output_dim}, "
                f"leaves={self.num_leaves().tolist()}, aggregation={self.aggregation!r})")

