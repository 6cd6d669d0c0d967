"""Setups that would train nothing, silently, warn at the first ``fit``:
probability outputs with a loss expecting logits and the reverse,
``leaf_learning="em"`` without ``EMLeafUpdate``; ``num_classes`` on the Tree
Ensemble Layer and the hinge forests/ferns; ``EndToEndTree.num_leaves()`` an
int; no NumPy 2 ``copy`` deprecation warnings from keras-trees' own reads of
variables; ``export_portable`` quiet by default. Every backend."""

import os
import traceback
import warnings

import keras
import numpy as np
import pytest

from keras_trees import callbacks as kt_callbacks
from keras_trees import layers as kt_layers
from keras_trees._arrays import to_numpy
from tests.backends.conftest import BACKEND

SCCE = keras.losses.SparseCategoricalCrossentropy


def data(n=64, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32")


def fit_warnings(layer, loss, callbacks=(), epochs=1, model=None):
    """The messages of the UserWarnings a short fit emits (one batch per epoch)."""
    x, y = data()
    model = model or keras.Sequential([keras.Input((4,)), layer])
    model.compile(keras.optimizers.Adam(0.01), loss)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, epochs=epochs, batch_size=len(x), verbose=0,
                  callbacks=[cb(x, y) for cb in callbacks])
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def trap_warnings(messages):
    return [m for m in messages if "Fix:" in m]


PROBABILITY_LAYERS = {
    "end_to_end_tree": lambda: kt_layers.EndToEndTree(max_depth=2, num_classes=2, seed=0),
    "end_to_end_forest": lambda: kt_layers.EndToEndForest(num_trees=2, max_depth=2, num_classes=2, seed=0),
    "tree_ensemble": lambda: kt_layers.TreeEnsembleLayer(num_trees=2, max_depth=2, num_classes=2),
    "hinge_forest": lambda: kt_layers.HingeForest(num_trees=2, max_depth=2, num_classes=2, reduction="sum", seed=0),
    "hinge_fern": lambda: kt_layers.HingeFern(num_trees=2, max_depth=2, num_classes=2, reduction="mean", seed=0),
    "convex_polytope": lambda: kt_layers.ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=2, seed=0),
}
LOGIT_LAYERS = {
    "tree_ensemble": lambda: kt_layers.TreeEnsembleLayer(num_trees=2, max_depth=2, units=2),
    "hinge_forest": lambda: kt_layers.HingeForest(num_trees=2, max_depth=2, units=2, reduction="sum", seed=0),
    "hinge_fern": lambda: kt_layers.HingeFern(num_trees=2, max_depth=2, units=2, reduction="sum", seed=0),
}


# ------------------------------------------------- probabilities vs. logits
@pytest.mark.parametrize("family", sorted(PROBABILITY_LAYERS))
def test_probability_outputs_with_a_logits_loss_warn_once(family):
    layer = PROBABILITY_LAYERS[family]()
    messages = trap_warnings(fit_warnings(layer, SCCE(from_logits=True), epochs=2))
    assert len(messages) == 1, messages
    assert layer.name in messages[0] and "from_logits=True" in messages[0]
    assert "class probabilities (num_classes=2)" in messages[0] and "from_logits=False" in messages[0]
    if family in LOGIT_LAYERS:
        assert "units=2" in messages[0]  # the other fix: logits


@pytest.mark.parametrize("loss", [SCCE(from_logits=True), keras.losses.CategoricalCrossentropy(from_logits=True),
                                  keras.losses.BinaryCrossentropy(from_logits=True),
                                  keras.losses.BinaryFocalCrossentropy(from_logits=True)],
                         ids=lambda loss: type(loss).__name__)
def test_every_builtin_crossentropy_with_from_logits_is_recognised(loss):
    from keras_trees.layers._fit_checks import loss_expects

    assert loss_expects(loss) == "logits"
    assert loss_expects(type(loss)()) == "probabilities"
    assert loss_expects({"class_name": type(loss).__name__, "config": {"from_logits": True}}) == "logits"


@pytest.mark.parametrize("name", ["sparse_categorical_crossentropy", "categorical_crossentropy",
                                  "binary_crossentropy", "binary_focal_crossentropy",
                                  "SparseCategoricalCrossentropy"])
def test_string_losses_expect_probabilities(name):
    from keras_trees.layers._fit_checks import loss_expects

    assert loss_expects(name) == "probabilities"
    assert loss_expects("mse") is None and loss_expects(keras.losses.MeanSquaredError()) is None


@pytest.mark.slow
def test_raw_outputs_with_a_probability_loss_warn():
    """The issue's first trap: EndToEndTree(units=2) with SparseCategoricalCrossentropy()
    (the loss stays at log 2)."""
    layer = kt_layers.EndToEndTree(max_depth=2, units=2, seed=0)
    [message] = trap_warnings(fit_warnings(layer, SCCE()))
    assert "raw values (units=2)" in message and "num_classes=2" in message
    assert "units= outputs regression values" in message


