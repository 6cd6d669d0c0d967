"""The estimators on raw tabular data and inside scikit-learn's tools: pandas
frames with categoricals and missing values, Pipeline / GridSearchCV /
cross_val_score, repeatability, class weights, pickling and saving the model."""

import pickle

import keras
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils import compute_sample_weight

from keras_trees import estimators as E
from keras_trees.inspection.export import tree_layers
from keras_trees.layers._layer_inputs import layer_input_fn
from tests.estimators._settings import TINY, tiny

CLASSIFIERS = [cls for cls in TINY if cls._task == "classification"]


def easy(n=240, seed=0):
    """Two well separated classes in 4 features."""
    return make_classification(n, 4, n_informative=2, n_redundant=0, class_sep=2.0, random_state=seed)


def frame(n=200, seed=0):
    """A frame with numeric, NaN, category, object (with None), string and bool
    columns, and labels (strings) that depend on a numeric and a categorical column."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    colour = rng.choice(["red", "green", "blue"], n)
    df = pd.DataFrame({
        "a": a,
        "b": np.where(rng.random(n) < 0.2, np.nan, rng.normal(size=n)),
        "colour": pd.Categorical(colour),
        "city": np.where(rng.random(n) < 0.2, None, rng.choice(["x", "y"], n)).astype(object),
        "code": pd.array(np.where(rng.random(n) < 0.1, None, rng.choice(["p", "q"], n)), dtype="string"),
        "flag": rng.random(n) < 0.5,
    })
    y = np.where((a > 0) ^ (colour == "red"), "yes", "no")
    return df, y


@pytest.fixture
def eager():
    """Fits of a few steps run faster eagerly than traced (see
    test_estimator_checks.py); the tests without it fit for hundreds of steps,
    which traced functions run several times faster."""
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    yield
    tf.config.run_functions_eagerly(False)


# The frame's columns are preprocessed by the code every estimator shares
# (TreeEstimator); a family's model sees float32 features either way. One
# estimator per task that trains with Keras' fit, and the end-to-end
# classifier and non-greedy regressor, whose fits read the features themselves
# (growth, smoothed leaves; the CART start).
FRAME_ESTIMATORS = [E.TreeEnsembleClassifier, E.TreeEnsembleRegressor, E.EndToEndTreeClassifier,
                    E.NonGreedyTreeRegressor]


@pytest.mark.parametrize("cls", FRAME_ESTIMATORS, ids=lambda c: c.__name__)
def test_pandas_frame_with_categoricals_and_missing_values(cls, eager):
    df, labels = frame()
    y = labels if cls._task == "classification" else (df["a"] * 3.0 + (df["colour"] == "red") * 2.0).to_numpy()
    est = tiny(cls, random_state=0, batch_size=100).fit(df, y)
    assert list(est.feature_names_in_) == list(df.columns) and est.n_features_in_ == 6
    # numeric a, b (+ b's missing indicator), one-hot colour (3), city (x, y, missing), code (p, q, missing), flag (2)
    assert est.preprocessor_.transform(df).shape[1] == 3 + 3 + 3 + 3 + 2
    unseen = df.head(5).copy()
    unseen["city"] = ["never seen", None, "x", "y", "z"]
    unseen["colour"] = pd.Categorical(["purple", "red", "red", "blue", "green"])
    pred = est.predict(unseen)
    assert pred.shape == (5,) and np.isfinite(est.predict(df).astype(float) if est._task == "regression" else 1).all()
    if cls._task == "classification":
        assert list(est.classes_) == ["no", "yes"] and set(pred) <= {"no", "yes"}
        np.testing.assert_allclose(est.predict_proba(unseen).sum(1), 1.0, rtol=1e-5)
    # the same values as an array of objects, columns by position
    np.testing.assert_array_equal(est.predict(df.to_numpy()), est.predict(df))
    with pytest.raises(ValueError, match="feature names"):
        est.predict(df[df.columns[::-1]])


def test_unsupported_column_dtype_is_named():
    df, y = frame(40)
    df["when"] = pd.date_range("2020-01-01", periods=40)
    with pytest.raises(TypeError, match="'when'"):
        tiny(E.TreeEnsembleClassifier).fit(df, y)


@pytest.mark.slow
def test_pipeline_grid_search_and_cross_validation(eager):
    x, y = easy()
    pipe = Pipeline([("square", FunctionTransformer(np.square)),
                     ("tree", tiny(E.TreeEnsembleClassifier, random_state=0))])
    scores = cross_val_score(pipe.set_params(square="passthrough"), x, y, cv=3)
    assert scores.mean() > 0.85, scores
    search = GridSearchCV(tiny(E.NonGreedyTreeClassifier, random_state=0), {"max_depth": [1, 2]}, cv=2).fit(x, y)
    assert search.best_params_["max_depth"] in (1, 2) and search.best_score_ > 0.85
    assert search.score(x, y) > 0.85


def test_bad_arguments_name_the_argument():
    x, y = easy(40)
    for cls, bad in [
        (E.TreeEnsembleClassifier, {"max_depth": 0}),
        (E.TreeEnsembleClassifier, {"validation_fraction": 1.0}),
        (E.TreeEnsembleClassifier, {"class_weight": "even"}),
        (E.HingeForestRegressor, {"kind": "bush"}),
        (E.EndToEndTreeClassifier, {"split_type": "curved"}),
        (E.NonGreedyTreeClassifier, {"nu": -1.0}),
        (E.NonGreedyTreeClassifier, {"init": "random"}),
        (E.NonGreedyTreeClassifier, {"init_depth": "auto"}),
        (E.ConvexPolytopeTreeClassifier, {"prior_weight": -0.1}),
    ]:
        name = next(iter(bad))
        with pytest.raises(ValueError, match=f"'{name}' parameter"):
            tiny(cls, **bad).fit(x, y)
    with pytest.raises(TypeError, match="unexpected keyword argument 'depth'"):
        E.TreeEnsembleClassifier(depth=3)
    with pytest.raises(ValueError, match="at least 2 classes"):
        tiny(E.TreeEnsembleClassifier).fit(x, np.zeros(len(x)))


@pytest.mark.slow
def test_polytope_prior_weight_reaches_the_layer():
    x, y = easy(60)
    for weight in (0.5, 0.0):
        tree = tiny(E.ConvexPolytopeTreeClassifier, prior_weight=weight, random_state=0).fit(x, y).model_.layers[-1]
        assert tree.prior is None if weight == 0 else tree.prior.weight == weight


@pytest.mark.slow
def test_end_to_end_min_samples_split_stops_growth(eager):
    x, y = easy(60)
    depths = {n: tiny(E.EndToEndTreeClassifier, min_samples_split=n, validation_fraction=0.0, random_state=0)
              .fit(x, y).model_.layers[-1].depth() for n in (2, 61)}
    assert depths[61] == 0 and depths[2] > 0, depths  # 60 rows: a root leaf


@pytest.mark.slow
def test_non_greedy_co2_initialization_fits_an_oblique_boundary():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3))
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    scores = {init: tiny(E.NonGreedyTreeClassifier, init=init, max_depth=2, nu=4.0, random_state=0).fit(x, y)
              .score(x, y) for init in ("cart", "co2")}
    assert scores["co2"] > 0.95 and scores["co2"] >= scores["cart"] + 0.03, scores


@pytest.mark.slow
def test_non_greedy_init_depth_cv_starts_from_the_cross_validated_cart_depth():
    """init_depth="cv": the start's depth is the one CART's 5-fold CV picks on
    the training part (a one-split boundary: depth 1), the perfect tree stays
    max_depth deep. It is the default of both estimators; "max_depth" starts
    at max_depth."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (x[:, 0] > 0).astype(int)
    cv = tiny(E.NonGreedyTreeClassifier, max_depth=4, random_state=0).fit(x, y)
    assert cv.init_depth == "cv" and cv.init_depth_ == 1 and cv.model_.depth == 4 and cv.score(x, y) > 0.95
    full = tiny(E.NonGreedyTreeClassifier, max_depth=4, init_depth="max_depth", random_state=0).fit(x, y)
    assert full.init_depth_ == 4
    target = x[:, 0] + 0.1 * x[:, 1]
    assert E.NonGreedyTreeRegressor().init_depth == "cv"
    full = tiny(E.NonGreedyTreeRegressor, max_depth=4, init_depth="max_depth", random_state=0).fit(x, target)
    assert full.init_depth_ == 4
    assert 1 <= tiny(E.NonGreedyTreeRegressor, random_state=0).fit(x, target).init_depth_ <= 3
    # A noisy step: CV picks the one split, where the full depth would fit the noise.
    step = (x[:, 0] > 0) + 0.3 * rng.normal(size=len(x))
    regressor = tiny(E.NonGreedyTreeRegressor, max_depth=4, random_state=0).fit(x, step)
    assert regressor.init_depth_ == 1 and regressor.model_.depth == 4


