"""Estimators that explain themselves: ``feature_importances_`` per input
column, the inspection tools on a fitted estimator (its trees over its input
columns), ``verbose`` levels, ``n_jobs``, unknown and renamed arguments."""

import re
import subprocess
import sys
import textwrap
import types
import warnings

import keras
import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.metrics import log_loss

from keras_trees import Forest, inspection, topology
from keras_trees import estimators as E
from keras_trees.estimators import _threads
from keras_trees.estimators._base import TreeEstimator
from keras_trees.inspection.export import tree_layers
from keras_trees.layers._layer_inputs import layer_input_fn
from tests.estimators._settings import tiny


def frame(n=160, seed=0):
    """Numeric ``a`` (in units of 10 around 5), numeric ``b`` with missing
    values, categorical ``colour``; labels (strings) from ``a`` and ``colour``."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n) * 10 + 5
    colour = rng.choice(["red", "green", "blue"], n)
    X = pd.DataFrame({
        "a": a,
        "b": np.where(rng.random(n) < 0.2, np.nan, rng.normal(size=n)),
        "colour": pd.Categorical(colour),
    })
    return X, np.where((a > 5) ^ (colour == "red"), "yes", "no")


@pytest.fixture(scope="module")
def fitted():
    """A Tree Ensemble Layer classifier (BatchNormalization in front of the
    trees) and a hinge forest regressor (Dense + HingeBatchNormalization in
    front) fitted on the frame, without a validation split (the importances
    then read every training row)."""
    import tensorflow as tf

    steps, TreeEstimator._min_epoch_steps = TreeEstimator._min_epoch_steps, 2
    tf.config.run_functions_eagerly(True)
    try:
        X, y = frame()
        clf = tiny(E.TreeEnsembleClassifier, random_state=0, validation_fraction=0.0).fit(X, y)
        reg = tiny(E.HingeForestRegressor, random_state=0, validation_fraction=0.0).fit(X, X["a"].to_numpy() * 0.1)
    finally:
        tf.config.run_functions_eagerly(False)
        TreeEstimator._min_epoch_steps = steps
    return X, y, clf, reg


@pytest.mark.slow
def test_feature_importances_are_per_input_column(fitted):
    X, y, clf, reg = fitted
    for est in (clf, reg):
        imp = est.feature_importances_
        assert imp.shape == (3,) and np.all(imp >= 0)
        np.testing.assert_allclose(imp.sum(), 1.0, rtol=1e-9)
        # the importances of the trees over the design columns, summed by the names' column
        forest = est.forest_
        design = inspection.feature_importances(forest, est.forest_features(X))
        names = forest.feature_names
        assert names[:3] == ["a", "b", "b=missing"]
        assert sorted(names[3:]) == ["colour=blue", "colour=green", "colour=red"]
        per_column = [sum(v for n, v in zip(names, design) if n.split("=")[0] == c) for c in X.columns]
        np.testing.assert_allclose(imp, np.array(per_column) / sum(per_column), rtol=1e-6, atol=1e-12)
        # the inspection function says the same, and with labels by impurity decrease
        np.testing.assert_array_equal(inspection.feature_importances(est), imp)
    gain = inspection.feature_importances(clf, X, y, kind="gain")  # string labels
    assert gain.shape == (3,) and np.isclose(gain.sum(), 1.0)
    with pytest.raises(NotFittedError):
        _ = E.TreeEnsembleClassifier().feature_importances_
    with pytest.raises(NotFittedError):
        inspection.export_text(E.HingeForestClassifier())


def test_the_forest_over_input_columns_routes_as_the_layer(fitted):
    """Folding the scaler, BatchNormalization and the learned Dense features into
    the splits changes no route (but for rows within rounding of a split)."""
    X, _, clf, reg = fitted
    for est in (clf, reg):
        layer = tree_layers(est.model_)[0]
        inputs = np.asarray(est.preprocessor_.transform(X), np.float32)
        own = layer.to_forest().route(layer.forest_features(layer_input_fn(est.model_, layer)(inputs)))
        folded = est.forest_.route(est.forest_features(X))
        assert np.mean(own == folded) > 0.99
        assert est.forest_.split_kind == "linear"  # oblique; the hinge forest's axis-aligned splits on Dense features
    # numeric columns are read in their own units: the design rows hold the raw values
    rows = clf.forest_features(X)
    np.testing.assert_allclose(rows[:, 0], X["a"], rtol=1e-5)
    np.testing.assert_allclose(rows[:, 1], X["b"].fillna(X["b"].median()), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(rows[:, 2], X["b"].isna())


@pytest.mark.filterwarnings("ignore:X does not have valid feature names")
def test_inspection_tools_take_a_fitted_estimator(fitted):
    import matplotlib

    matplotlib.use("Agg")
    X, y, clf, reg = fitted
    text = inspection.export_text(clf, x=X, max_depth=1)
    assert "colour=" in text and "x[" not in text and "(samples: " in text
    named = inspection.export_text(clf, feature_names=["A", "B", "C"])
    assert "C=" in named and "colour" not in named
    with pytest.raises(ValueError, match="3 names"):
        inspection.export_text(clf, feature_names=["A"])
    with pytest.raises(TypeError, match="stream"):
        inspection.export_text(clf, x=[(X.to_numpy()[:5], y[:5])])

    result = inspection.hard_forest(clf, X)
    assert result["task"] == "classification" and 0.0 <= result["agreement"] <= 1.0
    assert result["soft"].shape == result["hard"].shape == (len(X), 2)
    np.testing.assert_allclose(result["soft"], clf.model_(clf.preprocessor_.transform(X).astype("float32")),
                               rtol=1e-5, atol=1e-5)
    assert "colour=red" in result["forest"].feature_names
    assert inspection.hard_forest(reg, X)["task"] == "regression"

    ax = inspection.plot_tree(reg, x=X)
    labels = " ".join(t.get_text() for t in ax.texts)
    assert ax.get_title().startswith("hinge_forest") and ("a" in labels or "colour" in labels)

    perm = inspection.permutation_importance(clf, X, y, n_repeats=2)
    assert perm["feature_names"] == ["a", "b", "colour"] and perm["importances"].shape == (3, 2)
    assert perm["baseline"] == pytest.approx(-log_loss(y, clf.predict_proba(X)))  # the estimator's own loss
    assert str(X["colour"].dtype) == "category"  # shuffled on a copy
    plain = inspection.permutation_importance(reg, X.to_numpy(), X["a"].to_numpy() * 0.1, n_repeats=1)
    assert plain["feature_names"] == ["a", "b", "colour"]  # the estimator's feature_names_in_
    assert plain["importances_mean"][0] > plain["importances_mean"][2]  # the target is a's


def test_rule_text_of_one_column_splits_names_the_category():
    """The estimators' forests (``extra`` with ``feature_scale``): a split on a
    one-hot or missing-value column reads as the category; an oblique split
    with one weight as a threshold in its column's units."""
    names = ["a", "colour=red", "b=missing"]
    extra = {"feature_scale": [10.0, 0.5, 0.4], "binary_features": [None, ["colour", "red"], ["b", "missing"]]}
    state = topology.stump(1, 1)
    leaves = np.zeros((1, 3, 1))

    def text(**split):
        return inspection.export_text(Forest(node_state=state, leaves=leaves, input_dim=3, feature_names=names,
                                             extra=extra, **split)).splitlines()

    assert text(split_kind="axis_aligned", feature=[[1]], threshold=[[0.5]])[::2] == [
        "|--- colour != red", "|--- colour = red"]
    assert text(split_kind="axis_aligned", feature=[[2]], threshold=[[0.5]], right_if="negative")[::2] == [
        "|--- b is missing", "|--- b is not missing"]
    assert text(split_kind="axis_aligned", feature=[[0]], threshold=[[2.5]])[0] == "|--- a <= 2.500"
    assert text(split_kind="linear", weights=[[[-2.0, 0.0, 0.0]]], bias=[[5.0]])[::2] == [
        "|--- a >= 2.500", "|--- a <  2.500"]
    assert text(split_kind="linear", weights=[[[0.0, 3.0, 0.0]]], bias=[[-1.0]])[0] == "|--- colour != red"
    # terms ranked by |w_j| * scale_j: a's 0.1 * 10 before colour=red's 1.0 * 0.5
    assert text(split_kind="linear", weights=[[[0.1, 1.0, 0.0]]], bias=[[0.0]])[0].startswith(
        "|--- 0.100*a + 1.000*colour=red")
    # without feature_scale (any other forest) the text is as before
    plain = Forest(node_state=state, leaves=leaves, input_dim=3, feature_names=names, split_kind="linear",
                   weights=[[[-2.0, 0.0, 0.0]]], bias=[[5.0]])
    assert inspection.export_text(plain).splitlines()[0] == "|--- -2.000*a <= -5.000"


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_verbose_levels(verbose, capsys, eager):
    X, y = frame(60)
    tiny(E.TreeEnsembleClassifier, random_state=0, max_epochs=2, verbose=verbose).fit(X, y)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    summary = [line for line in lines if line.startswith("TreeEnsembleClassifier: fitted 3 trees of depth ")]
    if verbose == 0:
        assert lines == []
        return
    assert len(summary) == 1 and " parameters) in " in summary[0] and ", 2 epochs, best validation loss " in \
        summary[0]
    assert ("Epoch 1/2" in out) == (verbose == 2)  # Keras' per-epoch lines only at 2
    if verbose == 1:  # the stage and progress lines, then the summary last
        assert lines[-1] == summary[0] and all(line.startswith("TreeEnsembleClassifier: ") for line in lines)
        assert lines[0].startswith("TreeEnsembleClassifier: training: at most 2 epochs")


