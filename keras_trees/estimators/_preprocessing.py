"""The estimators' input preprocessing: a scikit-learn transformer from raw
tabular data (NumPy arrays or pandas frames) to dense float32 features.

* Numeric columns: ``SimpleImputer(strategy="median", add_indicator=True)``
  (a 0/1 indicator column for every feature with missing values in the
  training data) -> ``StandardScaler``.
* Categorical columns of a pandas frame (``category``, ``object``, ``string``
  and ``bool`` dtypes): ``SimpleImputer(strategy="constant")`` (missing values
  become the category ``"missing"``) -> ``OneHotEncoder`` with
  ``handle_unknown="infrequent_if_exist"`` (categories not seen in training
  encode as all zeros, or as the infrequent category when there is one) and
  ``min_frequency``.
* Wide categorical columns, those with more than ``max_categories`` distinct
  values in the training data (an identifier, a free-text field, a zip
  code): before the one-hot encoding (``CapLevels``), their values seen
  fewer than ``min_frequency`` times (``WIDE_MIN_COUNT`` when it is
  None) and all but the ``max_categories - 1`` most frequent of the others
  become one value, ``other`` (``id=other``; unseen values too), so no column
  gives more than ``max_categories`` one-hot columns. A column with nearly as
  many values as rows (at least ``NEAR_UNIQUE`` of them) warns
  (``UserWarning``) naming it. Columns of at most ``max_categories`` values
  are encoded exactly as without the cap; ``max_categories=None`` turns it off.
* Ordered categorical columns (``pd.CategoricalDtype(ordered=True)``: the
  frame declares the order of the categories): the rank of the category in
  that order (``OrdinalEncoder``; missing and unseen values are missing
  ranks), then as numeric columns (median imputation with an indicator,
  scaling). A split on the rank is one threshold on the order, which one-hot
  columns can only approximate with a weight per category.
* Coded numeric columns (``code_indicators``, off unless set): a numeric column
  with 3 to ``code_indicators`` distinct values in the training data (a code:
  hobby 1-3, a grade 1-5) keeps its scaled value and also gets one 0/1 column
  per training value (``ValueIndicators``; missing and unseen values are all
  zeros). One split on the value separates the codes below a threshold from
  those above it; an oblique split, which weighs every feature, needs the
  indicator to single out a middle code (hayes-roth's hobby 2). Two-valued
  columns are their own indicator and get none.

Plain arrays are all numeric (NaN allowed). Columns are selected by position,
so a model fitted on a frame also predicts on the frame's ``to_numpy()``.
"""

import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, OrdinalEncoder, StandardScaler


def is_frame(x):
    """True for a pandas (or pandas-like) data frame, without importing pandas."""
    return hasattr(x, "dtypes") and hasattr(x, "columns") and hasattr(x, "iloc")


def as_object(x):
    """Categorical columns as an object array with ``np.nan`` for every missing
    value (``None``, ``pd.NA``, ``NaN``): ``SimpleImputer`` cannot compare the
    ``pd.NA`` of pandas' ``string`` dtype, and refuses ``bool`` arrays."""
    if is_frame(x):
        return x.astype(object).where(x.notna(), np.nan).to_numpy()
    x = np.array(x, dtype=object)
    x[np.frompyfunc(_missing, 1, 1)(x).astype(bool)] = np.nan
    return x


def _missing(value):
    try:
        return value is None or bool(value != value)
    except TypeError:  # pd.NA: its comparisons are NA, whose truth value is ambiguous
        return True


def numeric_pipeline():
    return Pipeline([
        ("impute", SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True)),
        ("scale", StandardScaler()),
    ])


#: The estimators' default ``max_categories``: the most one-hot columns of one
#: categorical column. Above the levels of ordinary categoricals (a country
#: column has about 40), far below an identifier's.
MAX_CATEGORIES = 64
#: Values of a wide column seen fewer times than this are pooled into
#: ``other`` when ``min_frequency`` is None.
WIDE_MIN_COUNT = 5
#: A wide column with at least this share of distinct values among its rows warns.
NEAR_UNIQUE = 0.5