@pytest.mark.slow
def test_same_random_state_same_predictions_graph_mode():
    x, y = easy(160)
    for cls in (E.TreeEnsembleClassifier, E.HingeForestRegressor):
        target = y if cls._task == "classification" else x[:, 0] + y
        first = tiny(cls, random_state=3).fit(x, target)
        again = tiny(cls, random_state=3).fit(x, target)
        other = tiny(cls, random_state=4).fit(x, target)
        assert len(first.history_["val_loss"]) >= 1  # the early-stopping path ran
        np.testing.assert_array_equal(first._model_outputs(x), again._model_outputs(x))
        assert not np.array_equal(first._model_outputs(x), other._model_outputs(x))


@pytest.mark.slow
def test_end_to_end_scores_validation_only_where_early_stopping_reads_it(monkeypatch):
    """Inside a level of greedy growth the validation scores are not computed
    (NaN in the history); the fit is the same as with every epoch scored."""
    x, y = easy(200)
    settings = dict(max_depth=3, epochs_per_level=4, finetune_epochs=3, random_state=0)
    calls = []
    test_on_batch = keras.Model.test_on_batch

    def counted(self, *args, **kwargs):
        calls.append(1)
        return test_on_batch(self, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "test_on_batch", counted)
    skipping = tiny(E.EndToEndTreeClassifier, **settings).fit(x, y)
    skipped_calls = len(calls)
    monkeypatch.setattr(E.EndToEndTreeClassifier, "_validation_needed", lambda self, callbacks: None)
    every = tiny(E.EndToEndTreeClassifier, **settings).fit(x, y)
    np.testing.assert_array_equal(skipping._model_outputs(x), every._model_outputs(x))

    history, full = skipping.history_, every.history_
    epochs = len(full["loss"])
    assert len(history["val_loss"]) == epochs == skipped_calls + np.isnan(history["val_loss"]).sum()
    # growth_phase is logged for the next epoch: epochs 0 .. grown - 1 grew the tree.
    grown = 1 + int(np.sum(np.asarray(full["growth_phase"]) == 1))
    assert grown >= 2 * 4  # at least two levels, so some epochs were skipped
    for epoch in range(epochs):
        skip = 0 < epoch < grown and (epoch + 1) % 4 != 0
        assert np.isnan(history["val_loss"][epoch]) == skip, epoch
        if not skip:
            assert history["val_loss"][epoch] == full["val_loss"][epoch]
    assert history["depth_scores"] == full["depth_scores"]


