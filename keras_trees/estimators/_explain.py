"""The estimators' trained trees in terms of their input columns.

An estimator's Keras model reads the *transformed* features
(``preprocessor_.transform(X)``: scaled numeric columns, scaled missing-value
indicators, one-hot categoricals), and its tree layer may read them through
affine layers in front (``BatchNormalization``, a bias-free ``Dense`` of
learned inner-product features, ``HingeBatchNormalization``). For
inspection, `design_forest` folds all of that into the splits: the
returned [`Forest`][keras_trees.forest.Forest] reads the **design rows**
(`design_rows`), one column per transformed feature in the units of the
input:

* a numeric column in its own units, missing values replaced by the training
  median (the imputer's value): ``age``;
* its missing-value indicator (0/1), where the training data had missing
  values: ``age=missing``;
* one 0/1 column per category of a categorical column: ``colour=red``
  (``colour=missing`` for its missing values, ``colour=infrequent_sklearn``
  for the grouped rare categories of ``min_frequency``);
* the rank of an ordered categorical column's category (0 for the first of
  its categories), missing ranks replaced by the training median, with an
  indicator like a numeric column's: ``size``, ``size=missing``;
* with ``code_indicators``, one 0/1 column per training value of a coded
  numeric column, after all the others: ``hobby=2``.

Folding an affine map into a split is exact: an oblique split reads
``<w, A d + c> + b = <A^T w, d> + (<w, c> + b)``; an axis-aligned split stays
axis-aligned when its feature is a positive multiple of one design column
(thresholds then in the column's units), else it becomes oblique. The map is
measured from the model itself (its inference outputs on the zero row and the
unit rows, checked on a random row), so any front layers that are affine at
inference fold; the fold is checked, never assumed.

Every design column belongs to one original column (``columns``), which is
how importances are summed back: one-hot and indicator columns into their
column.
"""

import dataclasses

import numpy as np

from keras_trees import topology
from keras_trees.estimators._preprocessing import value_label
from keras_trees.inspection.export import tree_layers
from keras_trees.layers._forest_layer import numpy as _numpy
from keras_trees.layers._layer_inputs import layer_input_fn

#: Rows of the training data routed for ``feature_importances_`` (a seeded sample of larger sets).
IMPORTANCE_ROWS = 4096


@dataclasses.dataclass
class Design:
    """How design rows come from transformed features, column by column:
    ``design = transformed * scale + shift``; ``names``; ``columns`` (the
    original column of each); ``binary``: ``[column name, value]`` for 0/1
    columns (indicators and one-hot), None for numeric ones."""

    names: list
    columns: np.ndarray
    binary: list
    scale: np.ndarray
    shift: np.ndarray


def column_names(estimator):
    """The estimator's original column names (``feature_names_in_``, else ``x[j]``)."""
    names = getattr(estimator, "feature_names_in_", None)
    if names is not None:
        return [str(n) for n in names]
    return [f"x[{j}]" for j in range(estimator.n_features_in_)]


def _numeric_part(pipeline, positions, names):
    """(names, columns, binary, scale, shift) of the numeric pipeline's output
    (imputed columns, then the indicators of columns with missing values, all scaled)."""
    imputer, scaler = pipeline.named_steps["impute"], pipeline.named_steps["scale"]
    positions = list(positions)
    indicated = [] if imputer.indicator_ is None else list(imputer.indicator_.features_)
    out_names = [names[positions[i]] for i in range(len(positions))] + \
        [f"{names[positions[i]]}=missing" for i in indicated]
    columns = positions + [positions[i] for i in indicated]
    binary = [None] * len(positions) + [[names[positions[i]], "missing"] for i in indicated]
    scale = np.asarray(scaler.scale_, np.float64) if scaler.scale_ is not None else np.ones(len(columns))
    shift = np.asarray(scaler.mean_, np.float64) if scaler.mean_ is not None else np.zeros(len(columns))
    return out_names, columns, binary, scale, shift


def _categorical_part(pipeline, positions, names):
    encoder = pipeline.named_steps["encode"]
    # infrequent_categories_ exists only where infrequent grouping is enabled (min_frequency)
    infrequent = encoder.infrequent_categories_ if getattr(encoder, "_infrequent_enabled", False) else \
        [None] * len(positions)
    out_names, columns, binary = [], [], []
    for i, position in enumerate(positions):
        rare = infrequent[i]
        values = [c for c in encoder.categories_[i] if rare is None or c not in set(rare)]
        values = [str(v) for v in values] + ([] if rare is None else ["infrequent_sklearn"])
        for value in values:
            out_names.append(f"{names[position]}={value}")
            columns.append(position)
            binary.append([names[position], value])
    k = len(out_names)
    return out_names, columns, binary, np.ones(k), np.zeros(k)


def _codes_part(indicators, positions, names):
    """The value indicators of coded numeric columns: ``hobby=2`` (0/1)."""
    out_names = list(indicators.get_feature_names_out([names[p] for p in positions]))
    columns, binary = [], []
    for j, values in zip(indicators.columns_, indicators.values_):
        columns += [positions[j]] * len(values)
        binary += [[names[positions[j]], value_label(v)] for v in values]
    k = len(out_names)
    return out_names, columns, binary, np.ones(k), np.zeros(k)


