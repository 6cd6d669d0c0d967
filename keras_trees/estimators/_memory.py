"""The memory an estimator's fit will need, estimated before its model is
built, and the refusal of a fit that cannot fit in the machine's memory.

The estimate (``estimate``) counts what grows with the preprocessed
features: the dense feature matrix and its copies during ``fit`` (the
transformer's float64 output, its float32 copy, the training and validation
parts, the backend's copy of the training rows: ``DATA_COPIES`` float32
matrices in all), the square matrix of the trees' inspection (one row per
feature, float64), and the model's parameters with their gradients, the
optimizer's two moments and the inspection's float64 copy
(``BYTES_PER_PARAMETER``). The parameters are counted from the
estimator's own arguments (``parameters``), the same formula for every
family: its trees (``num_trees``, else one), their experts (``num_experts``,
else one), ``2**max_depth - 1`` splits each reading every feature (or the
hinge forest's ``num_features`` learned inputs), and leaves. It is an
estimate, within a small factor of the real figure, meant to tell a fit that
needs a few gigabytes from one that needs hundreds.

A fit whose estimate exceeds the memory the system has available
(``MemAvailable`` of ``/proc/meminfo``; no check where it cannot be read)
raises ``ModelTooLargeError`` (a ``MemoryError`` and a ``ValueError``)
naming the widest input columns and the arguments that shrink the model,
instead of being killed by the system midway.
"""


#: float32 copies of the preprocessed training matrix alive during ``fit``.
DATA_COPIES = 6
#: Bytes per model parameter: float32 weights, gradients and two Adam
#: moments, plus a float64 copy in the fitted trees of ``forest_``.
BYTES_PER_PARAMETER = 4 * 4 + 8


class ModelTooLargeError(MemoryError, ValueError):
    """A fit refused because its model and data would not fit in memory."""


def available_bytes():
    """The memory the system has available (bytes), or None where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def parameters(estimator, n_features, n_outputs):
    """About how many parameters the estimator's model has on ``n_features``
    preprocessed features and ``n_outputs`` outputs (see the module docstring)."""
    depth = int(getattr(estimator, "max_depth", None) or 1)
    nodes, leaves = 2 ** depth - 1, 2 ** depth
    trees = int(getattr(estimator, "num_trees", None) or 1)
    experts = int(getattr(estimator, "num_experts", None) or 1)
    inputs = getattr(estimator, "num_features", None)
    if inputs:  # the hinge forest: a learned projection, then trees on it
        return n_features * int(inputs) + trees * (nodes * 2 + leaves * n_outputs) + 4 * int(inputs)
    splits = trees * experts * nodes * (n_features + 1)
    return splits + trees * leaves * n_outputs + 4 * n_features


def estimate(estimator, n_rows, n_features, n_outputs):
    """``(bytes, parameters)``: the estimated peak memory of the fit on
    ``n_rows`` x ``n_features`` preprocessed rows, and the parameter count."""
    params = parameters(estimator, n_features, n_outputs)
    data = DATA_COPIES * 4 * n_rows * n_features
    inspection = 8 * n_features * n_features
    return data + inspection + BYTES_PER_PARAMETER * params, params


def _widest(preprocessor, names, n=3):
    """The input columns that give the most preprocessed features: ``[(name, features)]``."""
    counts = {}
    for key, transformer, positions in getattr(preprocessor, "transformers_", []):
        if key != "categorical" or isinstance(transformer, str):
            continue
        encoder = transformer.named_steps["encode"]
        for i, position in enumerate(positions):
            counts[names[position]] = len(encoder.categories_[i])
    return sorted(counts.items(), key=lambda item: -item[1])[:n]


def _gb(value):
    return f"{value / 2 ** 30:.1f} GB"


def check(estimator, n_rows, n_features, n_outputs, preprocessor=None):
    """Raises ``ModelTooLargeError`` when the fit's estimated memory
    (``estimate``) exceeds ``available_bytes``."""
    available = available_bytes()
    if available is None:
        return
    needed, params = estimate(estimator, n_rows, n_features, n_outputs)
    if needed <= available:
        return
    owner = type(estimator).__name__
    names = getattr(estimator, "feature_names_in_", None)
    names = [str(n) for n in names] if names is not None else [f"x[{j}]" for j in range(estimator.n_features_in_)]
    widest = _widest(preprocessor, names) if preprocessor is not None else []
    wide = ", ".join(f"{name!r} ({count} one-hot columns)" for name, count in widest if count > 1)
    shrink = [f"max_categories (now {getattr(estimator, 'max_categories', None)!r}) or min_frequency "
              "(pools rare values of categorical columns)"]
    for name in ("num_trees", "num_experts", "max_depth", "num_features"):
        if getattr(estimator, name, None):
            shrink.append(f"{name} (now {getattr(estimator, name)!r})")
    raise ModelTooLargeError(
        f"{owner}: this fit would need about {_gb(needed)} of memory, more than the {_gb(available)} available: "
        f"{n_rows} rows x {n_features} features after preprocessing and about {params:,} model parameters"
        + (f"; the widest categorical columns: {wide}" if wide else "")
        + ". Lower " + ", ".join(shrink) + ", drop identifier columns, or fit on fewer rows.")