@pytest.mark.slow
def test_class_weight_changes_the_fit_and_combines_with_sample_weight(eager):
    x, y = make_classification(300, 4, weights=[0.85], class_sep=0.5, random_state=0)
    plain = tiny(E.TreeEnsembleClassifier, random_state=0).fit(x, y)
    heavy = tiny(E.TreeEnsembleClassifier, random_state=0, class_weight={0: 1.0, 1: 20.0}).fit(x, y)
    assert heavy.predict_proba(x)[:, 1].mean() > plain.predict_proba(x)[:, 1].mean() + 0.1
    assert (heavy.predict(x) == 1).mean() > (plain.predict(x) == 1).mean()
    balanced = tiny(E.TreeEnsembleClassifier, random_state=0, class_weight="balanced").fit(x, y)
    by_weight = tiny(E.TreeEnsembleClassifier, random_state=0).fit(
        x, y, sample_weight=compute_sample_weight("balanced", y))
    np.testing.assert_allclose(balanced.predict_proba(x), by_weight.predict_proba(x), rtol=1e-6)


@pytest.mark.parametrize("cls", CLASSIFIERS, ids=lambda c: c.__name__)
def test_pickle_and_keras_save_round_trips(cls, tmp_path, eager):
    df, y = frame(120)
    est = tiny(cls, random_state=0).fit(df, y)
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_proba(df), est.predict_proba(df))
    path = str(tmp_path / "model.keras")
    est.model_.save(path)
    loaded = keras.saving.load_model(path)
    x = est.preprocessor_.transform(df).astype("float32")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded(x, training=False)),
        keras.ops.convert_to_numpy(est.model_(x, training=False)))


