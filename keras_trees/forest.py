"""One value type for a trained forest of every family: [`Forest`][keras_trees.forest.Forest].

A [`Forest`][keras_trees.forest.Forest] holds, as NumPy arrays, what trained trees say independently
of how their family trains them, in the spirit of scikit-learn's ``Tree``:

* the topology: ``node_state`` of `keras_trees.topology` (heap order; the
  children of position ``i`` are ``2i + 1`` (left) and ``2i + 2`` (right)),
* one split test per internal position (``split_kind``: oblique ``"linear"``,
  ``"axis_aligned"`` or ``"noisy_or"``) and the sign that sends a sample right,
* one output per leaf position and how the trees' outputs combine.

Every tree layer returns one from ``layer.to_forest()``; scikit-learn trees
convert with [`keras_trees.interop.sklearn.from_sklearn`][keras_trees.interop.sklearn.from_sklearn]. Export to JSON
([`Forest.to_dict`][keras_trees.forest.Forest.to_dict], `keras_trees.inspection`), statistics and plots
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
import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.validation import memory as _memory

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
    (TypeError for non-numeric labels) starting with ``where``.

    Labels are checked as given, before any cast: negative or too large ids,
    fractional, NaN or Inf values are refused, never wrapped or truncated;
    whole-number floats and booleans are accepted."""
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{where}: labels must be integer class ids, got dtype {y.dtype}")
    if y.ndim == 0:
        raise ValueError(f"{where}: labels must be integer class ids of shape (n,) or (n, 1), got a scalar")
    if y.ndim > 2 or (y.ndim == 2 and y.shape[1] != 1):
        raise ValueError(f"{where}: labels must be integer class ids of shape (n,) or (n, 1), got {y.shape}")
    y = y.reshape(len(y))
    if y.dtype.kind == "f" and not (np.all(np.isfinite(y)) and np.all(y == np.round(y))):
        raise ValueError(f"{where}: labels must be integer class ids (whole numbers), "
                         "got fractional, NaN or Inf values")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(
            f"{where}: labels must lie in [0, {num_classes}) for num_classes={num_classes}, "
            f"got values in [{y.min()}, {y.max()}]"
        )
    return y.astype(np.int64)


def targets(y, num_samples, where="y"):
    """Regression targets as float64 ``(n, U)``: numeric, finite, one row per sample."""
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{where}: targets must be numbers, got dtype {y.dtype}")
    if y.ndim == 0 or len(y) != num_samples:
        raise ValueError(f"{where}: targets must have one row per sample ({num_samples}), got shape {y.shape}")
    y = y.astype(np.float64).reshape(num_samples, int(np.prod(y.shape[1:])))
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{where}: targets contain NaN or Inf")
    return y