@pytest.mark.parametrize("family", sorted(LOGIT_LAYERS))
def test_logit_outputs_with_a_probability_loss_warn(family):
    layer = LOGIT_LAYERS[family]()
    [message] = trap_warnings(fit_warnings(layer, "sparse_categorical_crossentropy"))
    assert "raw values (units=2)" in message and "from_logits=True" in message and "num_classes=2" in message


@pytest.mark.slow
@pytest.mark.parametrize("case", ["probabilities", "logits", "regression", "softmax_after", "functional"])
def test_matching_setups_do_not_warn(case):
    x_in = keras.Input((4,))
    model = None
    if case == "probabilities":
        layer, loss = PROBABILITY_LAYERS["tree_ensemble"](), SCCE()
    elif case == "logits":
        layer, loss = LOGIT_LAYERS["hinge_forest"](), SCCE(from_logits=True)
    elif case == "regression":
        layer, loss = kt_layers.EndToEndTree(max_depth=2, units=1, seed=0), "mse"
    elif case == "softmax_after":  # the tree is not the output: its raw values go through a softmax
        layer, loss = LOGIT_LAYERS["tree_ensemble"](), SCCE()
        model = keras.Sequential([x_in, layer, keras.layers.Softmax()])
    else:  # functional model whose output is the tree: no warning when the loss matches
        layer, loss = PROBABILITY_LAYERS["end_to_end_tree"](), "sparse_categorical_crossentropy"
        model = keras.Model(x_in, layer(keras.layers.Dense(4)(x_in)))
    assert trap_warnings(fit_warnings(layer, loss, model=model)) == []


def test_functional_model_output_is_checked():
    x_in = keras.Input((4,))
    layer = LOGIT_LAYERS["tree_ensemble"]()
    model = keras.Model(x_in, layer(keras.layers.Dense(4)(x_in)))
    assert len(trap_warnings(fit_warnings(layer, SCCE(), model=model))) == 1


# ------------------------------------------------------ EM leaves without EM
def test_em_leaves_without_em_callback_warn():
    layer = kt_layers.EndToEndTree(max_depth=2, num_classes=2, leaf_learning="em", seed=0)
    [message] = trap_warnings(fit_warnings(layer, SCCE()))
    assert "leaf_learning='em'" in message and "EMLeafUpdate" in message


@pytest.mark.slow
def test_em_leaves_with_em_callback_do_not_warn():
    layer = kt_layers.EndToEndTree(max_depth=2, num_classes=2, leaf_learning="em", seed=0)
    assert trap_warnings(fit_warnings(layer, SCCE(), callbacks=[kt_callbacks.EMLeafUpdate])) == []
    assert not layer._em_updates  # unmarked when the fit ended


@pytest.mark.slow_on("jax")
def test_auto_leaves_without_em_callback_do_not_warn():
    layer = kt_layers.EndToEndTree(max_depth=2, num_classes=2, seed=0)
    assert trap_warnings(fit_warnings(layer, SCCE())) == []


# ------------------------------------------- num_classes on TEL, hinge layers
@pytest.mark.parametrize("family", ["tree_ensemble", "hinge_forest", "hinge_fern"])
def test_num_classes_outputs_probabilities_and_round_trips(family, tmp_path):
    x, y = data()
    layer = PROBABILITY_LAYERS[family]()
    model = keras.Sequential([keras.Input((4,)), layer])
    model.compile(keras.optimizers.Adam(0.05), SCCE())
    history = model.fit(x, y, epochs=5, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    proba = to_numpy(model(x))
    assert proba.shape == (len(x), 2) and np.all(proba >= 0)
    np.testing.assert_allclose(proba.sum(-1), 1.0, rtol=1e-5)
    config = layer.get_config()
    assert config["num_classes"] == 2 and config["units"] is None
    assert type(layer).from_config(config).get_config() == config
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(x)), proba, rtol=1e-5, atol=1e-6)


@pytest.mark.slow_on("jax")
def test_hinge_num_classes_without_reduction_gives_every_tree_probabilities():
    layer = kt_layers.HingeForest(num_trees=3, max_depth=2, num_classes=4, seed=0)
    out = to_numpy(layer(data()[0]))
    assert out.shape == (64, 3, 4)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("cls", [kt_layers.TreeEnsembleLayer, kt_layers.HingeForest, kt_layers.HingeFern])
def test_num_classes_and_units_are_exclusive(cls):
    with pytest.raises(ValueError, match=r"exactly one of num_classes \(class probabilities\) or units \(raw "
                                         r"outputs: logits for from_logits=True"):
        cls(num_trees=2, max_depth=2, num_classes=2, units=2)
    with pytest.raises(ValueError, match="exactly one of num_classes"):
        cls(num_trees=2, max_depth=2)
    with pytest.raises(ValueError, match="num_classes must be >= 2"):
        cls(num_trees=2, max_depth=2, num_classes=1)