@pytest.mark.slow
def test_regression_targets_come_back_in_their_units():
    x, y = easy(200)
    target = np.stack([1000.0 * x[:, 0] + 5000.0, -x[:, 1]], axis=1)
    est = tiny(E.TreeEnsembleRegressor, random_state=0, max_depth=3, max_epochs=20).fit(x, target)
    pred = est.predict(x)
    assert pred.shape == (200, 2)
    assert abs(pred[:, 0].mean() - 5000.0) < 300.0 and est.score(x, target) > 0.5
    assert est.predict(x[:3]).shape == (3, 2)
    single = tiny(E.ConvexPolytopeTreeRegressor, random_state=0).fit(x, target[:, 0])
    assert single.predict(x).shape == (200,) and single.score(x, target[:, 0]) > 0.5


@pytest.mark.slow
def test_an_epoch_is_at_least_16_mini_batches(monkeypatch):
    from keras_trees.estimators._base import TreeEstimator
    from tests.estimators.conftest import REAL_MIN_EPOCH_STEPS

    assert REAL_MIN_EPOCH_STEPS == 16
    monkeypatch.setattr(TreeEstimator, "_min_epoch_steps", REAL_MIN_EPOCH_STEPS)  # conftest shortens it
    # 32 rows in batches of 8 would be 4 steps an epoch: they are repeated to 16
    small = tiny(E.TreeEnsembleClassifier, max_epochs=2, batch_size=8, validation_fraction=0.0, random_state=0)
    small.fit(*easy(32))
    assert int(small.model_.optimizer.iterations) == 2 * 16
    large = tiny(E.TreeEnsembleClassifier, max_epochs=2, batch_size=8, validation_fraction=0.0, random_state=0)
    large.fit(*easy(400))  # 50 batches an epoch: nothing is repeated
    assert int(large.model_.optimizer.iterations) == 2 * 50


@pytest.mark.slow
def test_early_stopping_returns_the_start_when_no_epoch_beats_it():
    from keras_trees.estimators._base import _EarlyStopping

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 2)).astype("float32")
    y = x.sum(axis=1, keepdims=True) + 1.0

    def fit(initial_loss):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
        start = [w.copy() for w in model.get_weights()]
        stop = _EarlyStopping("val_loss", patience=5, restore_best_weights=True, initial=(initial_loss, start))
        model.fit(x, y, validation_data=(x, y), epochs=3, verbose=0, callbacks=[stop])
        return start, model.get_weights(), stop

    # No epoch reaches a validation loss of 0: the starting weights come back.
    start, end, stop = fit(0.0)
    assert stop.best_epoch == -1
    for a, b in zip(start, end):
        np.testing.assert_array_equal(a, b)
    # A start that any epoch beats is replaced by the best epoch.
    start, end, stop = fit(np.inf)
    assert stop.best_epoch >= 0 and not np.array_equal(start[0], end[0])


@pytest.mark.parametrize("losses, patience, adaptive, stops_after", [
    ([3.0, 2.0, 1.0] + [1.5] * 60, 30, True, 3 + 12),   # best at epoch 3: ceil(3 / 2) + 10 = 12 more
    ([3.0, 2.0, 1.0] + [1.5] * 60, 30, False, 3 + 30),  # fixed patience
    ([1.0 - 0.01 * e for e in range(40)] + [2.0] * 60, 30, True, 40 + 30),  # best at 40: capped at 30
    ([1.0 - 0.01 * e for e in range(16)] + [2.0] * 60, 30, True, 16 + 18),
    ([2.0] * 60, 30, "initial", 10),  # the start stays best (epoch 0): 10
])
def test_early_stopping_patience_adapts_to_the_best_epoch(losses, patience, adaptive, stops_after):
    from keras_trees.estimators._base import ADAPTIVE_PATIENCE, _EarlyStopping, adaptive_patience

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    initial = (1.0, model.get_weights()) if adaptive == "initial" else None
    stop = _EarlyStopping("val_loss", patience=patience, restore_best_weights=True, initial=initial,
                          adaptive=ADAPTIVE_PATIENCE if adaptive else None)
    stop.set_model(model)
    model.stop_training = False
    stop.on_train_begin()
    epochs = 0
    for epoch, loss in enumerate(losses):
        stop.on_epoch_end(epoch, {"val_loss": loss})
        epochs += 1
        if model.stop_training:
            break
    assert model.stop_training and epochs == stops_after
    assert adaptive_patience(-1, 30) == 10 and adaptive_patience(2, 30) == 12 and adaptive_patience(99, 30) == 30
    assert adaptive_patience(2, 5) == 5 and adaptive_patience(2, 30, rule=None) == 30


