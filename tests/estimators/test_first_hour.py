"""What a new user of the estimators meets in a first hour: scikit-learn and
xgboost habits (``eval_set``, ``predict_log_proba``, ``validation_fraction``
None or 0, clear errors and warnings at prediction, the default score of
``permutation_importance``), a fitted model never silently worse than the
constant prediction, a tree selected on the predictions it returns, and
``verbose=1`` lines that follow the fit and agree with the returned model."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from keras_trees import estimators as E
from keras_trees import inspection
from tests.estimators._settings import tiny


def _frame(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                      "colour": rng.choice(["red", "green", "blue"], n)})
    y = np.where((X["a"] > 0) ^ (X["colour"] == "red"), "yes", "no")
    return X, y


# ----------------------------------------------------------------- eval_set
@pytest.mark.parametrize("wrap", [tuple, lambda s: [s]], ids=["tuple", "list"])
def test_eval_set_is_the_validation_set(wrap):
    """``eval_set=(X_val, y_val)`` (or a list of them, as xgboost takes)
    replaces the internal split: every row of ``X`` trains and the validation
    scores are those of ``X_val``."""
    X, y = _frame(300)
    X_val, y_val = _frame(120, seed=1)
    clf = tiny(E.HingeForestClassifier, random_state=0, verbose=0)
    clf.fit(X, y, eval_set=wrap((X_val, y_val)))
    assert "val_loss" in clf.history_
    from sklearn.metrics import log_loss

    # the restored best epoch's validation loss is that of X_val under the returned model
    assert min(clf.history_["val_loss"]) == pytest.approx(log_loss(y_val, clf.predict_proba(X_val)), rel=1e-3)


def test_eval_set_errors_name_the_estimator_and_the_argument():
    X, y = _frame(100)
    reg = tiny(E.TreeEnsembleRegressor)
    with pytest.raises(TypeError, match=r"TreeEnsembleRegressor\.fit\(\) got an unexpected keyword argument "
                                        r"'early_stopping_rounds'"):
        reg.fit(X, np.zeros(100), early_stopping_rounds=5)
    clf = tiny(E.TreeEnsembleClassifier)
    with pytest.raises(ValueError, match="eval_set"):
        clf.fit(X, y, eval_set=X)
    with pytest.raises(ValueError, match="eval_set: y_val has labels not in the training y"):
        clf.fit(X, y, eval_set=(X, np.where(y == "yes", "maybe", y)))


@pytest.fixture(scope="module")
def fitted_on_a_frame():
    """``(X, y, clf)``: one tiny classifier fitted on a 200-row frame, read (not
    changed) by the prediction tests; fitted with the estimator tests' short
    epochs and, on TensorFlow, eagerly (a few steps cost less than tracing)."""
    import keras

    from keras_trees.estimators._base import TreeEstimator

    X, y = _frame(200)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TreeEstimator, "_min_epoch_steps", 2)
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            tf.config.run_functions_eagerly(True)
        try:
            clf = tiny(E.TreeEnsembleClassifier, random_state=0).fit(X, y)
        finally:
            if keras.backend.backend() == "tensorflow":
                tf.config.run_functions_eagerly(False)
    return X, y, clf


# -------------------------------------------------------- predict_log_proba
@pytest.mark.slow
def test_predict_log_proba(fitted_on_a_frame):
    X, y, clf = fitted_on_a_frame
    np.testing.assert_allclose(clf.predict_log_proba(X), np.log(clf.predict_proba(X)), rtol=1e-12)


# ------------------------------------------------------ validation_fraction
@pytest.mark.slow
@pytest.mark.parametrize("fraction", [None, 0.0])
def test_validation_fraction_none_or_zero_trains_without_validation(fraction, eager_tensorflow):
    X, y = _frame(200)
    clf = tiny(E.TreeEnsembleClassifier, validation_fraction=fraction, random_state=0).fit(X, y)
    assert "val_loss" not in clf.history_ and len(clf.history_["loss"]) == clf.max_epochs


# ---------------------------------------------------------------- prediction
@pytest.mark.slow
def test_a_string_in_a_numeric_column_names_the_column(fitted_on_a_frame, eager_tensorflow):
    X, y, clf = fitted_on_a_frame
    bad = X.copy()
    bad["b"] = bad["b"].astype(object)
    bad.loc[5, "b"] = "n/a"
    with pytest.raises(ValueError, match=r"column 'b' was numeric in fit, but holds 'n/a'"):
        clf.predict(bad)
    numeric = tiny(E.TreeEnsembleClassifier, random_state=0).fit(X[["a", "b"]].to_numpy(), y)
    rows = X[["a", "b"]].to_numpy().astype(object)
    rows[3, 1] = "n/a"
    with pytest.raises(ValueError, match=r"column 1 .*holds 'n/a'"):
        numeric.predict(rows)


@pytest.mark.slow
def test_an_array_after_a_frame_warns_once(fitted_on_a_frame):
    X, y, clf = fitted_on_a_frame
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.predict(X.to_numpy())
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1 and "TreeEnsembleClassifier" in messages[0], messages


# ------------------------------------------------------ permutation importance
@pytest.mark.slow
def test_permutation_importance_defaults_to_the_estimators_loss(eager_tensorflow):
    """On an imbalanced set where every prediction is the majority class,
    accuracy cannot move; the log loss does, for the column that carries the
    signal."""
    rng = np.random.default_rng(0)
    n = 600
    X = pd.DataFrame({"signal": rng.normal(size=n), "noise": rng.normal(size=n)})
    y = (X["signal"] + rng.normal(scale=0.5, size=n) > 2.2).astype(int)  # about 2% positives
    clf = tiny(E.TreeEnsembleClassifier, random_state=0).fit(X, y)
    result = inspection.permutation_importance(clf, X, y, n_repeats=3)
    from sklearn.metrics import log_loss

    assert result["baseline"] == pytest.approx(-log_loss(y, clf.predict_proba(X)))
    assert result["importances_mean"][0] > 0 and result["importances_mean"][0] > result["importances_mean"][1]
    reg = tiny(E.TreeEnsembleRegressor, random_state=0).fit(X, X["signal"].to_numpy())
    again = inspection.permutation_importance(reg, X, X["signal"].to_numpy(), n_repeats=1)
    assert again["baseline"] == pytest.approx(-np.mean((reg.predict(X) - X["signal"].to_numpy()) ** 2))


# ------------------------------------- selection on the returned predictions
def _linear(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    return x, 2 * x[:, 0] + 0.3 * x[:, 1] + rng.normal(scale=0.1, size=n)


def test_a_barely_annealed_regressor_is_not_returned_worse_than_the_mean():
    """No annealing and one split: routed softly, the trained stump is a smooth
    regression (its leaves far outside the targets' range); snapped to its two
    leaves by hard routing it fitted far worse than the mean. The estimator now
    scores what it would return and ships the routing that validates better
    (``history_["routing"]``)."""
    from sklearn.metrics import r2_score

    x, y = _linear(1200)
    reg = E.EndToEndTreeRegressor(max_depth=1, annealing_increment=0.0, epochs_per_level=30, finetune_epochs=10,
                                  learning_rate=0.05, random_state=0).fit(x[:900], y[:900])
    assert r2_score(y[:900], reg.predict(x[:900])) > 0.9
    assert r2_score(y[900:], reg.predict(x[900:])) > 0.9
    assert reg.history_["routing"] == "soft"


@pytest.mark.slow
def test_the_depth_is_chosen_on_the_predictions_returned():
    """The validation score of the kept depth is that of ``predict`` on the
    validation rows (here an explicit ``eval_set``), and so is the loss of
    the epoch early stopping kept."""
    def steps(n, seed):
        x = np.random.default_rng(seed).normal(size=(n, 3))
        return x, 2.0 * (x[:, 0] > 0) + (x[:, 1] > 0.5) + 0.1 * x[:, 2]

    x, y = steps(900, 0)
    x_val, y_val = steps(300, 1)
    reg = tiny(E.EndToEndTreeRegressor, random_state=0).fit(x, y, eval_set=(x_val, y_val))
    standardized = ((reg.predict(x_val) - y_val) / reg._y_scale[0]) ** 2
    assert reg.history_["routing"] == "hard"
    assert reg.history_["depth_scores"][reg.history_["depth"]][1] == pytest.approx(standardized.mean(), rel=1e-4)


@pytest.mark.slow
def test_a_model_worse_than_the_constant_warns():
    """A validation set whose targets run against the training ones: the fitted
    model validates worse than the mean, and fit says so (a ``UserWarning``
    naming the estimator, the two scores and what to try) instead of
    returning it silently."""
    x, y = _linear(300)
    x_val, y_val = _linear(100, seed=1)
    with pytest.warns(UserWarning, match=r"TreeEnsembleRegressor: the fitted model predicts its validation part "
                                         r"worse than the constant prediction of the training mean target.*Try"):
        reg = tiny(E.TreeEnsembleRegressor, random_state=0).fit(x, y, eval_set=(x_val, -y_val))
    constant = reg.history_["validation_constant"]
    assert min(reg.history_["val_loss"]) > constant[1]


@pytest.mark.slow
def test_the_best_candidate_that_beats_the_constant_is_kept(monkeypatch):
    """Of several candidates, one that validates worse than the constant is
    never kept over one that beats it, even where its error is lower."""
    x, y = _linear(400)
    reg = E.NonGreedyTreeRegressor(max_depth=2, max_epochs=2, nu=[1.0, 10.0], random_state=0)
    calls = []

    def score(model, validation):
        calls.append(model)
        return (0.0, 99.0) if len(calls) == 1 else (0.5, 0.5)  # the first: worse than the constant's loss

    monkeypatch.setattr(type(reg), "_validation_score", lambda self, m, v: score(m, v))
    reg.fit(x, y)
    assert reg.model_ is calls[1]


# ------------------------------------------------------------------- verbose
@pytest.mark.slow
def test_verbose_lines_follow_the_fit_and_agree_with_the_model(capsys):
    X, y = _frame(400)
    tiny(E.HingeForestClassifier, max_epochs=10, random_state=0, verbose=1).fit(X, y)
    out = capsys.readouterr().out
    assert "HingeForestClassifier: training: at most 10 epochs" in out
    progress = [line for line in out.splitlines() if re.search(r"epoch \d+/10, loss .* s elapsed, at most \d+ s left",
                                                               line)]
    assert len(progress) >= 3, out
    assert re.search(r"training ended after \d+ of at most 10 epochs .*kept epoch \d+, validation loss", out), out

    clf = E.EndToEndTreeClassifier(max_depth=3, epochs_per_level=3, finetune_epochs=3, random_state=0, verbose=1)
    clf.fit(X, y)
    out = capsys.readouterr().out
    kept = re.search(r"validation kept depth (\d+) of the \d+ grown \((\d+) leaves\)", out)
    summary = re.search(r"fitted 1 tree of depth (\d+), (\d+) leaves", out)
    assert kept and summary, out
    forest = clf.forest_
    assert int(summary.group(1)) == int(forest.tree_depths().max())
    assert int(summary.group(2)) == int(np.sum(forest.num_leaves()))
    # the cut keeps the heap's tree; forest_ may read as a smaller one (what no row reaches pruned)
    assert int(kept.group(1)) >= int(summary.group(1)) and int(kept.group(2)) >= int(summary.group(2)), out