def design(estimator, names=None):
    """The `Design` of a fitted estimator's preprocessor (``names``:
    the original columns' names, default `column_names`)."""
    preprocessor = estimator.preprocessor_
    names = column_names(estimator) if names is None else [str(n) for n in names]
    if len(names) != estimator.n_features_in_:
        raise ValueError(f"feature_names must hold {estimator.n_features_in_} names (the estimator's "
                         f"input columns), got {len(names)}")
    if hasattr(preprocessor, "transformers_"):  # a frame: a ColumnTransformer by dtype
        parts = []
        for key, transformer, positions in preprocessor.transformers_:
            if key == "remainder" or isinstance(transformer, str):
                continue
            # numeric and ordered columns both end in an imputer and a scaler
            part = {"categorical": _categorical_part, "codes": _codes_part}.get(key, _numeric_part)
            result = part(transformer, list(positions), names)
            where = preprocessor.output_indices_[key]
            if len(result[0]) != where.stop - where.start:  # pragma: no cover - a scikit-learn change
                raise RuntimeError(f"the {key} columns of preprocessor_ produce {where.stop - where.start} "
                                   f"features, expected {len(result[0])}")
            parts.append((where.start, result))
        parts.sort(key=lambda item: item[0])
        results = [r for _, r in parts]
    else:
        results = [_numeric_part(preprocessor, range(estimator.n_features_in_), names)]
    return Design(
        names=[n for r in results for n in r[0]],
        columns=np.asarray([c for r in results for c in r[1]], np.int64),
        binary=[b for r in results for b in r[2]],
        scale=np.concatenate([r[3] for r in results]),
        shift=np.concatenate([r[4] for r in results]),
    )


def _affine(fn, p):
    """``(A (p, q), c (q,))`` with ``fn(x) = x @ A + c`` for float32 rows ``x``,
    measured on the zero and unit rows; ``ValueError`` if ``fn`` is not affine
    (checked on two random rows)."""
    rows = np.concatenate([np.zeros((1, p)), np.eye(p)]).astype(np.float32)
    out = np.asarray(fn(rows), np.float64)
    c = out[0]
    A = out[1:] - c
    probe = np.random.default_rng(0).normal(size=(2, p)).astype(np.float32)
    expected = probe.astype(np.float64) @ A + c
    got = np.asarray(fn(probe), np.float64)
    tolerance = 1e-4 * (1.0 + np.abs(expected).max() + np.abs(A).sum(0).max())
    if not np.all(np.abs(got - expected) <= tolerance):
        raise ValueError("the features the trees read are not an affine function of the model inputs: "
                         "the trees cannot be written in terms of the input columns")
    return A, c


def _fold(forest, M, e, names, extra):
    """``forest`` (reading ``z = d @ M + e``) as a forest reading the design rows ``d``."""
    kind = forest.split_kind
    fields = dict(input_dim=M.shape[0], feature_names=names, extra={**forest.extra, **extra},
                  inputs="design rows of the estimator's input columns (keras_trees.estimators: "
                         "forest_features(X))")
    if kind == "axis_aligned":
        split = topology.is_split_mask(forest.node_state)
        used = np.unique(forest.feature[split]) if split.any() else np.zeros(0, np.int64)
        columns = M[:, used]
        single = ((columns != 0).sum(0) == 1) & ((columns >= 0).all(0))
        if single.all():
            at = np.argmax(M != 0, axis=0)  # the one design column of each feature
            scale = M[at, np.arange(M.shape[1])]
            f = forest.feature
            safe = np.where(scale[f] != 0, scale[f], 1.0)
            return dataclasses.replace(forest, feature=at[f], threshold=(forest.threshold - e[f]) / safe, **fields)
        weights = np.moveaxis(M[:, forest.feature], 0, -1)  # (T, I, p_d)
        return dataclasses.replace(forest, split_kind="linear", weights=weights, bias=e[forest.feature] -
                                   forest.threshold, feature=None, threshold=None, **fields)
    weights = np.asarray(forest.weights, np.float64) @ M.T
    bias = np.asarray(forest.bias, np.float64) + np.asarray(forest.weights, np.float64) @ e
    return dataclasses.replace(forest, weights=weights, bias=bias, **fields)


def design_forest(estimator, names=None):
    """The fitted estimator's trees as a [`Forest`][keras_trees.forest.Forest]
    reading design rows (module docstring), named by the original columns.
    ``extra`` carries ``feature_scale`` (each design column's standard
    deviation on the training data: transformed units per design unit) and
    ``binary_features`` (``[column, value]`` of the 0/1 columns) for the rule
    text."""
    layers = tree_layers(estimator.model_)
    if len(layers) != 1:  # pragma: no cover - every estimator holds one tree layer
        raise ValueError(f"the model holds {len(layers)} tree layers; expected one")
    layer = layers[0]
    to_layer = layer_input_fn(estimator.model_, layer)
    plan = design(estimator, names)
    p = len(plan.names)
    A, c = _affine(lambda x: layer.forest_features(_numpy(to_layer(x))), p)
    M = A / plan.scale[:, None]  # z = ((d - shift) / scale) @ A + c
    e = c - (plan.shift / plan.scale) @ A
    extra = {"feature_scale": [float(s) for s in plan.scale], "binary_features": plan.binary}
    return _fold(layer.to_forest(), M, e, plan.names, extra)


def to_design(estimator, transformed):
    """Design rows (float64) of transformed features."""
    plan = estimator._design
    return np.asarray(transformed, np.float64) * plan.scale + plan.shift


def aggregate(values, columns, n_columns):
    """Sums per design column ``values`` ``(p_d,)`` into their original columns ``(n_columns,)``."""
    return np.bincount(columns, weights=np.asarray(values, np.float64), minlength=n_columns)


def normalized(values):
    total = values.sum()
    return values / total if total > 0 else values