# ------------------------------------------------------------ num_leaves()
@pytest.mark.slow_on("jax")
def test_end_to_end_tree_num_leaves_is_an_int_and_forest_an_array():
    x, _ = data()
    tree = kt_layers.EndToEndTree(max_depth=3, num_classes=2, seed=0)
    forest = kt_layers.EndToEndForest(num_trees=2, max_depth=3, num_classes=2, seed=0)
    tree(x), forest(x)
    assert type(tree.num_leaves()) is int and tree.num_leaves() == 8
    assert type(tree.num_splits()) is int and tree.num_splits() == 7
    assert forest.num_leaves().tolist() == [8, 8]


# -------------------------------------------- NumPy 2 copy= deprecations
class _CopyWarnings:
    """Records NumPy 2's "``__array__`` ... copy keyword" DeprecationWarnings
    raised below a keras-trees frame (Keras itself emits some on PyTorch, e.g.
    converting the logs of ``fit``: not ours)."""

    def __enter__(self):
        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("always")
        self.found = []

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, DeprecationWarning) and "copy keyword" in str(message):
                ours = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()
                        if f"{os.sep}keras_trees{os.sep}" in f.filename]
                if ours:
                    self.found.append(ours[-1])

        warnings.showwarning = show
        return self

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)


@pytest.mark.slow
def test_no_numpy_copy_deprecation_from_keras_trees():
    """Reading variables (growth phases, validation checks, EM, growth, inspection)
    used ``keras.ops.convert_to_numpy``, whose ``np.array(variable)`` warns under
    NumPy 2 (about 1,200 warnings in one EndToEndTreeClassifier.fit)."""
    x, y = data(n=128)
    tree = kt_layers.EndToEndTree(max_depth=2, num_classes=2, initial_topology="stump", seed=0)
    model = keras.Sequential([keras.Input((4,)), tree])
    model.compile(keras.optimizers.Adam(0.05), SCCE())
    hinge = kt_layers.HingeForest(num_trees=2, max_depth=2, units=1)
    with _CopyWarnings() as caught:
        hinge(x)  # the reported PyTorch reproduction: the validation check's read
        growth = kt_callbacks.GreedyLevelGrowth(x, y, epochs_per_level=1, finetune_epochs=1)
        model.fit(x, y, epochs=4, batch_size=64, verbose=0,
                  callbacks=[growth, kt_callbacks.EMLeafUpdate(x, y), kt_callbacks.SteepnessAnnealing(0.1)])
        tree.to_forest(), tree.num_leaves(), tree.em_update_mask(), hinge.to_forest()
        to_numpy(model(x))
    assert caught.found == []


def test_copy_warning_recorder_sees_a_keras_trees_source():
    """The recorder above is not blind: ``keras.ops.convert_to_numpy`` of a
    variable (what keras-trees did before) run from a keras-trees file is
    recorded; the same call from here is not."""
    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip("NumPy 1 passes no copy keyword")
    v = keras.Variable(np.zeros(2, "float32"))
    call = "keras.ops.convert_to_numpy(v)"
    with _CopyWarnings() as caught:
        exec(compile(call, os.path.join("tests", "here.py"), "exec"), {"keras": keras, "v": v})
    assert caught.found == []
    with _CopyWarnings() as caught:
        exec(compile(call, os.path.join("src", "keras_trees", "old.py"), "exec"), {"keras": keras, "v": v})
    assert caught.found and all(os.path.join("keras_trees", "old.py") in found for found in caught.found)


def test_to_numpy_copies_variables_and_tensors():
    v = keras.Variable(np.arange(3, dtype="float32"))
    a = to_numpy(v)
    a[0] = 5.0
    assert to_numpy(v).tolist() == [0.0, 1.0, 2.0]  # a copy: the variable did not change
    s = keras.Variable(7, dtype="int32", trainable=False)
    assert to_numpy(s).shape == () and int(to_numpy(s)) == 7
    assert to_numpy(keras.ops.greater(keras.ops.convert_to_tensor([1.0, 3.0]), 2.0)).tolist() == [False, True]


# ------------------------------------------------------ export_portable
@pytest.mark.skipif(BACKEND != "tensorflow", reason="export_portable writes a TF SavedModel")
def test_export_portable_is_quiet_by_default(tmp_path, capfd):
    import keras_trees

    model = keras.Sequential([keras.Input((4,)), LOGIT_LAYERS["tree_ensemble"]()])
    capfd.readouterr()
    keras_trees.export_portable(model, str(tmp_path / "quiet"))
    assert "TensorSpec" not in capfd.readouterr().out
    keras_trees.export_portable(model, str(tmp_path / "listed"), verbose=True)
    assert "TensorSpec" in capfd.readouterr().out