@pytest.mark.slow
def test_non_greedy_nu_candidates_keep_the_best_on_validation(eager):
    x, y = easy(120)
    fitted = tiny(E.NonGreedyTreeClassifier, nu=[10.0, 1.0], random_state=0).fit(x, y)
    scores = fitted.candidate_scores_
    assert [s["nu"] for s in scores] == [10.0, 1.0]
    best = min(scores, key=lambda s: (s["validation_error"], s["validation_loss"]))
    assert fitted.nu_ == best["nu"] == fitted.model_.nu
    # each candidate equals a fit with that nu alone (same split and seed)
    alone = tiny(E.NonGreedyTreeClassifier, nu=best["nu"], random_state=0).fit(x, y)
    np.testing.assert_allclose(alone.predict_proba(x), fitted.predict_proba(x), rtol=1e-5, atol=1e-6)
    assert not hasattr(alone, "candidate_scores_") and alone.nu_ == best["nu"]
    # a refit with one value drops the scores of the earlier fit's candidates
    fitted.set_params(nu=best["nu"]).fit(x, y)
    assert not hasattr(fitted, "candidate_scores_")
    # without validation data the first candidate is trained alone
    first = tiny(E.NonGreedyTreeClassifier, nu=(4.0, 1.0), validation_fraction=0.0, random_state=0).fit(x, y)
    assert first.nu_ == 4.0 and not hasattr(first, "candidate_scores_")
    for bad in ([], [1.0, -2.0], ["a"]):
        with pytest.raises(ValueError, match="nu: expected a positive number or a non-empty list"):
            tiny(E.NonGreedyTreeClassifier, nu=bad).fit(x, y)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [E.EndToEndTreeClassifier, E.EndToEndTreeRegressor], ids=lambda c: c.__name__)
def test_end_to_end_depth_is_cut_back_on_validation(cls, monkeypatch):
    """The trained tree is cut back to the depth with the best validation
    score: the kept score is the best (ties: the deeper tree) and the cut
    model's own; the cut tree routes every sample to the ancestor (on the
    chosen level) of the leaf it reached in the full tree; the new leaves hold
    the training data that reaches them and the other leaves keep their values."""
    from keras_trees import topology

    numpy = keras.ops.convert_to_numpy
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3)).astype("float32")
    flip = rng.random(400) < 0.3  # one split and label noise: the full tree overfits
    y = ((x[:, 0] > 0) ^ flip).astype(int) if cls is E.EndToEndTreeClassifier else x[:, 0] + 3 * rng.normal(size=400)
    seen = {}
    select = cls._select_depth

    def spy(self, tree, xt, yt, wt, validation, cap):
        seen.update(state=np.array(numpy(tree.node_state)), leaves=tree.leaves_numpy()[0],
                    weights=[np.array(numpy(v)) for v in tree.weights], train=(xt, yt, wt), validation=validation)
        assert cap == 4  # depth_cap=None: max_depth
        return select(self, tree, xt, yt, wt, validation, cap)

    monkeypatch.setattr(cls, "_select_depth", spy)
    monkeypatch.setattr(cls, "_smoothed_leaves", lambda *args: None)  # the classifier's last step: tested below
    # 120 validation rows: fewer let a noisy full tree win by chance (the cut is tested only when made)
    fitted = tiny(cls, max_depth=4, min_samples_split=2, epochs_per_level=10, finetune_epochs=5,
                  validation_fraction=0.3, depth_cap=None, random_state=0).fit(x, y)
    scores, best = fitted.history_["depth_scores"], fitted.history_["depth"]
    full = topology.tree_depth(seen["state"], 0)
    assert sorted(scores) == list(range(full + 1)) and full >= 2
    assert best == min(scores, key=lambda d: (scores[d], -d)) and best < full, scores
    np.testing.assert_allclose(fitted._validation_score(fitted.model_, seen["validation"]), scores[best], rtol=1e-5)

    tree = fitted.model_.layers[-1]
    state = np.array(numpy(tree.node_state))
    np.testing.assert_array_equal(state, topology.cut_at_depth(seen["state"], 0, best))
    xt, yt, wt = seen["train"]
    leaves, route = tree.leaves_numpy()[0], np.array(numpy(tree.route(xt)))[:, 0]
    for v, value in zip(tree.weights, seen["weights"]):  # back to the full tree
        v.assign(value)
    np.testing.assert_array_equal(route, topology.ancestor_at_depth(np.array(numpy(tree.route(xt)))[:, 0], best))
    new = [n for n in topology.leaves(state, 0) if seen["state"][0, n] == topology.SPLIT]
    old = [n for n in topology.leaves(state, 0) if n not in new]
    assert new and all(topology.position_depth(n) == best for n in new)
    # The cut tree's leaves are those it ships (refit from the rows, as the
    # depth was scored), so they are finite and, for a classifier, distributions.
    assert old is not None and np.all(np.isfinite(leaves))
    if cls is E.EndToEndTreeClassifier:
        np.testing.assert_allclose(leaves[new + old].sum(-1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_end_to_end_classifier_leaves_are_smoothed_frequencies_of_all_fit_rows():
    """After the cut, every leaf that rows of X reach (training and validation
    parts) holds ``(n_k + 2 / K) / (n + 2)`` of the (weighted) rows it receives,
    whatever the weights' scale; the predicted class is their majority."""
    from keras_trees.estimators.end_to_end import _route

    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 3)).astype("float32")
    y = np.digitize(x[:, 0] + 0.5 * rng.normal(size=300), [-0.5, 0.5]) * 2  # labels 0, 2, 4: K = 3
    w = rng.uniform(0.5, 2.0, size=300)
    fitted = tiny(E.EndToEndTreeClassifier, validation_fraction=0.2, random_state=0).fit(x, y, sample_weight=w)
    tree = fitted.model_.layers[-1]
    leaves = tree.leaves_numpy()[0]
    features = fitted.preprocessor_.transform(x).astype("float32")
    reached = _route(tree, features)
    labels = np.searchsorted(fitted.classes_, y)
    counts = np.zeros_like(leaves)
    np.add.at(counts, (reached, labels), w * len(w) / w.sum())
    hit = np.unique(reached)
    assert len(hit) >= 2
    expected = (counts[hit] + 2 / 3) / (counts[hit].sum(-1, keepdims=True) + 2)
    np.testing.assert_allclose(leaves[hit], expected, rtol=1e-5)
    assert 0 < leaves[hit].min() and leaves[hit].max() < 1
    np.testing.assert_allclose(fitted.predict_proba(x), leaves[reached], rtol=1e-5)
    np.testing.assert_array_equal(fitted.predict(x), fitted.classes_[np.argmax(counts[reached], axis=1)])
    fitted._smoothed_leaves(tree, features, labels, 7.0 * w)  # the weights' scale does not matter
    np.testing.assert_allclose(tree.leaves_numpy()[0], leaves, rtol=1e-6)


