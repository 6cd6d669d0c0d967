"""The scikit-learn estimators on every Keras backend: a classifier and a
regressor fit and predict, repeatably, on a frame with a categorical column."""

import keras
import numpy as np
import pandas as pd
import pytest

from keras_trees import estimators as E

BACKEND = keras.backend.backend()


def data(n=240, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    colour = rng.choice(["red", "blue"], n)
    x = pd.DataFrame({"a": a, "b": np.where(rng.random(n) < 0.1, np.nan, b), "colour": pd.Categorical(colour)})
    return x, np.where((a > 0) ^ (colour == "red"), "yes", "no"), 2.0 * a + (colour == "red")


@pytest.mark.slow_on("jax")
def test_classifier_fit_predict_and_repeatability():
    x, y, _ = data()
    settings = dict(max_depth=3, num_trees=4, max_epochs=8, learning_rate=0.1, random_state=0)
    clf = E.TreeEnsembleClassifier(**settings).fit(x, y)
    assert clf.score(x, y) > 0.8
    proba = clf.predict_proba(x)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(E.TreeEnsembleClassifier(**settings).fit(x, y).predict_proba(x), proba)


@pytest.mark.slow_on("jax")
def test_regressor_fit_predict():
    x, _, target = data()
    reg = E.EndToEndTreeRegressor(max_depth=2, epochs_per_level=3, finetune_epochs=2, learning_rate=0.05,
                                  random_state=0).fit(x, target)
    assert reg.predict(x).shape == (len(x),) and reg.score(x, target) > 0.5


@pytest.mark.slow
def test_end_to_end_classifier_cut_to_its_validation_depth():
    """The depth cut (NumPy on the layer's routing and variables) on every backend."""
    from keras_trees import topology

    x, y, _ = data()
    clf = E.EndToEndTreeClassifier(max_depth=3, epochs_per_level=4, finetune_epochs=2, learning_rate=0.05,
                                   random_state=0).fit(x, y)
    scores, depth = clf.history_["depth_scores"], clf.history_["depth"]
    assert depth == min(scores, key=lambda d: (scores[d], -d))
    state = keras.ops.convert_to_numpy(clf.model_.layers[-1].node_state)
    assert topology.tree_depth(state, 0) == depth
    assert clf.score(x, y) > 0.8


@pytest.mark.slow
def test_steps_per_execution_trains_the_same_weights(monkeypatch):
    """Several optimizer steps per compiled call (TensorFlow, JAX) train
    bit-identical weights to one step per call; PyTorch runs one step a call."""
    from keras_trees.estimators import _base

    x, y, _ = data()
    settings = dict(num_trees=4, max_depth=3, batch_size=16, max_epochs=3, random_state=0)
    if keras.backend.backend() == "torch":
        assert _base.steps_per_execution() == 1
    else:
        assert _base.steps_per_execution() == _base.STEPS_PER_EXECUTION > 1
    several = E.HingeForestClassifier(**settings).fit(x, y)
    assert several.model_.steps_per_execution == _base.steps_per_execution()
    monkeypatch.setattr(_base, "STEPS_PER_EXECUTION", 1)
    one = E.HingeForestClassifier(**settings).fit(x, y)
    assert one.model_.steps_per_execution == 1
    np.testing.assert_array_equal(several.predict_proba(x), one.predict_proba(x))


@pytest.mark.slow_on("jax")
@pytest.mark.skipif(BACKEND != "jax", reason="JAX's dispatch")
def test_jax_compiled_steps_hold_no_host_callback(monkeypatch):
    """The compiled training, validation and prediction steps of every
    estimator hold no ``jax.debug.callback``: a value check issued alone is one,
    an effect that sends every call of the compiled function through JAX's
    slow Python dispatch (the Tree Ensemble estimator's epochs on 4,000 x 20
    took 130 ms instead of 90). The checks are one check call that the
    checked tensor depends on (``keras_trees.validation.tensors.jit_gathered``)."""
    import jax

    calls = []
    original = jax.debug.callback
    monkeypatch.setattr(jax.debug, "callback", lambda *a, **k: calls.append(a[0]) or original(*a, **k))
    x, y, target = data(160)
    tiny = dict(max_depth=2, random_state=0)
    for estimator, labels in [
        (E.TreeEnsembleClassifier(num_trees=2, max_epochs=2, **tiny), y),
        (E.HingeForestClassifier(num_trees=4, max_epochs=2, **tiny), y),
        (E.EndToEndTreeClassifier(epochs_per_level=1, finetune_epochs=1, **tiny), y),
        (E.EndToEndTreeRegressor(epochs_per_level=1, finetune_epochs=1, min_samples_split=2, **tiny), target),
        (E.ConvexPolytopeTreeClassifier(num_experts=2, epochs_per_level=1, **tiny), y),
        (E.NonGreedyTreeClassifier(max_epochs=2, **tiny), y),
        (E.NonGreedyTreeRegressor(max_epochs=2, **tiny), target),
    ]:
        estimator.fit(x, labels).predict(x)
        assert not calls, f"{type(estimator).__name__}: a jax.debug.callback was traced"


@pytest.mark.slow_on("jax")
def test_seeding_a_fit_leaves_tensorflow_unimported_off_its_backend(tmp_path):
    """``random_state`` seeds Python, NumPy and Keras as
    ``keras.utils.set_random_seed`` does, without importing TensorFlow (about
    3 s) where it is neither the backend nor imported already."""
    import random

    from keras.src.utils.rng_utils import get_random_seed

    from keras_trees.estimators._base import set_random_seed

    set_random_seed(1234)
    drawn = random.random(), np.random.random()
    keras.utils.set_random_seed(1234)
    assert drawn == (random.random(), np.random.random())
    set_random_seed(99)
    assert get_random_seed() == 99
    if BACKEND != "tensorflow":
        from tests.conftest import run_python

        out = run_python("import sys\nfrom keras_trees.estimators._base import set_random_seed\n"
                         "set_random_seed(0)\nprint('tensorflow' in sys.modules)",
                         tmp_path, env={"KERAS_BACKEND": BACKEND})
        assert out.strip().splitlines()[-1] == "False"


@pytest.mark.slow
def test_validation_logs_equal_those_of_fit_validation_data(monkeypatch):
    """The estimators' per-epoch validation metrics (one ``test_on_batch``,
    or ``evaluate`` beyond ``_PREDICT_BATCH`` rows) equal those of
    ``fit(validation_data=...)``, with sample weights; fit's other logs are kept."""
    from keras_trees.estimators import _base

    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 3)).astype("float32")
    y = (x[:, 0] + 0.3 * rng.normal(size=96) > 0).astype("int32")
    w = rng.uniform(0.5, 2.0, 96).astype("float32")
    validation = (x[:37], y[:37], w[:37])

    def history(callbacks, validation_data):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        return model.fit(x[37:], y[37:], sample_weight=w[37:], validation_data=validation_data, epochs=3,
                         batch_size=16, shuffle=False, verbose=0, callbacks=callbacks).history

    keras_own = history([], validation)
    for block in (64, 10):  # one test_on_batch; evaluate in batches of 10
        monkeypatch.setattr(_base, "_PREDICT_BATCH", block)
        ours = history([_base._ValidationLogs(validation)], None)
        assert sorted(ours) == sorted(keras_own) and len(ours["val_loss"]) == 3
        for name in keras_own:
            np.testing.assert_allclose(ours[name], keras_own[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_fit_reads_one_data_iterator(monkeypatch):
    """On TensorFlow a fit reads all its epochs from one ``tf.data`` iterator
    (Keras makes a new one per epoch from arrays; plus one for the initial
    validation score), on JAX from one generator (``_full_batches``); on
    PyTorch the estimators pass ``steps_per_epoch`` (the batches of one pass),
    which stops Keras' epoch iterator from making a second iterator per epoch."""
    from keras_trees.estimators import _base

    x, y, _ = data()
    settings = dict(max_depth=2, num_trees=3, max_epochs=5, patience=100, learning_rate=0.1, random_state=0)
    created = []
    if BACKEND == "tensorflow":
        from tensorflow.python.data.ops import iterator_ops

        make = iterator_ops.OwnedIterator._create_iterator
        monkeypatch.setattr(iterator_ops.OwnedIterator, "_create_iterator",
                            lambda self, *a, **k: created.append(1) or make(self, *a, **k))
    if BACKEND == "jax":
        stream = _base._full_batches
        monkeypatch.setattr(_base, "_full_batches", lambda *a, **k: created.append(1) or stream(*a, **k))
    ours = E.TreeEnsembleClassifier(**settings).fit(x, y)
    assert len(ours.history_["loss"]) == 5
    if BACKEND == "tensorflow":
        assert len(created) <= 2, created  # the training data's, the initial validation score's
    if BACKEND == "jax":
        assert len(created) == 1, created


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's input pipeline")
def test_tensorflow_epoch_is_one_pass_over_the_data():
    """The repeated dataset of a TensorFlow fit: every ``steps`` batches (an
    epoch) hold each row once, in a new order per pass, the last batch
    smaller, the same passes for the same seed."""
    from keras_trees.estimators import _base

    n, batch_size = 23, 5
    x = np.arange(n, dtype="float32")[:, None] * np.ones((1, 2), "float32")
    y, w = np.arange(n), np.arange(n, dtype="float32") / 10
    steps = -(-n // batch_size)

    def passes(seed):
        batches = list(_base._one_pass_per_epoch(x, y, w, batch_size, seed).take(3 * steps))
        return [batches[i * steps:(i + 1) * steps] for i in range(3)]

    orders = []
    for one in passes(seed=7):
        assert [len(b[1]) for b in one] == [5, 5, 5, 5, 3]
        rows = np.concatenate([b[1].numpy() for b in one])
        np.testing.assert_array_equal(np.sort(rows), np.arange(n))
        for xb, yb, wb in one:  # the columns stay aligned
            np.testing.assert_array_equal(xb.numpy()[:, 1], yb.numpy())
            np.testing.assert_allclose(wb.numpy(), yb.numpy() / 10)
        orders.append(rows)
    assert not all(np.array_equal(orders[0], o) for o in orders[1:])
    again = [np.concatenate([b[1].numpy() for b in one]) for one in passes(seed=7)]
    np.testing.assert_array_equal(np.stack(orders), np.stack(again))


def test_jax_batches_are_full_and_each_pass_holds_every_row_once():
    """The batches of a JAX fit (``_full_batches``, NumPy, checked on every
    backend): all of one shape, so the training step compiles once; each run
    of ``n`` rows (a pass) holds every row once, in a new order per pass, a
    batch that a pass cannot fill finishing with the next pass's rows; the
    columns stay aligned; the same batches for the same seed; a set smaller
    than a batch gives batches of all its rows."""
    import itertools

    from keras_trees.estimators import _base

    n, batch_size = 23, 5
    x = np.arange(n, dtype="float32")[:, None] * np.ones((1, 2), "float32")
    y, w = np.arange(n), np.arange(n, dtype="float32") / 10

    def batches(seed, count=3 * n):  # 15 passes
        return list(itertools.islice(_base._full_batches(x, y, w, batch_size, seed), count))

    drawn = batches(seed=7)
    assert {len(b[1]) for b in drawn} == {batch_size}
    for xb, yb, wb in drawn:
        np.testing.assert_array_equal(xb[:, 1], yb)
        np.testing.assert_allclose(wb, yb / 10)
    rows = np.concatenate([b[1] for b in drawn]).reshape(-1, n)
    for one in rows:
        np.testing.assert_array_equal(np.sort(one), np.arange(n))
    assert len({tuple(one) for one in rows}) > 1
    again = batches(seed=7)
    np.testing.assert_array_equal(rows, np.concatenate([b[1] for b in again]).reshape(-1, n))
    assert not np.array_equal(rows, np.concatenate([b[1] for b in batches(seed=8)]).reshape(-1, n))
    small = list(itertools.islice(_base._full_batches(x[:3], y[:3], w[:3], batch_size, 0), 4))
    assert [sorted(b[1]) for b in small] == [[0, 1, 2]] * 4


@pytest.mark.slow
@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="one stream of batches on TensorFlow and JAX")
def test_one_call_per_epoch_trains_the_same_weights(monkeypatch):
    """A TensorFlow or JAX fit runs each epoch in one call of the training
    function (``steps_per_execution`` = the epoch's batches, from one endless stream):
    bit-identical to one batch per call, so a call reads exactly one epoch;
    the model's own ``steps_per_execution`` is restored after ``fit``."""
    import functools

    from keras_trees.estimators import _base

    x, y, _ = data()
    settings = dict(num_trees=4, max_depth=3, batch_size=16, max_epochs=3, random_state=0)
    epoch_per_call = E.HingeForestClassifier(**settings).fit(x, y)
    assert epoch_per_call.model_.steps_per_execution == _base.steps_per_execution()
    monkeypatch.setattr(_base, "_fit_on_one_iterator",
                        functools.partial(_base._fit_on_one_iterator, steps_per_execution=1))
    batch_per_call = E.HingeForestClassifier(**settings).fit(x, y)
    np.testing.assert_array_equal(epoch_per_call.predict_proba(x), batch_per_call.predict_proba(x))
    assert len(epoch_per_call.history_["loss"]) == len(batch_per_call.history_["loss"]) == 3
    # An epoch is its own batches: no call reads on into the next epoch's.
    n_train = len(x) - int(np.floor(epoch_per_call.validation_fraction * len(x)))
    repeat = -(-_base.TreeEstimator._min_epoch_steps * 16 // n_train)
    steps = -(-n_train * repeat // 16)
    for fitted in (epoch_per_call, batch_per_call):
        assert int(keras.ops.convert_to_numpy(fitted.model_.optimizer.iterations)) == 3 * steps
