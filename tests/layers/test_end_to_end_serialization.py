"""Grown end-to-end trees save, load, export and reload into fresh models (fresh processes)."""

import pytest

from tests.conftest import PORTABLE_SAVED_MODEL_CHECK, run_python

GROW_AND_SAVE = """
import numpy as np, keras
import keras_trees
from keras_trees.layers import EndToEndForest, EndToEndTree
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.regularizers import SpatialLaplacian

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(300, 4, 4)).astype("float32")
y = (x[:, 0, 0] + x[:, 1, 1] > 0).astype("int32") + (x[:, 2, 2] > 0.5)
inputs = keras.Input((4, 4))
tree = EndToEndTree(max_depth=4, num_classes=3, split_regularizer=SpatialLaplacian(0.01, (4, 4)),
                    seed=0, name="tree")(inputs)
forest = EndToEndForest(3, max_depth=3, num_classes=3, patch_size=3, seed=1, name="forest")(inputs)
model = keras.Model(inputs, keras.layers.Average()([tree, forest]))
model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
g = GreedyLevelGrowth(x, y, epochs_per_level=3, finetune_epochs=2)
model.fit(x, y, batch_size=100, epochs=g.max_epochs(4), verbose=0,
          callbacks=[g, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
layer = model.get_layer("tree")
for name in ("tree", "forest"):
    assert int(np.asarray(model.get_layer(name).growth_phase)) == 3  # grown and finetuned
np.save("x.npy", x)
np.save("state.npy", np.asarray(layer.node_state))
np.save("pred.npy", model.predict(x, verbose=0))
np.save("soft.npy", np.asarray(layer.posterior(x)))
model.save("model.keras")
model.save_weights("w.weights.h5")
model.export("savedmodel", verbose=False)
keras_trees.export_portable(model, "portable", verbose=False)
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("e2e_saved")
    run_python(GROW_AND_SAVE, cwd=workdir)
    return workdir


# Run one after another in one fresh process (the `reloaded` fixture of tests/conftest.py).
# The portable check runs first: keras_trees is not imported yet, so its
# "keras_trees not in sys.modules" holds only if loading the file needs none of it.
RELOADS = {
    "portable_export_of_grown_trees_needs_no_keras_trees": PORTABLE_SAVED_MODEL_CHECK.format(tolerance=1e-5),
    "keras_file_round_trip_keeps_grown_topology": """
        import numpy as np, keras
        import keras_trees
        model = keras.saving.load_model("model.keras")
        layer = model.get_layer("tree")
        np.testing.assert_array_equal(np.asarray(layer.node_state), np.load("state.npy"))
        x = np.load("x.npy")
        np.testing.assert_array_equal(model.predict(x, verbose=0), np.load("pred.npy"))
        np.testing.assert_allclose(np.asarray(layer.posterior(x)), np.load("soft.npy"), rtol=1e-6)
        """,
    "weights_reload_into_a_freshly_built_model": """
        import numpy as np, keras
        import keras_trees
        model = keras.saving.load_model("model.keras")
        fresh = keras.models.clone_model(model)   # a freshly built, ungrown model
        assert not np.array_equal(np.asarray(fresh.get_layer("tree").node_state), np.load("state.npy"))
        fresh.load_weights("w.weights.h5")
        np.testing.assert_array_equal(fresh.predict(np.load("x.npy"), verbose=0), np.load("pred.npy"))
        """,
    "saved_model_export_uses_the_hard_routing_op": """
        import numpy as np, tensorflow as tf
        import keras_trees
        loaded = tf.saved_model.load("savedmodel")
        pred = loaded.serve(tf.constant(np.load("x.npy"))).numpy()
        np.testing.assert_allclose(pred, np.load("pred.npy"), rtol=1e-6, atol=1e-6)
        ops = {op.type for f in loaded.serve.concrete_functions for op in f.graph.get_operations()}
        print("hard" if "KerasTrees>HardRouting" in ops else sorted(ops))
        """,
}


@pytest.mark.slow
def test_keras_file_round_trip_keeps_grown_topology(reloaded):
    reloaded.output("keras_file_round_trip_keeps_grown_topology")


@pytest.mark.slow
def test_weights_reload_into_a_freshly_built_model(reloaded):
    reloaded.output("weights_reload_into_a_freshly_built_model")


@pytest.mark.slow
def test_saved_model_export_uses_the_hard_routing_op(reloaded):
    out = reloaded.output("saved_model_export_uses_the_hard_routing_op")
    assert out.strip().endswith("hard")


@pytest.mark.slow
def test_portable_export_of_grown_trees_needs_no_keras_trees(reloaded):
    # export_portable traces under reference_only(): the hard-routing dispatch
    # must take the keras.ops reference path, leaving only stock TF ops.
    out = reloaded.output("portable_export_of_grown_trees_needs_no_keras_trees")
    assert out.strip().endswith("ok")