@pytest.mark.slow
def test_end_to_end_classifier_screens_each_stumps_features_when_asked():
    """split_screening=0.5: the stumps read only the features whose best
    threshold gains at least half the best one's on their rows; the default
    (None, the paper's split) reads all."""
    assert E.EndToEndTreeClassifier().split_screening is None and E.EndToEndTreeRegressor().split_screening is None
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 5)).astype("float32")
    y = (x[:, 3] > 0).astype(int)
    fitted = tiny(E.EndToEndTreeClassifier, random_state=0, split_screening=0.5).fit(x, y)
    tree = fitted.model_.layers[-1]
    assert tree.split_screening == 0.5
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(tree.feature_mask)[0, 0], [0, 0, 0, 1, 0])
    plain = tiny(E.EndToEndTreeClassifier, random_state=0).fit(x, y)
    assert keras.ops.convert_to_numpy(plain.model_.layers[-1].feature_mask)[0, 0].min() == 1


@pytest.mark.slow
def test_end_to_end_depth_cap_cv_keeps_at_most_the_cross_validated_cart_depth(monkeypatch):
    """depth_cap="cv" (the regressor's default): the cut keeps the best
    validation depth up to the depth CART's 5-fold CV picks on the training
    part (``depth_cap_``); every depth is still scored. None: up to max_depth."""
    from keras_trees.estimators import _base

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3)).astype("float32")
    step = (x[:, 0] > 0) + 0.3 * rng.normal(size=len(x))  # one split, then noise
    assert E.EndToEndTreeRegressor().depth_cap == "cv" and E.EndToEndTreeClassifier().depth_cap is None
    seen = []
    helper = _base.cv_cart_depth
    monkeypatch.setattr("keras_trees.estimators.end_to_end.cv_cart_depth",
                        lambda *a, **k: seen.append(a) or helper(*a, **k))
    settings = dict(max_depth=4, min_samples_split=2, epochs_per_level=8, finetune_epochs=2,
                    validation_fraction=0.3, random_state=0)
    capped = tiny(E.EndToEndTreeRegressor, **settings).fit(x, step)
    task, xt, yt, wt, max_depth, _ = seen[-1]
    assert task == "regression" and len(xt) == 280 and max_depth == 4  # the training part
    assert capped.depth_cap_ == helper(task, xt, yt, wt, 4, 0) == 1
    scores = capped.history_["depth_scores"]
    assert max(scores) >= 2 and capped.history_["depth"] == 1
    free = tiny(E.EndToEndTreeRegressor, depth_cap=None, **settings).fit(x, step)
    assert free.depth_cap_ == 4 and free.history_["depth_scores"] == scores
    assert free.history_["depth"] == min(range(1, max(scores) + 1), key=lambda d: (scores[d], -d))
    labels = (x[:, 0] > 0).astype(int)
    classifier = tiny(E.EndToEndTreeClassifier, depth_cap="cv", **settings).fit(x, labels)
    assert seen[-1][0] == "classification" and classifier.depth_cap_ == 1 == classifier.history_["depth"]
    none = tiny(E.EndToEndTreeRegressor, **{**settings, "validation_fraction": 0.0}).fit(x, step)
    assert not hasattr(none, "depth_cap_") and "depth" not in none.history_
    with pytest.raises(ValueError, match="depth_cap"):
        E.EndToEndTreeRegressor(depth_cap="max").fit(x, step)


