"""Wide categorical columns (an identifier, a zip code): the default cap of
their one-hot columns (``max_categories``), the warning for a column of
nearly unique values, and the refusal of a fit whose memory estimate
exceeds what the machine has."""

import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

from keras_trees import estimators as E
from keras_trees.estimators import _memory
from keras_trees.estimators._preprocessing import MAX_CATEGORIES, CapLevels, make_preprocessor

from ._settings import TINY, tiny

ESTIMATORS = sorted(TINY, key=lambda cls: cls.__name__)


def _frame(n, seed=0):
    """``n`` rows: two numeric columns (the signal), a 3-level colour, a
    40-level country and an identifier unique to each row."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    frame = pd.DataFrame({
        "a": x[:, 0], "b": x[:, 1],
        "colour": rng.choice(["red", "green", "blue"], n),
        "country": rng.choice([f"c{i:02d}" for i in range(40)], n),
        "id": [f"row{i}" for i in range(n)],
    })
    return frame, (x[:, 0] + x[:, 1] > 0).astype(int)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda cls: cls.__name__)
def test_every_estimator_has_max_categories(cls):
    assert cls().get_params()["max_categories"] == MAX_CATEGORIES == 64
    assert "max_categories" in inspect.signature(cls).parameters
    assert "max_categories:" in cls.__doc__


def test_an_identifier_column_is_pooled_with_a_warning_naming_it():
    frame, _ = _frame(20000)
    with pytest.warns(UserWarning, match=r"'id' has 20000 distinct values in 20000 rows.*pooled into id=other"):
        pre = make_preprocessor(frame, max_categories=64).fit(frame)
    out = pre.transform(frame)
    # a, b; colour 3; country 40 (under the cap: untouched); id: one pooled column
    assert out.shape == (20000, 2 + 3 + 40 + 1)
    assert "id_other" in list(pre.get_feature_names_out())
    # unseen identifiers at predict time join the pooled value
    unseen = frame.iloc[:5].assign(id=["new1", "new2", "new3", "new4", "new5"])
    assert np.array_equal(pre.transform(unseen), out[:5])


def test_the_cap_keeps_the_most_frequent_values_of_a_wide_column():
    rng = np.random.default_rng(0)
    values = np.concatenate([np.repeat([f"z{i:03d}" for i in range(100)], np.arange(100, 0, -1)),
                             [f"rare{i}" for i in range(300)]])
    frame = pd.DataFrame({"zip": rng.permutation(values)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 400 values in 5350 rows: wide, but no identifier
        pre = make_preprocessor(frame, max_categories=10).fit(frame)
    cap = pre.named_transformers_["categorical"].named_steps["cap"]
    assert list(cap.kept_[0]) == [f"z{i:03d}" for i in range(9)]  # the 9 most frequent, seen >= 5 times
    assert pre.transform(frame).shape[1] == 10
    # min_frequency sets which values count as rare
    pre = make_preprocessor(frame, min_frequency=95, max_categories=64).fit(frame)
    assert pre.transform(frame).shape[1] == 6 + 1  # z000..z005 are seen >= 95 times


def test_the_cap_does_not_change_ordinary_categoricals():
    frame, _ = _frame(3000)
    frame = frame.drop(columns="id")
    frame.loc[:3, "colour"] = "violet"  # a rare level of a narrow column stays its own column
    plain = make_preprocessor(frame).fit(frame)
    capped = make_preprocessor(frame, max_categories=64).fit(frame)
    assert list(plain.get_feature_names_out()) == list(capped.get_feature_names_out())
    assert np.array_equal(plain.transform(frame), capped.transform(frame))


def test_a_wide_column_of_integers_is_capped_too():
    frame = pd.DataFrame({"code": pd.Categorical(np.arange(500) % 250)})
    pre = make_preprocessor(frame, max_categories=16).fit(frame)
    assert pre.transform(frame).shape[1] == 1  # every code is seen twice: all pooled
    assert isinstance(CapLevels().fit(np.array([["a"]], dtype=object)), CapLevels)


@pytest.mark.slow
def test_the_identifier_adds_one_feature_to_the_model_and_no_importance():
    frame, y = _frame(20000)
    estimator = E.TreeEnsembleClassifier(max_depth=2, num_trees=3, max_epochs=1, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(frame, y)
    assert [str(w.message) for w in caught if "distinct values" in str(w.message)] == [
        "X: categorical column 'id' has 20000 distinct values in 20000 rows (an identifier?). One-hot encoded, "
        "it would be 20000 features; its values seen fewer than 5 times and all but the 63 most frequent of the "
        "rest are pooled into id=other (0 values kept). Drop the column if it identifies rows; max_categories "
        "and min_frequency set the cap."]
    assert estimator.preprocessor_.transform(frame.iloc[:1]).shape[1] == 46
    # BatchNormalization (4 x 46) + 3 trees of 3 splits on 46 features + leaves: 632
    assert estimator.model_.count_params() < 700  # without the cap: 20046 features, over 200,000
    importances = dict(zip(frame.columns, estimator.feature_importances_))
    assert importances["id"] == 0.0


@pytest.mark.slow
def test_max_categories_none_turns_the_cap_off():
    frame, y = _frame(300)
    estimator = E.TreeEnsembleClassifier(max_depth=2, num_trees=2, max_epochs=1, random_state=0,
                                         max_categories=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(frame, y)
    assert not [w for w in caught if "distinct values" in str(w.message)]
    assert estimator.preprocessor_.transform(frame.iloc[:1]).shape[1] == 2 + 3 + 40 + 300


@pytest.mark.parametrize("value", [1, 0, 2.5, "64"])
def test_a_wrong_max_categories_is_refused_naming_it(value):
    frame, y = _frame(50)
    with pytest.raises((ValueError, TypeError), match="max_categories"):
        tiny(E.TreeEnsembleClassifier, max_categories=value).fit(frame, y)


def test_the_memory_estimate_is_near_the_parameter_count():
    for cls in (E.TreeEnsembleClassifier, E.HingeForestClassifier, E.EndToEndTreeClassifier,
                E.NonGreedyTreeClassifier, E.ConvexPolytopeTreeClassifier):
        for estimator in (cls(), tiny(cls)):
            estimator._seed = 0
            real = estimator._build_model(300, 3, 0).count_params()
            estimated = _memory.parameters(estimator, 300, 3)
            assert real / 3 <= estimated <= real * 3, (cls.__name__, estimated, real)


def test_a_fit_that_cannot_fit_in_memory_is_refused_before_the_model_is_built(monkeypatch):
    frame, y = _frame(2000)
    monkeypatch.setattr(_memory, "available_bytes", lambda: 50 * 2 ** 20)  # 50 MB
    built = []
    monkeypatch.setattr(E.HingeForestClassifier, "_build_model",
                        lambda self, *args: built.append(args) or pytest.fail("built"))
    estimator = E.HingeForestClassifier(random_state=0, max_categories=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(MemoryError, match=r"(?s)HingeForestClassifier: this fit would need about .* GB.*"
                                              r"'id' \(2000 one-hot columns\).*max_categories \(now None\)"):
            estimator.fit(frame, y)
    assert not built
    assert issubclass(_memory.ModelTooLargeError, ValueError)
    # with the default cap the same fit needs a few MB and goes ahead
    assert _memory.estimate(estimator, 1800, 46, 2)[0] < 50 * 2 ** 20