@pytest.mark.slow
def test_verbose_one_prints_a_line_per_candidate(capsys, eager):
    X, y = frame(60)
    tiny(E.NonGreedyTreeClassifier, random_state=0, nu=[1.0, 10.0], max_epochs=1, verbose=1).fit(X, y)
    lines = [line for line in capsys.readouterr().out.splitlines()  # without the training's progress lines
             if not re.match(r"\w+: (training|epoch \d+/)", line)]
    assert [line.split(":")[1].strip()[:12] for line in lines] == ["candidate nu", "candidate nu", "fitted 1 tre"]


@pytest.fixture
def eager():
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    yield
    tf.config.run_functions_eagerly(False)


def test_n_jobs_argument():
    assert _threads.resolve(None) is None and _threads.resolve(3) == 3
    assert _threads.resolve(-1) == _threads.cpu_count() and _threads.resolve(-10_000) == 1
    X, y = frame(20)
    with pytest.raises(ValueError, match="'n_jobs' parameter"):
        tiny(E.TreeEnsembleClassifier, n_jobs=0).fit(X, y)
    assert E.HingeForestClassifier(n_jobs=2).get_params()["n_jobs"] == 2


def test_n_jobs_limits_numpy_and_torch_threads_for_the_call(monkeypatch):
    from threadpoolctl import threadpool_info

    calls = []
    fake = types.SimpleNamespace(get_num_threads=lambda: 7, set_num_threads=calls.append)
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    with _threads.limit(1, "T"):
        assert calls == [1]
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())
    assert calls == [1, 7]  # restored
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.warns(RuntimeWarning, match="n_jobs=1 cannot limit JAX"):
        with _threads.limit(1, "T"):
            pass


