"""Saving and exporting round trips, each reloaded in a fresh Python process."""

import pytest

from tests.conftest import PORTABLE_SAVED_MODEL_CHECK, run_python

BUILD_AND_SAVE = """
import numpy as np, keras
from keras_trees.layers import TreeEnsembleLayer
import keras_trees

rng = np.random.default_rng(0)
x = rng.normal(size=(300, 16)).astype("float32")
y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype("int32")
inputs = keras.Input((16,))
h = keras.layers.BatchNormalization()(inputs)
h = TreeEnsembleLayer(num_trees=6, max_depth=4, units=8, transition_width=0.7, name="tel_hidden")(h)
h = keras.layers.Dense(8, activation="relu")(h)
outputs = TreeEnsembleLayer(num_trees=3, max_depth=2, units=2, use_bias=False)(h)
model = keras.Model(inputs, outputs)
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, epochs=2, verbose=0)
model.get_layer("tel_hidden").gamma.assign(0.5)   # as an annealing callback would
np.save("x.npy", x)
np.save("pred.npy", model.predict(x, verbose=0))
model.save("model.keras")
model.export("savedmodel", verbose=False)
keras_trees.export_portable(model, "portable", verbose=False)
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("saved")
    run_python(BUILD_AND_SAVE, cwd=workdir)
    return workdir


# Run one after another in one fresh process (the `reloaded` fixture of tests/conftest.py).
# The portable check runs first: keras_trees is not imported yet, so its
# "keras_trees not in sys.modules" holds only if loading the file needs none of it.
RELOADS = {
    "portable_saved_model_needs_no_keras_trees": PORTABLE_SAVED_MODEL_CHECK.format(tolerance=1e-4),
    "keras_file_round_trip": """
        import numpy as np, keras
        import keras_trees  # registers the serializable classes
        model = keras.saving.load_model("model.keras")
        assert float(model.get_layer("tel_hidden").gamma.numpy()) == 0.5
        pred = model.predict(np.load("x.npy"), verbose=0)
        np.testing.assert_array_equal(pred, np.load("pred.npy"))
        # The reloaded model keeps training.
        model.fit(np.load("x.npy"), np.zeros(300, dtype="int32"), epochs=1, verbose=0)
        """,
    "saved_model_with_custom_ops": """
        import numpy as np, tensorflow as tf
        import keras_trees  # registers the KerasTrees ops before loading
        loaded = tf.saved_model.load("savedmodel")
        pred = loaded.serve(tf.constant(np.load("x.npy"))).numpy()
        np.testing.assert_allclose(pred, np.load("pred.npy"), rtol=1e-6, atol=1e-6)
        ops = {op.type for f in loaded.serve.concrete_functions for op in f.graph.get_operations()}
        print("custom" if any(t.startswith("KerasTrees") for t in ops) else "stock")
        """,
    "weights_reload_into_a_freshly_built_model": """
        import numpy as np, keras
        import keras_trees
        model = keras.saving.load_model("model.keras")
        model.save_weights("w.weights.h5")
        fresh = keras.models.clone_model(model)
        fresh.load_weights("w.weights.h5")
        np.testing.assert_array_equal(fresh.predict(np.load("x.npy"), verbose=0), np.load("pred.npy"))
        """,
    "saved_model_is_differentiable_after_import": """
        import numpy as np, tensorflow as tf
        import keras_trees
        loaded = tf.saved_model.load("savedmodel")
        x = tf.constant(np.load("x.npy")[:5])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = loaded.serve(x)
        g = tape.gradient(y, x)
        assert g is not None and np.abs(g.numpy()).sum() > 0
        """,
}


@pytest.mark.slow
def test_keras_file_round_trip(reloaded):
    reloaded.output("keras_file_round_trip")


@pytest.mark.slow
def test_saved_model_with_custom_ops(reloaded):
    out = reloaded.output("saved_model_with_custom_ops")
    assert out.strip().endswith("custom")


@pytest.mark.slow
def test_portable_saved_model_needs_no_keras_trees(reloaded):
    out = reloaded.output("portable_saved_model_needs_no_keras_trees")
    assert out.strip().endswith("ok")


@pytest.mark.slow
def test_weights_reload_into_a_freshly_built_model(reloaded):
    reloaded.output("weights_reload_into_a_freshly_built_model")


@pytest.mark.slow
def test_saved_model_is_differentiable_after_import(reloaded):
    reloaded.output("saved_model_is_differentiable_after_import")


def test_truncated_keras_file_is_diagnosed_as_the_readme_says(tmp_path):
    """docs/deployment.md, "Damaged files": Keras reports a truncated ``.keras`` file as "File
    not found" (it is not a zip archive); ``zipfile.is_zipfile`` tells it apart
    from a missing file. keras-trees has no loader of its own to intercept it."""
    import zipfile

    import keras

    import keras_trees  # noqa: F401
    from keras_trees.layers import TreeEnsembleLayer

    model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(2, 2, 1)])
    path = tmp_path / "m.keras"
    model.save(path)
    data = path.read_bytes()
    damaged = tmp_path / "damaged.keras"
    damaged.write_bytes(data[: len(data) // 2])
    assert zipfile.is_zipfile(path) and not zipfile.is_zipfile(damaged)
    with pytest.raises(ValueError, match=r"accessible `\.keras` zip file"):
        keras.saving.load_model(damaged)
    keras.saving.load_model(path)  # the whole file loads