def _min_count(min_frequency, n_rows):
    """``min_frequency`` (a count, or a share of the rows) as a count of rows."""
    if min_frequency is None:
        return WIDE_MIN_COUNT
    if isinstance(min_frequency, float) and 0 < min_frequency < 1:
        return int(np.ceil(min_frequency * n_rows))
    return int(min_frequency)


class CapLevels(TransformerMixin, BaseEstimator):
    """Pools the values of wide categorical columns (object arrays, missing
    values already imputed): in a column with more than ``max_categories``
    distinct training values, every value seen fewer than ``min_frequency``
    times (``WIDE_MIN_COUNT`` if None; a float in (0, 1): a share of the
    rows) and all but the ``max_categories - 1`` most frequent of the rest
    (ties: the first in sorted order) become ``other`` (``other_`` if the
    column has a value ``other``), as do values unseen in training. The
    values of wide columns come out as strings; other columns pass unchanged.
    ``names``: the columns' names, for the warning about a column of nearly
    unique values.

    Attributes (after ``fit``): ``kept_`` (column position -> the kept values,
    sorted), ``other_`` (column position -> its pooled value), ``levels_``
    (column position -> its number of distinct training values), ``n_features_in_``.
    """

    def __init__(self, max_categories=MAX_CATEGORIES, min_frequency=None, names=None):
        self.max_categories = max_categories
        self.min_frequency = min_frequency
        self.names = names

    def fit(self, X, y=None):
        x = np.asarray(X, dtype=object)
        n = len(x)
        self.n_features_in_ = x.shape[1]
        self.kept_, self.other_, self.levels_ = {}, {}, {}
        for j in range(x.shape[1]):
            values, counts = np.unique(x[:, j].astype(str), return_counts=True)
            if len(values) <= self.max_categories:
                continue
            min_count = _min_count(self.min_frequency, n)
            order = np.argsort(-counts, kind="stable")
            order = order[counts[order] >= min_count][: self.max_categories - 1]
            kept = np.sort(values[order])
            other = "other"
            while other in set(values):
                other += "_"
            self.kept_[j], self.other_[j], self.levels_[j] = kept, other, len(values)
            if len(values) >= NEAR_UNIQUE * n:
                name = self.names[j] if self.names is not None else f"x[{j}]"
                warnings.warn(
                    f"X: categorical column {name!r} has {len(values)} distinct values in {n} rows (an "
                    f"identifier?). One-hot encoded, it would be {len(values)} features; its values "
                    f"seen fewer than {min_count} times and all but the {self.max_categories - 1} most frequent "
                    f"of the rest are pooled into {name}={other} ({len(kept)} values kept). Drop the column if "
                    "it identifies rows; max_categories and min_frequency set the cap.",
                    UserWarning, stacklevel=2)
        return self

    def transform(self, X):
        x = np.array(X, dtype=object)
        if x.ndim != 2 or x.shape[1] != self.n_features_in_:
            raise ValueError(f"X: expected {self.n_features_in_} columns, got shape {x.shape}")
        for j, kept in self.kept_.items():
            column = x[:, j].astype(str).astype(object)  # object: a fixed-width str would cut ``other``
            column[~np.isin(column, kept)] = self.other_[j]
            x[:, j] = column
        return x

    def get_feature_names_out(self, input_features=None):
        if input_features is not None:
            return np.asarray(input_features, dtype=object)
        return np.asarray([f"x{j}" for j in range(self.n_features_in_)], dtype=object)


def categorical_pipeline(min_frequency, max_categories=None, names=None):
    cap = [] if max_categories is None else [("cap", CapLevels(max_categories, min_frequency, names))]
    return Pipeline([
        ("as_object", FunctionTransformer(as_object, feature_names_out="one-to-one")),
        ("impute", SimpleImputer(strategy="constant", fill_value="missing")),
        *cap,
        ("encode", OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=min_frequency,
                                 sparse_output=False, dtype=np.float32)),
    ])


def ordered_pipeline(categories):
    """Ordered categoricals (``categories``: each column's categories in their
    order) as the rank of their category, then as numeric columns."""
    return Pipeline([
        ("as_object", FunctionTransformer(as_object, feature_names_out="one-to-one")),
        ("rank", OrdinalEncoder(categories=categories, handle_unknown="use_encoded_value",
                                unknown_value=np.nan, encoded_missing_value=np.nan, dtype=np.float64)),
        *numeric_pipeline().steps,
    ])


