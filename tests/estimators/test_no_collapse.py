"""No estimator returns a constant model where CART finds signal.

Cheap versions of the reported cases: an imbalanced classification set (5%
positives, a noisy linear score) and an easy regression frame with
categorical columns. Each fit takes a few seconds at the estimator's own
settings shrunk (depth, epochs), ``random_state=0``.
"""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import r2_score, roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier

from keras_trees import estimators as E
from tests.estimators._settings import tiny


def _imbalanced(n=2000, rate=0.05, noise=1.5, seed=0):
    """Positives: the top ``rate`` of ``x0 - x1 + noise * N(0, 1)`` (four more noise columns)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6))
    score = x[:, 0] - x[:, 1] + noise * rng.normal(size=n)
    y = (score > np.quantile(score, 1 - rate)).astype(int)
    return train_test_split(x.astype(np.float32), y, test_size=0.25, random_state=0, stratify=y)


@pytest.mark.slow
def test_imbalanced_data_is_not_fitted_by_a_constant_polytope_tree():
    # Every depth of the grown tree predicts the majority class, so the
    # accuracy ties at every depth; the depth cut used to keep the shallowest,
    # the root (AUC 0.5). Ties are now broken by the validation log loss.
    x_train, x_test, y_train, y_test = _imbalanced()
    cart = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x_train, y_train)
    assert roc_auc_score(y_test, cart.predict_proba(x_test)[:, 1]) > 0.7  # the signal is there

    fitted = E.ConvexPolytopeTreeClassifier(max_depth=3, num_experts=3, epochs_per_level=3,
                                            random_state=0).fit(x_train, y_train)
    proba = fitted.predict_proba(x_test)[:, 1]
    assert np.ptp(proba) > 0
    assert fitted.history_["depth"] >= 1
    assert roc_auc_score(y_test, proba) > 0.65  # 0.79 here (the old cut: 0.5)
    scores = fitted.history_["validation"]
    assert set(scores) == set(range(len(scores))) and all(len(s) == 2 for s in scores.values())  # error, loss


@pytest.mark.slow
def test_the_layers_depth_cut_breaks_accuracy_ties_by_the_log_loss():
    # The same cut as the estimator's, on the layer (fit_greedy with
    # validation data): where every depth predicts the majority class, the
    # deepest useful tree, not the root, is kept.
    import keras

    from keras_trees.layers import ConvexPolytopeTree

    x_train, x_val, y_train, y_val = _imbalanced()
    tree = ConvexPolytopeTree(max_depth=3, num_experts=3, num_classes=2, seed=0)
    keras.Sequential([keras.Input((x_train.shape[1],)), tree])
    history = tree.fit_greedy(x_train, y_train, validation_data=(x_val, y_val), epochs=3, batch_size=512,
                              learning_rate=0.05)
    scores = history["validation"]
    errors = {d: s[0] for d, s in scores.items()}
    assert len(set(errors.values())) == 1  # accuracy alone ties at every depth here ...
    assert tree.depth() == history["depth"] >= 1  # ... and the log loss keeps a tree (the old cut: the root)
    assert scores[tree.depth()][1] == min(s[1] for s in scores.values()) < scores[0][1]
    proba = np.asarray(tree(x_val))[:, 1]
    assert roc_auc_score(y_val, proba) > 0.65


def _categorical_frame(n=2000, seed=0):
    """An easy regression frame: the target is the sum of the effects of three
    categorical columns (8, 4 and 3 levels; category, object and category
    dtypes, the first dominant) and a step on one of three numeric columns,
    plus a little noise."""
    rng = np.random.default_rng(seed)
    columns, target = {}, np.zeros(n)
    for j, (levels, scale) in enumerate(((8, 3.0), (4, 1.0), (3, 1.0))):
        names = np.array([f"c{j}_{i}" for i in range(levels)], dtype=object)
        codes = rng.integers(0, levels, n)
        columns[f"cat{j}"] = pd.Categorical(names[codes]) if j != 1 else names[codes]
        target += rng.normal(0, scale, levels)[codes]
    for j in range(3):
        columns[f"num{j}"] = rng.normal(size=n)
    target += 1.5 * (columns["num0"] > 0) + 0.05 * rng.normal(size=n)
    return train_test_split(pd.DataFrame(columns), 1000 + 50 * target, test_size=0.25, random_state=0)


@pytest.mark.slow
def test_easy_regression_frame_with_categoricals_is_not_fitted_by_a_constant_end_to_end_tree():
    # A guard: the reported constant (R^2 -0.00001 on 20,000 rows) was not
    # reproduced on synthetic frames (this one passes on the code before
    # the polytope fix too). CART: R^2 0.95 at depth 5; the optimizer fits
    # the regressor's leaves, so few epochs need a larger step than the
    # default 0.01 (0.57 at 4 epochs per level).
    x_train, x_test, y_train, y_test = _categorical_frame()
    fitted = E.EndToEndTreeRegressor(max_depth=5, epochs_per_level=4, finetune_epochs=4, learning_rate=0.05,
                                     random_state=0).fit(x_train, y_train)
    prediction = fitted.predict(x_test)
    assert np.ptp(prediction) > 0 and fitted.history_["depth"] >= 1
    assert r2_score(y_test, prediction) > 0.8


def _distinct_rows(out, *_):
    """A validation score that ranks a constant model first: the number of
    distinct prediction rows (lower is better), as both parts of the score."""
    distinct = float(len(np.unique(np.round(np.asarray(out, np.float64), 9), axis=0)))
    return [distinct, distinct]


@pytest.mark.slow
@pytest.mark.parametrize("cls", [E.EndToEndTreeClassifier, E.EndToEndTreeRegressor,
                                 E.ConvexPolytopeTreeClassifier, E.ConvexPolytopeTreeRegressor],
                         ids=lambda c: c.__name__)
def test_the_depth_cut_never_goes_back_to_the_root(cls, monkeypatch):
    # Where the validation score prefers the root (as a 20-60 row validation
    # part did on breast, bands and german), the single trees keep depth 1:
    # a tree of depth 0 predicts a constant. Every depth is still scored.
    from keras_trees.layers import _polytope_training

    if cls in (E.EndToEndTreeClassifier, E.EndToEndTreeRegressor):
        monkeypatch.setattr(cls, "_score_outputs", lambda self, out, y, w: _distinct_rows(out))
        scores_key = "depth_scores"
    else:
        monkeypatch.setattr(_polytope_training, "depth_score", lambda layer, pred, y, w=None: _distinct_rows(pred))
        scores_key = "validation"
    x, _, y, _ = _imbalanced(n=600, rate=0.3, noise=0.5)
    if cls._task == "regression":
        y = x[:, 0] - x[:, 1]
    fitted = tiny(cls, max_depth=3, random_state=0, validation_fraction=0.2).fit(x, y)
    scores = fitted.history_[scores_key]
    assert min(scores, key=lambda d: scores[d]) == 0 and max(scores) >= 2  # the score alone: the root
    assert fitted.history_["depth"] == 1
    assert np.ptp(fitted.predict(x)) > 0