def test_n_jobs_on_tensorflow_after_its_runtime_started_warns():
    import tensorflow as tf

    _ = tf.constant(1.0) + 1.0  # the runtime has started
    current = tf.config.threading.get_intra_op_parallelism_threads()
    n = 1 if current != 1 else 2
    with pytest.warns(RuntimeWarning, match=f"n_jobs={n} cannot limit TensorFlow's threads"):
        with _threads.limit(n, "TreeEnsembleClassifier"):
            pass
    assert tf.config.threading.get_intra_op_parallelism_threads() == current


@pytest.mark.slow
def test_n_jobs_sizes_tensorflow_before_its_runtime_starts():
    script = textwrap.dedent("""
        import warnings
        warnings.simplefilter("error", RuntimeWarning)
        import importlib.util
        import tensorflow as tf
        spec = importlib.util.spec_from_file_location("threads", {path!r})  # without importing the estimators
        _threads = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_threads)
        with _threads.limit(1, "T"):
            _ = tf.constant(1.0) + 1.0
        print(tf.config.threading.get_intra_op_parallelism_threads(),
              tf.config.threading.get_inter_op_parallelism_threads())
    """).format(path=_threads.__file__)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "KERAS_BACKEND": "tensorflow"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["1", "1"]


def test_unknown_arguments_name_the_class_and_the_valid_ones():
    with pytest.raises(TypeError, match=r"TreeEnsembleClassifier\(\) got an unexpected keyword argument 'foo'; "
                                        r"valid arguments: num_trees, max_depth, .*n_jobs, class_weight"):
        E.TreeEnsembleClassifier(foo=1)
    with pytest.raises(TypeError, match=r"HingeForestRegressor\(\) takes keyword arguments only"):
        E.HingeForestRegressor(10)
    with pytest.raises(ValueError, match="Invalid parameter 'foo' for estimator NonGreedyTreeClassifier"):
        E.NonGreedyTreeClassifier().set_params(foo=1)


def test_renamed_arguments_warn_and_map_to_the_shared_name():
    with pytest.warns(DeprecationWarning, match="'annealing' is deprecated.*'annealing_increment'") as record:
        est = E.EndToEndTreeClassifier(annealing=0.3)
    assert len(record) == 1 and record[0].filename == __file__  # the user's line
    assert est.annealing_increment == 0.3 and "annealing" not in est.get_params()
    with pytest.warns(DeprecationWarning, match="'refine_epochs' is deprecated.*'finetune_epochs'"):
        est = E.ConvexPolytopeTreeRegressor().set_params(refine_epochs=4)
    assert est.finetune_epochs == 4
    with pytest.raises(ValueError, match="got both annealing_increment=0.2 and its deprecated name annealing"):
        E.EndToEndTreeRegressor(annealing=0.3, annealing_increment=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        E.EndToEndTreeClassifier(annealing_increment=0.3)