def value_label(value):
    """A coded column's value as its indicator names it (``hobby=2``): the
    shortest decimal that reads back as the value (2.0 -> ``2``, 0.5 -> ``0.5``,
    1000001.0 -> ``1000001``), so no two values of a column share a name."""
    return np.format_float_positional(value, trim="-")


class ValueIndicators(TransformerMixin, BaseEstimator):
    """One 0/1 column per training value of each column with 3 to
    ``max_values`` distinct (non-missing) values; other columns give none.

    Attributes (after ``fit``): ``columns_`` (positions of the coded columns),
    ``values_`` (each one's sorted training values), ``n_features_in_``.
    """

    def __init__(self, max_values=10):
        self.max_values = max_values

    def fit(self, X, y=None):
        x = np.asarray(X, dtype=np.float64)
        self.n_features_in_ = x.shape[1]
        self.columns_, self.values_ = [], []
        for j in range(x.shape[1]):
            column = x[:, j]
            values = np.unique(column[~np.isnan(column)])
            if 3 <= len(values) <= self.max_values:
                self.columns_.append(j)
                self.values_.append(values)
        return self

    def transform(self, X):
        x = np.asarray(X, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features_in_:
            raise ValueError(f"X: expected {self.n_features_in_} columns, got shape {x.shape}")
        parts = [x[:, j, None] == values[None, :] for j, values in zip(self.columns_, self.values_)]
        if not parts:
            return np.zeros((len(x), 0), np.float32)
        return np.concatenate(parts, axis=1).astype(np.float32)

    def get_feature_names_out(self, input_features=None):
        names = input_features if input_features is not None else [f"x{j}" for j in range(self.n_features_in_)]
        return np.asarray([f"{names[j]}={value_label(v)}" for j, values in zip(self.columns_, self.values_)
                           for v in values], dtype=object)


def _is_ordered(dtype):
    return str(dtype) == "category" and bool(getattr(dtype, "ordered", False))


def column_kinds(frame):
    """Positions of the numeric, the (unordered) categorical and the ordered
    categorical columns of ``frame``; ``TypeError`` naming a column of any
    other dtype (dates, intervals, ...)."""
    numeric, categorical, ordered = [], [], []
    for i, (name, dtype) in enumerate(zip(frame.columns, frame.dtypes)):
        kind = getattr(dtype, "kind", "O")
        if kind in "iuf":
            numeric.append(i)
        elif _is_ordered(dtype):
            ordered.append(i)
        elif kind in "bO" or str(dtype) in ("category", "string", "str"):
            categorical.append(i)
        else:
            raise TypeError(
                f"X: column {name!r} has dtype {dtype}; the estimators take numeric columns and "
                "categorical ones (category, object, string, bool): convert it first"
            )
    return numeric, categorical, ordered


def make_preprocessor(x, min_frequency=None, code_indicators=None, max_categories=None):
    """An unfitted transformer for ``x`` (a frame: numeric and categorical columns
    by dtype; otherwise every column numeric). Its output is dense.
    ``code_indicators``: the most distinct values of a numeric column that gets
    value indicators (``ValueIndicators``, after all other columns); None: none.
    ``max_categories``: the cap of wide categorical columns (``CapLevels``);
    None: no cap."""
    if not is_frame(x):
        if code_indicators is None:
            return numeric_pipeline()
        numeric, categorical, ordered = list(range(np.shape(x)[1])), [], []
    else:
        numeric, categorical, ordered = column_kinds(x)
    parts = []
    if numeric:
        parts.append(("numeric", numeric_pipeline(), numeric))
    if categorical:
        names = [str(x.columns[i]) for i in categorical]
        parts.append(("categorical", categorical_pipeline(min_frequency, max_categories, names), categorical))
    if ordered:
        categories = [list(x.dtypes.iloc[i].categories) for i in ordered]
        parts.append(("ordered", ordered_pipeline(categories), ordered))
    if numeric and code_indicators is not None:
        parts.append(("codes", ValueIndicators(code_indicators), numeric))
    return ColumnTransformer(parts, sparse_threshold=0.0, verbose_feature_names_out=False)