def test_cv_cart_depth_is_the_depth_of_the_tuned_cart():
    """The shared helper: 5-fold CV (stratified for classes) over depths 1 to
    max_depth, the shallower on ties; max_depth where no two folds exist."""
    from keras_trees.estimators._base import cv_cart_depth

    rng = np.random.default_rng(1)
    x = rng.normal(size=(600, 2))
    both = ((x[:, 0] > 0) & (x[:, 1] > 0)).astype(int)  # needs two levels
    assert cv_cart_depth("classification", x, both, None, 6, 0) == 2
    assert cv_cart_depth("classification", x, (x[:, 0] > 0).astype(int), None, 6, 0) == 1
    assert cv_cart_depth("regression", x, 2.0 * (x[:, 0] > 0) + (x[:, 1] > 0), None, 6, 0) == 2
    assert cv_cart_depth("classification", x[:1], both[:1], None, 6, 0) == 6  # one row: no folds
    assert cv_cart_depth("regression", x, x[:, 0], None, 1, 0) == 1


def test_ordered_categoricals_are_ranks():
    """An ordered categorical column becomes one rank column (its categories'
    order, not the order of appearance), median-imputed with an indicator and
    scaled like a numeric column; unseen values are missing ranks; the frame's
    ``to_numpy()`` transforms identically; unordered ones stay one-hot."""
    from keras_trees.estimators._preprocessing import make_preprocessor

    sizes = ["small", "medium", "large", "huge"]
    values = ["large", "small", None, "huge", "medium", "small", "large", "large"]
    df = pd.DataFrame({
        "a": np.arange(8.0),
        "size": pd.Categorical(values, categories=sizes, ordered=True),
        "colour": pd.Categorical(["red", "blue"] * 4),
    })
    pre = make_preprocessor(df).fit(df)
    out = pre.transform(df)
    assert out.shape == (8, 1 + 2 + 2)  # a; size's rank and missing indicator; colour one-hot
    assert list(pre.get_feature_names_out()) == ["a", "colour_blue", "colour_red", "size", "missingindicator_size"]
    ranks = np.array([2, 0, np.nan, 3, 1, 0, 2, 2])
    median = np.nanmedian(ranks)
    filled = np.where(np.isnan(ranks), median, ranks)
    np.testing.assert_allclose(out[:, 3], (filled - filled.mean()) / filled.std(), rtol=1e-6)
    np.testing.assert_array_equal(out[:, 4] > 0, np.isnan(ranks))
    np.testing.assert_array_equal(pre.transform(df.to_numpy()), out)
    unseen = df.head(2).astype({"size": object})
    unseen["size"] = ["gigantic", "small"]
    np.testing.assert_array_equal(pre.transform(unseen)[:, 4] > 0, [True, False])
    assert pre.transform(unseen)[0, 3] == out[2, 3]  # the missing rank's imputed value


@pytest.mark.slow
def test_explained_design_of_an_ordered_categorical_is_its_rank(eager):
    from keras_trees.estimators._explain import design

    rng = np.random.default_rng(0)
    grade = rng.integers(0, 5, 120)
    df = pd.DataFrame({"x": rng.normal(size=120),
                       "grade": pd.Categorical.from_codes(grade, list("ABCDE"), ordered=True)})
    est = tiny(E.HingeForestClassifier, random_state=0).fit(df, grade >= 3)
    d = design(est)
    assert d.names == ["x", "grade"] and d.binary == [None, None] and list(d.columns) == [0, 1]
    rows = est.preprocessor_.transform(df) * d.scale + d.shift
    np.testing.assert_allclose(rows[:, 1], grade, atol=1e-5)
    assert set(est.feature_importances_.round(6) >= 0) == {True} and est.score(df, grade >= 3) > 0.8


