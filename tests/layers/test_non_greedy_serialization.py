"""Trained non-greedy trees save, load, export and reload (fresh processes)."""

import pytest

from tests.conftest import run_python

pytest.importorskip("sklearn")

TRAIN_AND_SAVE = """
import numpy as np, keras
import keras_trees
from sklearn.tree import DecisionTreeClassifier
from keras_trees.callbacks.stable_sgd import StableSGD
from keras_trees.interop.sklearn import from_sklearn
from keras_trees.layers.non_greedy_tree import NonGreedyTree

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(300, 4)).astype("float32")
y = (x[:, 0] + x[:, 1] > 0).astype("int32") + (x[:, 2] > 0.5)
model = NonGreedyTree(max_depth=4, num_classes=3, nu=3.0, name="ngt")
model.initialize_from(from_sklearn(DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, y)))
model.compile(keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"])
model.fit(x, y, batch_size=50, epochs=4, verbose=0, callbacks=[StableSGD(max_round_epochs=2)])
np.save("x.npy", x); np.save("y.npy", y)
np.save("pred.npy", model.predict(x, verbose=0))
np.save("eval.npy", np.array(list(model.evaluate(x, y, verbose=0, return_dict=True).values())))
model.save("model.keras")
model.save_weights("w.weights.h5")
model.export("savedmodel", verbose=False)
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ngt_saved")
    run_python(TRAIN_AND_SAVE, cwd=workdir)
    return workdir


# Run one after another in one fresh process (the `reloaded` fixture of tests/conftest.py).
RELOADS = {
    "keras_file_round_trip_and_training_resumes": """
        import numpy as np, keras
        import keras_trees
        from keras_trees.layers.non_greedy_tree import NonGreedyTree
        model = keras.saving.load_model("model.keras")
        assert isinstance(model, NonGreedyTree) and model.max_depth == 4 and model.nu == 3.0
        x, y = np.load("x.npy"), np.load("y.npy")
        np.testing.assert_array_equal(model.predict(x, verbose=0), np.load("pred.npy"))
        ev = np.array(list(model.evaluate(x, y, verbose=0, return_dict=True).values()))
        np.testing.assert_allclose(ev, np.load("eval.npy"), rtol=1e-5)
        model.fit(x, y, batch_size=50, epochs=1, verbose=0)   # optimizer state restored
        assert np.all(model.row_norms() <= 3.0 * (1 + 1e-5))
        """,
    "weights_reload_into_a_fresh_model": """
        import numpy as np
        import keras_trees
        from keras_trees.layers.non_greedy_tree import NonGreedyTree
        fresh = NonGreedyTree(max_depth=4, num_classes=3, nu=3.0)
        fresh.build((None, 4))
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
def test_keras_file_round_trip_and_training_resumes(reloaded):
    reloaded.output("keras_file_round_trip_and_training_resumes")


@pytest.mark.slow
def test_weights_reload_into_a_fresh_model(reloaded):
    reloaded.output("weights_reload_into_a_fresh_model")


@pytest.mark.slow
def test_saved_model_export_uses_the_hard_routing_op(reloaded):
    out = reloaded.output("saved_model_export_uses_the_hard_routing_op")
    assert out.strip().endswith("hard")