def _num_rows(y, name):
    if np.ndim(y) == 0:
        raise ValueError(f"{name} must have one entry per sample, got a scalar")
    return len(y)


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
            ([`Forest.route`][keras_trees.forest.Forest.route], a layer's ``route``), or ``(n,)`` for one tree.
        values: ``(n, U)`` (or ``(n,)``) values to add up, e.g. ones (counts),
            one-hot labels (class counts) or targets.
        num_positions: ``N``, the positions per tree.
        weights: optional ``(n,)`` sample weights multiplied into ``values``.
        subtrees: add every position's children into it, deepest first, so a
            split holds the totals of its subtree (positions must be a heap).

    Returns:
        ``(T, N, U)`` float64 sums (``(N, U)`` for one-dimensional ``positions``).
    """
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iu":
        raise TypeError(f"positions must be integer heap positions, got dtype {pos.dtype}")
    pos = pos.astype(np.int64)
    single = pos.ndim == 1
    n = len(pos)
    pos = pos.reshape(n, int(np.prod(pos.shape[1:])))
    if pos.size and (pos.min() < 0 or pos.max() >= int(num_positions)):
        raise ValueError(f"positions must lie in [0, {int(num_positions)}), got values in [{pos.min()}, {pos.max()}]")
    v = np.asarray(values, np.float64)
    if len(v) != n:
        raise ValueError(f"values must have one row per sample ({n}), got shape {v.shape}")
    v = v.reshape(n, int(np.prod(v.shape[1:])))
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


def _numeric(name, value, whole=False):
    """``value`` as a NumPy array of numbers (int64 when ``whole``: ids, checked
    to be whole numbers before the cast, never truncated)."""
    value = np.asarray(value)
    if value.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold numbers, got dtype {value.dtype}")
    if not whole:
        return value
    if value.dtype.kind == "f" and not (np.isfinite(value).all() and (value == np.round(value)).all()):
        raise ValueError(f"{name} must hold integer ids (whole numbers), got fractional, NaN or Inf values")
    return value.astype(np.int64)


def _shape_error(name, array, shape):
    if array is None:
        raise ValueError(f"{name} is required for these splits: expected shape {shape}")
    if tuple(np.shape(array)) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(np.shape(array))}")


_DOC_REQUIRED = ("num_trees", "max_depth", "input_dim", "output_dim", "split_rule", "aggregation",
                 "family", "leaf_output", "trees")
_SPLIT_FIELDS = {"linear": ("weights", "bias"), "axis_aligned": ("feature", "threshold"),
                 "noisy_or": ("weights", "bias", "expert_weights", "threshold")}


def _doc_int(value, where, lower):
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, numbers.Real)) \
            or not float(value).is_integer() or value < lower:
        raise ValueError(f"{where} must be an integer >= {lower}, got {value!r}")
    return int(value)


def _doc_numbers(value, where, shape):
    """``value`` as a float64 array of ``shape`` (a document field), or a ValueError."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.shape != shape:
        want = "a number" if shape == () else f"numbers of shape {shape}"
        raise ValueError(f"{where} must be {want}, got {value!r:.80}")
    return array


def check_document(doc):
    """Checks the structure of an exported layer ``doc`` (format in
    `keras_trees.inspection.export`) once, before anything reads it.

    Raises ``TypeError`` (not a dict) or ``ValueError`` saying which field is
    missing or wrong, e.g. ``doc["trees"][0]["nodes"][2]["split"]: missing
    "threshold"``. Returns ``(split_kind, number of noisy-OR experts)``.
    """
    if not isinstance(doc, Mapping):
        raise TypeError(f"doc must be a dict of an exported tree layer (one item of export_trees' list), "
                        f"got {type(doc).__name__}")
    if not str(doc.get("format", "")).startswith("keras_trees.inspection/"):
        raise ValueError(f"doc is not a keras-trees forest export (format {doc.get('format')!r})")
    missing = [k for k in _DOC_REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"doc is missing the field(s) {missing}")
    T = _doc_int(doc["num_trees"], 'doc["num_trees"]', 1)
    D = _doc_int(doc["max_depth"], 'doc["max_depth"]', 0)
    p = _doc_int(doc["input_dim"], 'doc["input_dim"]', 1)
    K = _doc_int(doc["output_dim"], 'doc["output_dim"]', 1)
    if doc["split_rule"] not in _SPLIT_RULES.values():
        raise ValueError(f'doc["split_rule"] must be one of {sorted(_SPLIT_RULES.values())}, '
                         f"got {doc['split_rule']!r}")
    if doc["aggregation"] not in AGGREGATIONS:
        raise ValueError(f'doc["aggregation"] must be one of {AGGREGATIONS}, got {doc["aggregation"]!r}')
    trees = doc["trees"]
    if not isinstance(trees, Sequence) or isinstance(trees, str) or len(trees) != T:
        raise ValueError(f'doc["trees"] must be a list of num_trees={T} trees, got {type(trees).__name__}'
                         + (f" of length {len(trees)}" if isinstance(trees, Sequence) else ""))
    nodes_of = []
    for t, tree in enumerate(trees):
        nodes = tree.get("nodes") if isinstance(tree, Mapping) else None
        if not isinstance(nodes, Sequence) or isinstance(nodes, str):
            raise ValueError(f'doc["trees"][{t}] must be a dict with a list "nodes"')
        nodes_of.append(nodes)
    splits = [(f'doc["trees"][{t}]["nodes"][{j}]', node) for t, nodes in enumerate(nodes_of)
              for j, node in enumerate(nodes) if isinstance(node, Mapping) and node.get("type") == "split"]
    kind = doc.get("split_kind")
    if kind is None:  # documents written before split_kind: the first split says
        first = splits[0][1].get("split") if splits else None
        kind = first.get("kind", "linear") if isinstance(first, Mapping) else "linear"
    if kind not in SPLIT_KINDS:
        raise ValueError(f'doc["split_kind"] must be one of {SPLIT_KINDS}, got {kind!r}')
    experts = 1
    if kind == "noisy_or" and splits:
        first = splits[0][1].get("split")
        r = first.get("expert_weights") if isinstance(first, Mapping) else None
        if not isinstance(r, Sequence) or not len(r):
            raise ValueError(f'{splits[0][0]}["split"]["expert_weights"] must be a non-empty list')
        experts = len(r)
    I, N = topology.num_internal(D), topology.num_positions(D)
    per_split = 8 * ((experts if kind == "noisy_or" else 1) * (p + 2) + 3)
    _memory.check_heap("doc", T, D, bytes_per_position=4 + 8 * K + 8, bytes_per_internal=per_split,
                       hint="the document's max_depth is too large")
    shapes = {"weights": (experts, p) if kind == "noisy_or" else (p,),
              "bias": (experts,) if kind == "noisy_or" else (), "expert_weights": (experts,),
              "threshold": (), "feature": ()}
    for t, nodes in enumerate(nodes_of):
        seen = set()
        for j, node in enumerate(nodes):
            where = f'doc["trees"][{t}]["nodes"][{j}]'
            if not isinstance(node, Mapping):
                raise ValueError(f"{where} must be a dict, got {type(node).__name__}")
            for field in ("id", "type"):
                if field not in node:
                    raise ValueError(f'{where}: missing "{field}"')
            i = _doc_int(node["id"], f'{where}["id"]', 0)
            if i >= N:
                raise ValueError(f'{where}["id"] must lie in [0, {N}) for max_depth={D}, got {i}')
            if i in seen:
                raise ValueError(f'{where}["id"]: position {i} appears twice in tree {t}')
            seen.add(i)
            if "source_node" in node:
                _doc_int(node["source_node"], f'{where}["source_node"]', -1)
            if node["type"] == "leaf":
                if "value" not in node:
                    raise ValueError(f'{where}: missing "value"')
                _doc_numbers(node["value"], f'{where}["value"]', (K,))
                continue
            if node["type"] != "split":
                raise ValueError(f'{where}["type"] must be "leaf" or "split", got {node["type"]!r}')
            if i >= I:
                raise ValueError(f'{where}: position {i} is on the last level (max_depth={D}) and cannot be a split')
            split = node.get("split")
            if not isinstance(split, Mapping):
                raise ValueError(f'{where}: a split node needs a dict "split"')
            if split.get("kind", kind) != kind:
                raise ValueError(f'{where}["split"]["kind"] is {split.get("kind")!r} but the layer\'s splits are {kind!r}')
            unknown = sorted(set(split) - set(_SPLIT_FIELDS[kind]) - {"kind"})
            if unknown:
                raise ValueError(f'{where}["split"]: unknown field(s) {unknown} for {kind} splits')
            for field in _SPLIT_FIELDS[kind]:
                if field not in split:
                    raise ValueError(f'{where}["split"]: missing "{field}"')
                value = _doc_numbers(split[field], f'{where}["split"]["{field}"]', shapes[field])
                if field == "feature":
                    feature = _doc_int(split[field], f'{where}["split"]["feature"]', 0)
                    if feature >= p:
                        raise ValueError(f'{where}["split"]["feature"] must lie in [0, input_dim={p}), got {feature}')
                if field == "expert_weights" and (value < 0).any():
                    raise ValueError(f'{where}["split"]["expert_weights"] must be >= 0')
    return kind, experts



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
        right_if: ``"positive"`` (right iff value > 0: what every layer's
            ``to_forest()`` and [`from_sklearn`][keras_trees.interop.sklearn.from_sklearn]
            write, the Tree Ensemble Layer included, whose activation of the
            value is the probability of going right) or ``"negative"`` (right
            iff value < 0: for split values that measure going left, such as
            the raw convention of [`keras_trees.ops.soft_tree_ensemble`][keras_trees.ops.soft_tree.soft_tree_ensemble]).
        aggregation: how tree outputs combine: ``"sum"``, ``"mean"`` or ``"none"``.
        family: where the trees come from (``"end_to_end_tree"``,
            ``"sklearn_decision_tree"``, ...).
        leaf_output: one line on what a leaf's value means.
        inputs: what the splits read (``"layer input"`` or a description).
        leaf_prediction: whether the source's (inference) output is exactly
            [`predict`][keras_trees.forest.Forest.predict] (false for soft or margin-scaled families).
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
        leaves = _numeric("leaves", self.leaves)
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
                value = _numeric(name, value, whole=name == "feature")
                mask = split.reshape(split.shape + (1,) * (value.ndim - 2))
                value = np.where(mask, value, 0).astype(value.dtype)
            setattr(self, name, value if name in shapes else None)
        for name in ("leaves",) + _PARAMETERS:
            value = getattr(self, name)
            if value is not None and not np.isfinite(value).all():
                raise ValueError(f"{name} contains NaN or Inf (a forest holds finite parameters and leaf values)")
        if self.feature is not None and ((self.feature < 0) | (self.feature >= p)).any():
            raise ValueError(f"feature ids must lie in [0, input_dim={p})")
        if self.expert_weights is not None and (self.expert_weights < 0).any():
            raise ValueError("expert_weights must be finite and >= 0")
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
        """Tree ``i`` alone, as a one-tree [`Forest`][keras_trees.forest.Forest] (same kind, outputs, facts).
        A negative ``i`` counts from the last tree, as Python's indexing does
        (``tree(-1)`` is the last)."""
        if isinstance(i, bool) or int(i) != i or not -self.num_trees <= i < self.num_trees:
            raise ValueError(f"tree index i must be an integer in [-{self.num_trees}, {self.num_trees}) "
                             f"(negative: counted from the last tree), got {i!r}")
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
        if x.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be real numbers, got dtype {x.dtype}")
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (n, {self.input_dim}), got {x.shape}")
        x = x.reshape(len(x), int(np.prod(x.shape[1:]))).astype(np.float64)
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
        """scikit-learn's name for [`route`][keras_trees.topology.route]: ``(n, T)`` leaf ids (heap positions;
        ``source_node[t, leaf]`` maps them back to a converted tree's node ids)."""
        return self.route(x)

    def decision_path(self, x):
        """``(n, T, D + 1)`` heap positions each sample visits, root first, ``-1``
        after its leaf (scikit-learn returns an indicator matrix instead; this
        form stays small for deep heaps)."""
        leaf = self.route(x)
        levels = np.arange(self.max_depth + 1)
        return np.where(topology.position_depth(leaf)[..., None] >= levels,
                        topology.ancestor_at_depth(leaf[..., None], levels), -1)

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

        ``x`` may also be a stream of ``(x, y)`` / ``(x, y, sample_weight)``
        batches (a batched ``tf.data.Dataset``, a ``keras.utils.PyDataset``, a
        list of batches or a function returning a fresh iterable of them;
        `keras_trees.streaming`), ``y`` None: the batches' labels are
        used (weights are not), the sums are accumulated batch by batch and,
        in a distributed run, summed over the workers (each reads its share;
        every worker must call it): the statistics of all the batches.
        """
        from keras_trees.inspection.export import _is_stream

        if x is not None and _is_stream(x):
            if y is not None:
                raise ValueError("node_statistics: x is a stream of (x, y[, sample_weight]) batches: its labels "
                                 "are in the batches; y must be None")
            return self._streamed_node_statistics(x, num_classes)
        leaf = self.route(x)
        n, T = leaf.shape
        N = self.node_state.shape[1]
        if num_classes is not None:
            if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
                raise ValueError(f"num_classes must be an integer >= 1, got {num_classes!r}")
        num_classes = self.num_classes if num_classes is None else int(num_classes)
        count = lambda v: np.rint(node_sums(leaf, v, N, subtrees=True)).astype(np.int64)  # noqa: E731
        stats = {"samples": count(np.ones(n))[..., 0]}
        if y is None:
            return stats
        if _num_rows(y, "y") != n:
            raise ValueError(f"x has {n} samples but y has {len(y)}")
        if num_classes is not None:
            stats["class_counts"] = count(np.eye(num_classes)[class_ids(y, num_classes)])
        else:
            sums = node_sums(leaf, targets(y, n), N, subtrees=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                stats["target_mean"] = sums / stats["samples"][..., None]
        return stats

    def _streamed_node_statistics(self, data, num_classes):
        from keras_trees import streaming

        where = "node_statistics"
        if num_classes is not None:
            if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
                raise ValueError(f"num_classes must be an integer >= 1, got {num_classes!r}")
        num_classes = self.num_classes if num_classes is None else int(num_classes)
        data = streaming.stream(data, name=where)
        T, N = self.num_trees, self.node_state.shape[1]
        samples, labels = np.zeros((T, N)), None
        for xb, yb, _ in data:
            leaf = self.route(xb)
            n = len(leaf)
            samples += node_sums(leaf, np.ones(n), N, subtrees=True)[..., 0]
            if num_classes is not None:
                values = np.eye(num_classes)[class_ids(yb, num_classes, where)]
            else:
                values = targets(yb, n, where)
            sums = node_sums(leaf, values, N, subtrees=True)
            if labels is not None and labels.shape != sums.shape:
                raise ValueError(f"{where}: the targets of the batches differ in shape")
            labels = sums if labels is None else labels + sums
        # The label width (the targets' when there are no classes) over the workers: a worker may have no batch.
        width = np.zeros(data.num_workers)
        width[data.worker_index] = 0 if labels is None else labels.shape[-1]
        total_width = int(streaming.all_reduce_sum([width])[0].max())
        mismatch = labels is not None and labels.shape[-1] != total_width
        if labels is None or mismatch:
            labels = np.zeros((T, N, total_width))
        samples, labels, flag = streaming.all_reduce_sum([samples, labels, np.array([float(mismatch)])])
        if flag[0] > 0:
            raise ValueError(f"{where}: the targets of the workers' batches differ in shape")
        if samples[:, 0].sum() <= 0:
            raise ValueError(f"{where}: the data is empty")
        stats = {"samples": np.rint(samples).astype(np.int64)}
        if num_classes is not None:
            stats["class_counts"] = np.rint(labels).astype(np.int64)
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                stats["target_mean"] = labels / stats["samples"][..., None]
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

    def to_dict(self, x=None, y=None, num_classes=None, statistics=None):
        """The forest as a plain JSON-friendly dict (format in
        `keras_trees.inspection.export`); with ``x`` (and ``y``) its nodes
        carry the [`node_statistics`][keras_trees.forest.Forest.node_statistics] of those samples (``x`` may be a
        stream of batches, ``y`` None, as there), or the given
        ``statistics``, a dict as [`node_statistics`][keras_trees.forest.Forest.node_statistics] returns, e.g. summed
        over batches of a stream. [`from_dict`][keras_trees.forest.Forest.from_dict] reads it back."""
        if statistics is not None and x is not None:
            raise ValueError("to_dict: pass samples x (and y) or their statistics, not both")
        stats = statistics if x is None else self.node_statistics(x, y, num_classes)
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
        """The [`Forest`][keras_trees.forest.Forest] of a [`to_dict`][keras_trees.forest.Forest.to_dict] / [`export_trees`][keras_trees.inspection.export.export_trees]
        dict (also one parsed from JSON, and documents written before this class
        existed). Arrays come back as float64; node statistics are not kept.
        The document's structure is checked first (`check_document`):
        a missing or malformed field is a ``ValueError`` naming it."""
        kind, experts = check_document(doc)
        T, D, p, K = (int(doc[k]) for k in ("num_trees", "max_depth", "input_dim", "output_dim"))
        I, N = topology.num_internal(D), topology.num_positions(D)
        state = topology.empty(T, D)
        leaves = np.zeros((T, N, K))
        source = np.full((T, N), -1, np.int64)
        params = {"weights": np.zeros((T, I) + ((experts,) if kind == "noisy_or" else ()) + (p,)),
                  "bias": np.zeros((T, I) + ((experts,) if kind == "noisy_or" else ())),
                  "feature": np.zeros((T, I), np.int64), "threshold": np.zeros((T, I)),
                  "expert_weights": np.zeros((T, I, experts))}
        for t, tree in enumerate(doc["trees"]):
            for node in tree["nodes"]:
                i = int(node["id"])
                source[t, i] = int(node.get("source_node", -1))
                if node["type"] == "leaf":
                    state[t, i] = topology.LEAF
                    leaves[t, i] = node["value"]
                    continue
                state[t, i] = topology.SPLIT
                for name, value in node["split"].items():
                    if name != "kind":
                        params[name][t, i] = value
        rules = {rule: side for side, rule in _SPLIT_RULES.items()}
        try:
            return cls(
                node_state=state, split_kind=kind, leaves=leaves, input_dim=p,
                right_if=rules[doc["split_rule"]], aggregation=doc["aggregation"], family=doc["family"],
                leaf_output=doc["leaf_output"], inputs=doc.get("inputs", "layer input"),
                leaf_prediction=bool(doc.get("leaf_prediction", False)), num_classes=doc.get("num_classes"),
                feature_names=doc.get("feature_names"), source_node=source if (source >= 0).any() else None,
                extra=doc.get("extra", {}), **params,
            )
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"doc does not describe a valid forest: {exc}") from None

    # ------------------------------------------------------------ pruning
    def prune(self, x=None, bounds=None, samples=None, merge="value"):
        """The smallest forest that routes to the same values: a new
        [`Forest`][keras_trees.forest.Forest] (this one is not changed).

        A split is replaced by the subtree of the one child its samples can
        reach, and two sibling leaves holding equal values become one leaf:

        * a split is *constant* when no input inside ``bounds`` can flip it
          (a split with all weights zero; an axis-aligned or one-column split
          narrows the box of the splits below it, so a test repeated on a
          path, or ``1.75*sex=male <= -1.0`` on a 0/1 column, is constant).
          Pruning constant splits is exact: the pruned forest predicts what
          this one predicts for every input inside ``bounds`` (everywhere
          without them);
        * with rows ``x`` (or ``samples``, their per-position counts, as
          [`node_statistics`][keras_trees.forest.Forest.node_statistics] returns them), a split is also replaced
          when every row of ``x`` arriving there goes the same way (the other
          child is reached by none). The pruned forest then predicts exactly
          what this one predicts on the rows of ``x``; another input that
          reaches a pruned split follows its rows' side.

        Args:
            x: optional ``(n, input_dim)`` rows the splits read (e.g. the
                training rows).
            bounds: optional ``(lower, upper)`` ``(input_dim,)`` arrays: the
                range of each feature (``-inf`` / ``inf`` for unbounded ones,
                ``0, 1`` for a 0/1 column). Used for linear and axis-aligned
                splits; noisy-OR splits are constant only by ``x``.
            samples: optional ``(num_trees, N)`` counts of rows through every
                position of this forest (instead of ``x``).
            merge: ``"value"`` (default) merges sibling leaves with equal
                values only; ``"class"`` (classifiers: ``num_classes`` set)
                also merges sibling leaves whose values have the same
                ``argmax`` into one holding their mean weighted by the rows
                reaching them (equal weights without rows): the same
                predicted class, not the same values.

        Returns:
            A [`Forest`][keras_trees.forest.Forest] of the same kind whose ``source_node`` maps every
            position back to this forest's (or, if this forest has one, to
            its source's) node id; ``extra["pruned"]`` says what was pruned.

        >>> from keras_trees import topology
        >>> state = topology.perfect(1, 2)   # the right split tests x[0] > 0 again
        >>> f = Forest(node_state=state, split_kind="axis_aligned", feature=np.zeros((1, 3), int),
        ...            threshold=np.zeros((1, 3)), leaves=np.arange(7.0).reshape(1, 7, 1), input_dim=1)
        >>> g = f.prune()
        >>> g.num_leaves().tolist(), g.predict(np.array([[-1.0], [1.0]]))[:, 0].tolist()
        ([2], [3.0, 6.0])
        """
        if x is not None and samples is not None:
            raise ValueError("prune: pass rows x or their samples, not both")
        if merge not in ("value", "class"):
            raise ValueError(f"merge must be 'value' or 'class', got {merge!r}")
        if merge == "class" and self.num_classes is None:
            raise ValueError("merge='class' needs a classifier's forest (num_classes set)")
        if x is not None:
            samples = self.node_statistics(x)["samples"]
        if samples is not None:
            samples = _numeric("samples", samples)
            _shape_error("samples", samples, self.node_state.shape)
        p = self.input_dim
        lower, upper = (np.full(p, -np.inf), np.full(p, np.inf)) if bounds is None else \
            (np.broadcast_to(np.asarray(b, np.float64), (p,)).copy() for b in bounds)
        if bounds is not None and (np.isnan(lower).any() or np.isnan(upper).any() or (lower > upper).any()):
            raise ValueError("bounds must be (lower, upper) with lower <= upper for every feature")
        linear = self.split_kind != "noisy_or"
        w, b = self.linear_form() if linear else (None, None)
        counts = {"constant": 0, "unreached": 0, "merged": 0}

        def side(t, i, box):
            """0 (left) or 1 (right) when the split goes one way, else None."""
            if linear:
                lo, hi, open_lo, open_hi = box
                wi = w[t, i]
                used = np.flatnonzero(wi)
                at_low = [(lo[j], open_lo[j]) if wi[j] > 0 else (hi[j], open_hi[j]) for j in used]
                low = b[t, i] + sum(wi[j] * v for j, (v, _) in zip(used, at_low))
                high = b[t, i] + sum(wi[j] * (hi[j] if wi[j] > 0 else lo[j]) for j in used)
                if high <= 0:
                    counts["constant"] += 1
                    return 0
                if low > 0 or (low == 0 and any(is_open for _, is_open in at_low)):
                    counts["constant"] += 1
                    return 1
            if samples is not None and samples[t, i] > 0:
                reached = samples[t, 2 * i + 1] > 0, samples[t, 2 * i + 2] > 0
                if reached[0] != reached[1]:
                    counts["unreached"] += 1
                    return int(reached[1])
            return None

        def build(t, i, box):
            if self.node_state[t, i] != topology.SPLIT:
                weight = 1.0 if samples is None else float(samples[t, i])
                return ("leaf", i, self.leaves[t, i], weight)
            way = side(t, i, box)
            if way is not None:
                return build(t, 2 * i + 1 + way, box)
            boxes = [box, box]
            if linear and np.count_nonzero(w[t, i]) == 1:  # one column: narrow its range below
                j = int(np.flatnonzero(w[t, i])[0])
                cut = -b[t, i] / w[t, i, j]
                left, right = ([v.copy() for v in box] for _ in range(2))
                if w[t, i, j] > 0:  # left: x_j <= cut; right: x_j > cut
                    if cut < box[1][j]:
                        left[1][j], left[3][j] = cut, False
                    if cut >= box[0][j]:
                        right[0][j], right[2][j] = cut, True
                else:  # left: x_j >= cut; right: x_j < cut
                    if cut > box[0][j]:
                        left[0][j], left[2][j] = cut, False
                    if cut <= box[1][j]:
                        right[1][j], right[3][j] = cut, True
                boxes = [left, right]
            left, right = (build(t, 2 * i + 1 + k, boxes[k]) for k in (0, 1))
            if left[0] == "leaf" and right[0] == "leaf":
                if np.array_equal(left[2], right[2]):
                    counts["merged"] += 1
                    return left[:3] + (left[3] + right[3],)
                if merge == "class" and np.argmax(left[2]) == np.argmax(right[2]):
                    counts["merged"] += 1
                    total = left[3] + right[3]
                    share = 0.5 if total <= 0 else left[3] / total
                    value = (share * left[2] + (1.0 - share) * right[2]).astype(self.leaves.dtype)
                    return ("leaf", left[1], value, total)
            return ("split", i, left, right)

        def depth(node):
            return 0 if node[0] == "leaf" else 1 + max(depth(node[2]), depth(node[3]))

        box = [lower, upper, np.zeros(p, bool), np.zeros(p, bool)]  # bounds, and whether each is open
        trees = [build(t, 0, box) for t in range(self.num_trees)]
        D = max(depth(node) for node in trees)
        I, N = topology.num_internal(D), topology.num_positions(D)
        T = self.num_trees
        state = topology.empty(T, D)
        leaves = np.zeros((T, N, self.output_dim), self.leaves.dtype)
        source = np.full((T, N), -1, np.int64)
        params = {name: np.zeros((T, I) + getattr(self, name).shape[2:], getattr(self, name).dtype)
                  for name in _PARAMETERS if getattr(self, name) is not None}

        def place(t, node, at):
            old = node[1]
            source[t, at] = old if self.source_node is None else self.source_node[t, old]
            if node[0] == "leaf":
                state[t, at] = topology.LEAF
                leaves[t, at] = node[2]
                return
            state[t, at] = topology.SPLIT
            for name, value in params.items():
                value[t, at] = getattr(self, name)[t, old]
            place(t, node[2], 2 * at + 1)
            place(t, node[3], 2 * at + 2)

        for t, node in enumerate(trees):
            place(t, node, 0)
        pruned = {**counts, "by_rows": samples is not None, "bounds": bounds is not None, "merge": merge}
        return dataclasses.replace(self, node_state=state, leaves=leaves, source_node=source,
                                   extra={**self.extra, "pruned": pruned}, **params)

    # --------------------------------------------------------- conversion
    def pad_to_perfect(self, depth=None):
        """Perfect linear trees of ``depth`` (default ``max_depth``) with the same
        routing to values (the form non-greedy trees train).

        Every leaf above the last level becomes a subtree of zero split rows
        (``w = 0, b = 0``: samples always go left) whose leaves copy its value;
        ``source_node`` of every copy names the original leaf. Splits must have a
        [`linear_form`][keras_trees.forest.Forest.linear_form]; ``depth`` may be below ``max_depth`` when every tree
        fits in it.
        """
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, numbers.Integral) or depth < 0):
            raise ValueError(f"depth must be an integer >= 0, got {depth!r}")
        depth = self.max_depth if depth is None else int(depth)
        deepest = int(self.tree_depths().max())
        if deepest > depth:
            raise ValueError(f"the forest has a tree of depth {deepest}, more than the requested depth {depth}")
        leaf_bytes = self.leaves.dtype.itemsize * self.output_dim + 4 + 16
        _memory.check_heap("pad_to_perfect", self.num_trees, depth, bytes_per_position=leaf_bytes,
                           bytes_per_internal=16 * (self.input_dim + 1))
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