def test_coded_numeric_columns_get_value_indicators():
    """``code_indicators``: a numeric column with 3 to that many distinct
    training values keeps its scaled value and gets a 0/1 column per value,
    after all other columns; two-valued and many-valued columns get none;
    missing and unseen values are all zeros; arrays and the frame's
    ``to_numpy()`` transform identically; None changes nothing."""
    from keras_trees.estimators._preprocessing import ValueIndicators, make_preprocessor

    df = pd.DataFrame({
        "code": [1.0, 2.0, 3.0, np.nan, 2.0, 1.0, 3.0, 2.0],
        "flag": [0, 1, 0, 1, 0, 1, 0, 1],
        "wide": np.arange(8.0),
        "colour": pd.Categorical(["red", "blue"] * 4),
    })
    pre = make_preprocessor(df, code_indicators=5).fit(df)
    out = pre.transform(df)
    assert list(pre.get_feature_names_out()) == [
        "code", "flag", "wide", "missingindicator_code", "colour_blue", "colour_red",
        "code=1", "code=2", "code=3"]
    np.testing.assert_array_equal(out[:, 6:], [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0],
                                               [0, 1, 0], [1, 0, 0], [0, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(pre.transform(df.to_numpy()), out)
    unseen = df.head(2).copy()
    unseen["code"] = [4.0, 3.0]
    np.testing.assert_array_equal(pre.transform(unseen)[:, 6:], [[0, 0, 0], [0, 0, 1]])
    plain = make_preprocessor(df).fit(df)
    np.testing.assert_array_equal(plain.transform(df), out[:, :6])
    assert make_preprocessor(df, code_indicators=8).fit(df).transform(df).shape[1] == 6 + 3 + 8  # wide too
    # plain arrays: every column numeric; the same values as the frame's numeric part
    x = df[["code", "flag", "wide"]].to_numpy()
    arr = make_preprocessor(x, code_indicators=5).fit(x)
    np.testing.assert_array_equal(arr.transform(x), out[:, [0, 1, 2, 3, 6, 7, 8]])
    assert list(arr.get_feature_names_out())[-3:] == ["x0=1", "x0=2", "x0=3"]
    with pytest.raises(ValueError, match="expected 3 columns"):
        ValueIndicators(5).fit(x).transform(x[:, :2])
    # names read back as their values: no two codes of a column share one
    big = np.array([[1000001.0], [1000002.0], [0.5]])
    assert list(ValueIndicators(5).fit(big).get_feature_names_out(["id"])) == [
        "id=0.5", "id=1000001", "id=1000002"]


def test_value_indicators_explain_and_route_as_the_model(eager):
    """An estimator with ``code_indicators`` names the indicator columns
    ``hobby=2`` in its forest, sums their importance into their column, and
    its folded forest routes as its layer."""
    from keras_trees.estimators._explain import design

    rng = np.random.default_rng(0)
    hobby = rng.integers(1, 4, 150).astype(float)
    df = pd.DataFrame({"x": rng.normal(size=150), "hobby": hobby})
    y = hobby == 2  # the middle code: one threshold on hobby cannot separate it
    est = tiny(E.TreeEnsembleClassifier, random_state=0, code_indicators=10).fit(df, y)
    d = design(est)
    assert d.names == ["x", "hobby", "hobby=1", "hobby=2", "hobby=3"]
    assert list(d.columns) == [0, 1, 1, 1, 1] and d.binary[2:] == [["hobby", "1"], ["hobby", "2"], ["hobby", "3"]]
    rows = est.forest_features(df)
    np.testing.assert_array_equal(rows[:, 3], hobby == 2)
    assert est.feature_importances_.shape == (2,)
    layer = tree_layers(est.model_)[0]
    inputs = np.asarray(est.preprocessor_.transform(df), np.float32)
    own = layer.to_forest().route(layer.forest_features(layer_input_fn(est.model_, layer)(inputs)))
    assert np.mean(own == est.forest_.route(rows)) > 0.99
    assert est.score(df, y) > 0.9


def test_code_indicators_is_validated():
    with pytest.raises(ValueError, match="code_indicators"):
        E.HingeForestClassifier(code_indicators=2).fit(np.zeros((4, 1)), [0, 1, 0, 1])
