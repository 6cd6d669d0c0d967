"""Tree Ensemble Layer and hinge forests/ferns on every Keras backend: training,
prediction, .keras round trip, seeds, mixed precision and two-device replicas."""

import os
import sys

import keras
import numpy as np
import pytest

from keras_trees import layers as kt_layers
from tests.backends.conftest import BACKEND, run_fresh, run_replicated

FAMILIES = {
    "tree_ensemble": lambda: kt_layers.TreeEnsembleLayer(num_trees=6, max_depth=3, units=3, transition_width=1.0),
    "hinge_forest": lambda: kt_layers.HingeForest(num_trees=12, max_depth=3, units=3, reduction="sum"),
    "hinge_fern": lambda: kt_layers.HingeFern(num_trees=12, max_depth=3, units=3, reduction="sum"),
}


def data(n=600, d=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    y = (np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5])).astype("int32")
    return x, y


def make_model(family):
    front = keras.layers.BatchNormalization() if family == "tree_ensemble" else kt_layers.HingeBatchNormalization()
    model = keras.Sequential([keras.Input((6,)), front, FAMILIES[family]()])
    model.compile(
        keras.optimizers.Adam(0.05),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def train(family, seed=0, epochs=8):
    keras.utils.set_random_seed(seed)
    x, y = data()
    model = make_model(family)
    model.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
    return model, x, y


def accuracy(model, x, y):
    return float((np.argmax(model.predict(x, verbose=0), -1) == y).mean())


@pytest.mark.slow
def test_import_does_not_load_tensorflow_on_other_backends(tmp_path):
    out = run_fresh(
        """
        import sys
        import keras_trees, keras_trees.layers, keras_trees.callbacks, keras_trees.losses
        import keras_trees.inspection, keras_trees.interop
        print("tensorflow loaded:", "tensorflow" in sys.modules)
        """,
        tmp_path,
    )
    assert f"tensorflow loaded: {BACKEND == 'tensorflow'}" in out


@pytest.mark.slow_on("jax")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fit_predict_and_keras_round_trip(family, tmp_path):
    model, x, y = train(family)
    assert accuracy(model, x, y) > 0.8
    path = str(tmp_path / f"{family}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_set_random_seed_makes_training_reproducible(family):
    first, x, _ = train(family, seed=7, epochs=2)
    second, _, _ = train(family, seed=7, epochs=2)
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first.predict(x, verbose=0), second.predict(x, verbose=0))
    other, _, _ = train(family, seed=8, epochs=2)
    assert any(not np.array_equal(a, b) for a, b in zip(first.get_weights(), other.get_weights()))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_mixed_precision_trains_like_float32(family, policy):
    reference, x, y = train(family, seed=3)
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        model, _, _ = train(family, seed=3)
        tree = model.layers[-1]
        assert tree.compute_dtype == policy.split("_")[1]
        assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in tree.trainable_weights)
        out = model.predict(x, verbose=0)
        assert np.all(np.isfinite(out.astype("float32")))
        assert accuracy(model, x, y) >= accuracy(reference, x, y) - 0.05
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_trains_on_two_replicas(family, tmp_path):
    if BACKEND == "torch":
        pytest.skip("Keras has no multi-device CPU training on PyTorch")
    out = run_replicated(
        f"""
        import numpy as np
        from tests.backends.test_tree_ensemble_and_hinge_backends import data, make_model, accuracy
        keras.utils.set_random_seed(0)
        x, y = data()
        with replicated():
            model = make_model({family!r})
        model.fit(x, y, epochs=8, batch_size=64, verbose=0)
        print("ACC", accuracy(model, x, y))
        """,
        tmp_path,
    )
    acc = float(out.split("ACC")[-1])
    single, x, y = train(family)
    assert acc >= accuracy(single, x, y) - 0.05, (acc, accuracy(single, x, y))


def test_backend_reports_what_runs_where():
    from keras_trees import ops

    report = ops.execution_report()
    assert report["backend"] == BACKEND
    if not os.environ.get("KERAS_TREES_DISABLE_CUSTOM_OPS"):  # TF ops / JAX XLA FFI / torch.library ops on the CPU
        assert ops.custom_ops_available(), report["summary"]
        assert "kernels" in report["devices"].values()
    assert "tensorflow" in sys.modules or BACKEND != "tensorflow"


@pytest.mark.parametrize(
    "family, variable",
    [("tree_ensemble", "node_weights"), ("tree_ensemble", "leaf_weights"),
     ("hinge_forest", "thresholds"), ("hinge_fern", "leaf_weights")],
)
def test_non_finite_weights_are_rejected_naming_the_variable(family, variable):
    """A NaN weight is an error naming it, eagerly and in the
    compiled predict (tf.function, jax.jit), never a finite prediction."""
    x = data(n=32)[0]
    layer = FAMILIES[family]()
    model = keras.Sequential([keras.Input((6,)), layer])
    model(x)
    v = getattr(layer, variable)
    value = np.array(keras.ops.convert_to_numpy(v))
    if variable == "leaf_weights":
        value[...] = np.nan
    else:
        value.reshape(-1)[1] = np.nan
    v.assign(value)
    # Leaves are checked by the op, whose message names its argument.
    with pytest.raises(ValueError, match=f"(variable )?{variable} contains NaN or Inf"):
        layer(x)
    # The hinge kernel checks thresholds too: either message names the variable.
    with pytest.raises(Exception, match=f"{variable} contains? NaN"):
        model.predict(x, verbose=0)


@pytest.mark.parametrize("variable", ["moving_mean", "moving_variance"])
def test_hinge_batch_norm_rejects_non_finite_statistics(variable):
    """A NaN or Inf running statistic (assigned, or from a diverged run) is an
    error naming the variable, eagerly and in the compiled predict, as every
    other layer's variables are, never a NaN prediction."""
    x = data(n=32)[0]
    bn = kt_layers.HingeBatchNormalization(name="hbn")
    model = keras.Sequential([keras.Input((6,)), bn])
    model(x)
    v = getattr(bn, variable)
    value = np.array(keras.ops.convert_to_numpy(v))
    value[2] = np.inf if variable == "moving_variance" else np.nan
    v.assign(value)
    message = f"hbn.{{0,3}}: variable {variable} contains NaN or Inf; did training diverge"
    with pytest.raises(ValueError, match=message):
        bn(x)
    with pytest.raises(Exception, match=message):
        model.predict(x, verbose=0)


@pytest.mark.slow_on("jax")
def test_hinge_batch_norm_rejects_non_finite_inputs():
    """NaN/Inf x is an error naming x, in training and inference,
    eager and compiled; the running statistics stay as they were."""
    x = data(n=32)[0]
    bn = kt_layers.HingeBatchNormalization()
    bn(x, training=True)
    mean = np.array(keras.ops.convert_to_numpy(bn.moving_mean))
    bad = x.copy()
    bad[3, 2] = np.inf
    for training in (False, True):
        with pytest.raises(ValueError, match="x contains NaN or Inf"):
            bn(bad, training=training)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(bn.moving_mean), mean)
    # (Keras' JAX trainer leaves the variables released when predict raises:
    # the statistics are compared before.)
    model = keras.Sequential([keras.Input((6,)), bn])
    with pytest.raises(Exception, match="x contains NaN or Inf"):
        model.predict(bad, verbose=0)
