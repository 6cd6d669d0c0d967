"""The flat (non-heap) layers: TreeEnsembleLayer, HingeForest,
HingeFern, HingeBatchNormalization and NonGreedyTree reject bad inputs, bad
weights and damaged files with an exception naming the argument or the
variable, on every path (eager, ``tf.function``/``model.predict``, the
compiled kernels and the ``keras.ops`` reference)."""

import math
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_trees import ops as tree_ops
from keras_trees.layers import (
    HingeBatchNormalization,
    HingeFern,
    HingeForest,
    NonGreedyTree,
    TreeEnsembleLayer,
    per_split_features,
    split_cnn,
)

DIM = 5
RUNTIME_ERRORS = (ValueError, tf.errors.InvalidArgumentError)


def make(name):
    return {
        "tel": lambda: TreeEnsembleLayer(num_trees=3, max_depth=3, units=2, name="tel"),
        "hinge_forest": lambda: HingeForest(num_trees=3, max_depth=3, units=2, seed=0, name="hinge_forest"),
        "hinge_fern": lambda: HingeFern(num_trees=3, max_depth=3, units=2, seed=0, name="hinge_fern"),
        "hbn": lambda: HingeBatchNormalization(name="hbn"),
        "ngt": lambda: NonGreedyTree(max_depth=3, num_classes=3, seed=0, name="ngt"),
    }[name]()


LAYERS = ["tel", "hinge_forest", "hinge_fern", "hbn", "ngt"]
# (layer, variable) pairs of every floating variable a call reads.
FLOAT_VARIABLES = [
    ("tel", "node_weights"),
    ("tel", "node_bias"),
    ("tel", "leaf_weights"),
    ("hinge_forest", "thresholds"),
    ("hinge_forest", "leaf_weights"),
    ("hinge_fern", "thresholds"),
    ("hinge_fern", "leaf_weights"),
    ("ngt", "split_weights"),
    ("ngt", "leaf_values"),
    ("hbn", "moving_mean"),
    ("hbn", "moving_variance"),
]


def x_data(n=16, seed=0):
    return np.random.default_rng(seed).normal(size=(n, DIM)).astype("float32")


def built(name):
    layer = make(name)
    layer(x_data())
    return layer


LEAF_VARIABLES = ("leaf_weights", "leaf_values")


def poison(layer, variable, value=np.nan):
    """One bad split value; bad leaves everywhere (leaves are checked through
    the output: a bad leaf must be one the batch reaches)."""
    v = getattr(layer, variable)
    a = np.array(keras.ops.convert_to_numpy(v))
    if variable in LEAF_VARIABLES:
        a[...] = value
    else:
        a.reshape(-1)[a.size // 2] = value
    v.assign(a)


def variable_message(name, variable):
    # Inside a graph TensorFlow escapes the quotes around the layer's name. The
    # leaves are checked by the op, whose message names the op's argument.
    if variable == "leaf_weights":
        return rf"({name}.{{0,3}}: variable )?{variable} contains NaN or Inf"
    return rf"{name}.{{0,3}}: variable {variable} contains NaN or Inf"


# --- NaN/Inf in weights, thresholds and leaves ------------------------


@pytest.mark.parametrize("name", sorted({name for name, _ in FLOAT_VARIABLES}))
@pytest.mark.parametrize("reference", [False, True])
def test_non_finite_variable_is_rejected_on_every_path(name, reference):
    """NaN and Inf in each float variable the call reads: the eager call, the
    compiled ``model.predict`` and a ``tf.function`` all fail naming it. One
    layer, one model and one ``tf.function`` per layer and path (each traced
    once, reading the poisoned variable at run time); the variables are
    restored between cases, so each case poisons exactly one variable."""
    layer = built(name)
    model = keras.Sequential([keras.Input((DIM,)), layer])
    traced = tf.function(lambda t: layer(t))
    x = x_data()
    sound = [np.array(keras.ops.convert_to_numpy(v)) for v in layer.weights]
    variables = [variable for layer_name, variable in FLOAT_VARIABLES if layer_name == name]
    with tree_ops.reference_only() if reference else _nothing():
        model.predict(x, verbose=0)  # the sound layer passes on the same traces
        traced(x)
        for variable in variables:
            for bad in (np.nan, np.inf):
                for v, value in zip(layer.weights, sound):
                    v.assign(value)
                poison(layer, variable, bad)
                in_graph = variable_message(name, variable)
                if variable == "thresholds":
                    # The hinge kernel checks its thresholds too; in a graph either check may
                    # fail first, and both name the variable.
                    in_graph = f"{in_graph}|thresholds contain NaN or Inf"
                elif not reference and (name == "tel" or variable == "split_weights"):
                    # In TensorFlow graphs on the kernels the layer leaves its checks to the
                    # kernel (validation.batched.kernels_check), whose message names the variable.
                    in_graph = f"{in_graph}|{variable} contains NaN or Inf"
                with pytest.raises(ValueError, match=variable_message(name, variable)):
                    layer(x)
                with pytest.raises(RUNTIME_ERRORS, match=in_graph):
                    model.predict(x, verbose=0)
                with pytest.raises(RUNTIME_ERRORS, match=in_graph):
                    traced(x)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("value", [0.0, -1.0, np.nan])
def test_tree_ensemble_transition_width_variable_must_stay_positive(value):
    layer = built("tel")
    layer.gamma.assign(value)
    with pytest.raises(RUNTIME_ERRORS, match="tel.{0,3}: variable gamma must be a finite number > 0"):
        layer(x_data())
    # In a graph the kernel may report it first, by the paper's name.
    with pytest.raises(RUNTIME_ERRORS, match="gamma must be a finite number > 0"):
        keras.Sequential([keras.Input((DIM,)), layer]).predict(x_data(), verbose=0)


def test_tree_ensemble_probabilistic_methods_check_weights_and_x():
    layer = built("tel")
    x = x_data()
    x[3, 1] = np.nan
    with pytest.raises(ValueError, match="x contains NaN or Inf"):
        layer.leaf_probabilities(x)
    with pytest.raises(ValueError, match="x contains NaN or Inf"):
        layer.mean_reachable_leaves(x)
    poison(layer, "node_weights")
    with pytest.raises(ValueError, match=variable_message("tel", "node_weights")):
        layer.leaf_probabilities(x_data())
    with pytest.raises(ValueError, match=variable_message("tel", "node_weights")):
        layer.mean_reachable_leaves(x_data())


@pytest.mark.parametrize("name", ["tel", "hinge_forest"])
def test_a_bad_leaf_no_sample_reaches_is_rejected_and_fails_on_loading(name, tmp_path):
    """Every leaf is checked, reached or not (the kernels and the reference
    agree), and a saved file holding a NaN leaf does not load."""
    layer = make(name) if name == "hinge_forest" else TreeEnsembleLayer(
        num_trees=1, max_depth=4, units=1, transition_width=1e-3, name="tel")
    x = x_data(n=3)
    layer(x)
    model = keras.Sequential([keras.Input((DIM,)), layer])
    model.predict(x, verbose=0)
    if name == "hinge_forest":
        reached = np.unique(keras.ops.convert_to_numpy(layer.traverse(x)["leaf"])[:, 0])
    else:
        reached = np.flatnonzero(keras.ops.convert_to_numpy(layer.leaf_probabilities(x))[:, 0].max(0) > 0)
    unreached = sorted(set(range(layer.num_leaves())) - set(reached.tolist()))
    if not unreached:
        pytest.skip("every leaf of tree 0 is reached by this batch")
    value = np.array(keras.ops.convert_to_numpy(layer.leaf_weights))
    value[0, unreached[0]] = np.nan
    layer.leaf_weights.assign(value)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="leaf_weights contains NaN or Inf"):
        model.predict(x, verbose=0)  # compiled graph: the runtime error carries the message
    with tree_ops.reference_only(), pytest.raises(ValueError, match="leaf_weights contains NaN or Inf"):
        layer(x)
    path = str(tmp_path / "model.keras")
    model.save(path)
    with pytest.raises(ValueError, match="variable leaf_weights loaded from the file contains NaN or Inf"):
        keras.models.load_model(path)


def test_hinge_traverse_checks_thresholds():
    layer = built("hinge_forest")
    poison(layer, "thresholds")
    with pytest.raises(ValueError, match=variable_message("hinge_forest", "thresholds")):
        layer.traverse(x_data())


@pytest.mark.slow
def test_non_greedy_tree_checks_its_variables_in_route_and_fit():
    layer = built("ngt")
    layer.compile(keras.optimizers.SGD(0.1))
    y = np.arange(16) % 3
    layer.fit(x_data(), y, verbose=0)
    poison(layer, "assignment_weights")
    with pytest.raises(RUNTIME_ERRORS, match=variable_message("ngt", "assignment_weights")):
        layer.fit(x_data(), y, verbose=0)
    layer.update_assignments()  # a finite copy of the splits again
    poison(layer, "split_weights")
    with pytest.raises(ValueError, match=variable_message("ngt", "split_weights")):
        layer.route(x_data())
    # In the compiled training step the kernels check the splits, naming them.
    with pytest.raises(RUNTIME_ERRORS, match=variable_message("ngt", "split_weights") + "|split_weights (or split_bias )?contain"):
        layer.fit(x_data(), y, verbose=0)


@pytest.mark.parametrize("state", ["seven", "minus_one", "split_on_last_level", "valid_but_not_perfect"])
def test_non_greedy_tree_rejects_a_topology_that_is_not_its_perfect_tree(state, tmp_path):
    layer = built("ngt")
    s = np.array(keras.ops.convert_to_numpy(layer.node_state))
    if state == "seven":
        s[0, 3] = 7
    elif state == "minus_one":
        s[0, 3] = -1
    elif state == "split_on_last_level":
        s[0, -1] = 2
    else:  # root's left child a leaf, its subtree absent
        s[0, 1] = 1
        for p in (3, 4, 7, 8, 9, 10):
            s[0, p] = 0
    model = keras.Sequential([keras.Input((DIM,)), layer])
    path = str(tmp_path / "tree.keras")
    model.save(path)
    layer.node_state.assign(s)
    with pytest.raises(ValueError, match="ngt.{0,3}: variable node_state must be the perfect tree"):
        layer(x_data())
    with pytest.raises(RUNTIME_ERRORS, match="variable node_state must be the perfect tree"):
        model.predict(x_data(), verbose=0)
    _damage(path, str(tmp_path / "damaged.keras"), layer, "node_state", lambda a: s.astype(a.dtype))
    with pytest.raises(ValueError, match="'ngt': variable node_state"):
        keras.models.load_model(str(tmp_path / "damaged.keras"))


# --- loading damaged or pre-poisoned files ---------------------------


def _damage(src, dst, layer, variable, change):
    """Copies the .keras archive ``src`` (a Sequential holding ``layer``) to
    ``dst`` with ``change`` applied to the stored array of ``variable``. Keras
    stores a layer's own variables by position: ``layers/<layer>/vars/<i>``."""
    own = layer._trainable_variables + layer._non_trainable_variables
    index = str(next(i for i, v in enumerate(own) if v.name == variable))
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "model.weights.h5":
                local = dst + ".h5"
                with open(local, "wb") as f:
                    f.write(data)
                with h5py.File(local, "r+") as h5:
                    (group,) = [h5["layers"][k]["vars"] for k in h5["layers"]]
                    value = change(group[index][()])
                    del group[index]
                    group[index] = value
                with open(local, "rb") as f:
                    data = f.read()
            zout.writestr(item, data)


def _nan(a):
    a = np.array(a)
    if a.dtype.kind == "f":
        a.reshape(-1)[0] = np.nan
    return a


@pytest.mark.parametrize("name, variable", FLOAT_VARIABLES)
def test_loading_a_file_with_non_finite_weights_names_layer_and_variable(name, variable, tmp_path):
    layer = built(name)
    model = keras.Sequential([keras.Input((DIM,)), layer])
    good = str(tmp_path / "good.keras")
    model.save(good)
    # Pre-poisoned: the model had diverged when it was saved.
    poison(layer, variable)
    poisoned = str(tmp_path / "poisoned.keras")
    model.save(poisoned)
    message = f"'{name}': variable {variable} loaded from the file contains NaN or Inf"
    with pytest.raises(ValueError, match=message):
        keras.models.load_model(poisoned)
    weights = str(tmp_path / "poisoned.weights.h5")
    model.save_weights(weights)
    fresh = keras.Sequential([keras.Input((DIM,)), make(name)])
    with pytest.raises(ValueError, match=message):
        fresh.load_weights(weights)
    # Damaged: a valid file whose stored array was changed afterwards.
    damaged = str(tmp_path / "damaged.keras")
    _damage(good, damaged, layer, variable, _nan)
    with pytest.raises(ValueError, match=message):
        keras.models.load_model(damaged)


@pytest.mark.parametrize("name", ["hinge_forest", "hinge_fern"])
@pytest.mark.parametrize("index", [-1, DIM, 2**31 - 1])
def test_loading_feature_indices_out_of_range_names_them(name, index, tmp_path):
    layer = built(name)
    model = keras.Sequential([keras.Input((DIM,)), layer])
    good = str(tmp_path / "good.keras")
    model.save(good)

    def change(a):
        a = np.array(a)
        a.reshape(-1)[0] = index
        return a

    damaged = str(tmp_path / "damaged.keras")
    _damage(good, damaged, layer, "feature_indices", change)
    with pytest.raises(ValueError, match=f"'{name}': variable feature_indices loaded from the file must lie in"):
        keras.models.load_model(damaged)


@pytest.mark.slow
def test_good_files_still_load(tmp_path):
    for name in LAYERS:
        layer = built(name)
        model = keras.Sequential([keras.Input((DIM,)), layer])
        path = str(tmp_path / f"{name}.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
        np.testing.assert_allclose(loaded.predict(x_data(), verbose=0), model.predict(x_data(), verbose=0),
                                   rtol=1e-6, atol=1e-6)


# --- HingeBatchNormalization rejects NaN/Inf x -----------------------


@pytest.mark.parametrize("training", [False, True])
def test_hinge_batch_norm_rejects_non_finite_x_on_every_path(training):
    """NaN, Inf and -Inf in x: the eager call, a ``tf.function`` and
    ``model.predict`` fail, and the running statistics stay as they were. One
    ``tf.function`` and one model serve the three values (traced once)."""
    bn = built("hbn")
    bn(x_data(), training=True)
    mean = np.array(bn.moving_mean.numpy())
    traced = tf.function(lambda t: bn(t, training=training))
    model = keras.Sequential([keras.Input((DIM,)), bn])
    for bad in (np.nan, np.inf, -np.inf):
        x = x_data()
        x[2, 3] = bad
        with pytest.raises(ValueError, match="x contains NaN or Inf"):
            bn(x, training=training)
        with pytest.raises(tf.errors.InvalidArgumentError, match="x contains NaN or Inf"):
            traced(x)
        with pytest.raises(tf.errors.InvalidArgumentError, match="x contains NaN or Inf"):
            model.predict(x, verbose=0)
        np.testing.assert_array_equal(bn.moving_mean.numpy(), mean)
        assert int(bn.num_updates.numpy()) == 1


# --- strings, complex numbers, unknown shapes ------------------------


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("kind", ["numpy_str", "tf_string", "list_str", "complex"])
def test_non_real_inputs_are_a_type_error_naming_x(name, kind):
    layer = make(name)
    x = {
        "numpy_str": lambda: np.full((4, DIM), "a"),
        "tf_string": lambda: tf.constant(np.full((4, DIM), "a")),
        "list_str": lambda: [["a"] * DIM] * 4,
        "complex": lambda: np.ones((4, DIM), np.complex64),
    }[kind]()
    with pytest.raises(TypeError, match=f"'{name}': x must be real numbers"):
        layer(x)
    layer(x_data())  # and once built
    with pytest.raises(TypeError, match="x must be real numbers"):
        layer(x)


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("spec", [None, [None, None], [None, 3, None]])
@pytest.mark.parametrize("is_built", [False, True])
def test_unknown_rank_or_last_dimension_in_tf_function_is_a_clear_error(name, spec, is_built):
    layer = make(name)
    if is_built:
        rank3 = spec == [None, 3, None] and name != "ngt"  # NonGreedyTree takes rank 2 only
        layer(np.zeros((2, 3, DIM), "float32") if rank3 else x_data())
    fn = tf.function(lambda t: layer(t), input_signature=[tf.TensorSpec(spec, tf.float32)])
    with pytest.raises(ValueError, match=r"x must have a known (rank and a known )?last dimension"):
        fn(x_data() if spec != [None, 3, None] else np.zeros((2, 3, DIM), "float32"))


@pytest.mark.parametrize("name", ["tel", "hinge_forest", "hbn"])
def test_integer_and_bool_inputs_are_cast(name):
    layer = built(name)
    x = np.arange(4 * DIM).reshape(4, DIM) % 3
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(layer(x)), keras.ops.convert_to_numpy(layer(x.astype("float32"))), rtol=1e-6)
    layer(x.astype(bool))


@pytest.mark.parametrize("name", ["tel", "hinge_forest", "hbn"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int64", "bool"])
def test_every_real_dtype_is_accepted_symbolically(name, dtype):
    """bfloat16 is NumPy kind "V" (ml_dtypes): still real numbers."""
    inputs = keras.Input((DIM,), dtype=dtype)
    assert make(name)(inputs).shape[0] is None


BAD_NUMBERS = [None, 0, -1, math.nan, math.inf, "3", 2.5, True]


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize(
    "factory, argument, floating",
    [
        (lambda **k: TreeEnsembleLayer(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "num_trees", False),
        (lambda **k: TreeEnsembleLayer(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "max_depth", False),
        (lambda **k: TreeEnsembleLayer(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "units", False),
        (lambda **k: TreeEnsembleLayer(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "transition_width", True),
        (lambda **k: HingeForest(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "num_trees", False),
        (lambda **k: HingeForest(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "max_depth", False),
        (lambda **k: HingeForest(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "units", False),
        (lambda **k: HingeFern(**{"num_trees": 2, "max_depth": 2, "units": 1, **k}), "features_per_tree", False),
        (lambda **k: HingeBatchNormalization(**k), "epsilon", True),
        (lambda **k: HingeBatchNormalization(**k), "momentum", True),
        (lambda **k: NonGreedyTree(**{"max_depth": 2, "num_classes": 2, **k}), "max_depth", False),
        (lambda **k: NonGreedyTree(**{"max_depth": 2, "num_classes": 2, **k}), "num_classes", False),
        (lambda **k: NonGreedyTree(**{"max_depth": 2, "units": 1, **k}), "units", False),
        (lambda **k: NonGreedyTree(**{"max_depth": 2, "num_classes": 2, **k}), "nu", True),
        (lambda **k: per_split_features((4,), **{"max_depth": 1, **k}), "max_depth", False),
        (lambda **k: per_split_features((4,), **{"max_depth": 1, **k}), "num_trees", False),
        (lambda **k: split_cnn((8, 8), **{"padding": "same", **k}), "kernel_size", False),
        (lambda **k: split_cnn((8, 8), **{"padding": "same", **k}), "hidden", False),
    ],
)
def test_numeric_constructor_arguments_are_checked(factory, argument, floating, value):
    if floating and value == 2.5:
        return  # a valid float
    if argument == "momentum" and value == 0:
        return  # momentum 0 is valid (no running average)
    if argument in ("num_classes", "units", "features_per_tree") and value is None:
        return  # None means "the other task", or "every feature"
    with pytest.raises((TypeError, ValueError), match=argument):
        factory(**{argument: value})


@pytest.mark.parametrize(
    "factory",
    [
        lambda seed: HingeForest(num_trees=2, max_depth=2, units=1, seed=seed),
        lambda seed: NonGreedyTree(max_depth=2, num_classes=2, seed=seed),
    ],
)
@pytest.mark.parametrize("seed", ["a", 1.5, True, -1, math.nan])
def test_seed_is_checked_at_construction(factory, seed):
    with pytest.raises((TypeError, ValueError), match="seed"):
        factory(seed)


def test_per_split_features_shapes_are_checked():
    with pytest.raises((TypeError, ValueError), match=r"input_shape\[1\]"):
        per_split_features((4, 2.5), max_depth=1)
    with pytest.raises(ValueError, match="padding"):
        split_cnn((8, 8), padding="full")


# --- labels of NonGreedyTree -----------------------------------------


def _ngt():
    layer = make("ngt")
    layer.compile(keras.optimizers.SGD(0.1))
    return layer


@pytest.mark.slow
def test_non_greedy_tree_rejects_fractional_labels_and_accepts_whole_floats():
    x = x_data()
    y = (np.arange(16) % 3).astype("float64")
    _ngt().fit(x, y, verbose=0)  # whole-number floats are class ids
    y[4] = 1.5
    with pytest.raises(ValueError, match="y .*whole numbers"):
        _ngt().fit(x, y, verbose=0)
    with pytest.raises(ValueError, match="y .*whole numbers"):
        _ngt().evaluate(x, y, verbose=0)
    data = tf.data.Dataset.from_tensor_slices((x, y.astype("float32"))).batch(8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="y .*whole numbers"):
        _ngt().fit(data, verbose=0)
    layer = built("ngt")
    with pytest.raises(ValueError, match="y .*whole numbers"):
        layer.compute_loss(x, y)
    with pytest.raises(ValueError, match="y .*whole numbers"):
        layer.loss_augmented_inference(x, y)


@pytest.mark.slow
@pytest.mark.parametrize("label", [2**32 + 1, 2**31, 3, -1])
def test_non_greedy_tree_rejects_labels_out_of_range_never_wrapped(label):
    x = x_data()
    y = (np.arange(16) % 3).astype("int64")
    y[5] = label
    with pytest.raises(ValueError, match=r"y .*must lie in \[0, 3\)"):
        _ngt().fit(x, y, verbose=0)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    # In a graph the loss-augmented kernel may report an int32 label first (the
    # cast of 2**32 + 1 wraps; only the check made before the cast sees it).
    in_graph = r"(y .*must lie in|labels\[\d+\] = -?\d+ is outside) \[0, 3\)"
    if label > 2**31:
        in_graph = r"y .*must lie in \[0, 3\)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=in_graph):
        _ngt().fit(data, verbose=0)
    with pytest.raises(ValueError, match=r"y .*must lie in \[0, 3\)"):
        built("ngt").compute_loss(x, tf.constant(y))


def test_non_greedy_tree_string_data_is_a_type_error_naming_it():
    x = x_data()
    with pytest.raises(TypeError, match="y"):
        _ngt().fit(x, np.array(["a", "b"] * 8), verbose=0)
    with pytest.raises(TypeError, match="x must be real numbers"):
        _ngt().fit(np.full((16, DIM), "a"), np.arange(16) % 3, verbose=0)
    regression = NonGreedyTree(max_depth=2, units=1, name="reg")
    regression.compile(keras.optimizers.SGD(0.1))
    with pytest.raises(TypeError, match="y"):
        regression.fit(x, np.array([["a"]] * 16), verbose=0)


# --- rank semantics of keras.layers.Dense ----------------------------


@pytest.mark.parametrize("name", ["tel", "hinge_forest", "hinge_fern"])
def test_leading_dimensions_are_kept_like_dense(name):
    layer = built(name)
    x = np.random.default_rng(1).normal(size=(2, 3, 4, DIM)).astype("float32")
    out = keras.ops.convert_to_numpy(layer(x))
    rows = keras.ops.convert_to_numpy(layer(x.reshape(-1, DIM)))
    assert out.shape[:3] == (2, 3, 4)
    np.testing.assert_allclose(out.reshape(rows.shape), rows, rtol=1e-6, atol=1e-6)
    model = keras.Sequential([keras.Input((3, 4, DIM)), layer])
    assert model.output_shape[:4] == (None, 3, 4, out.shape[3])


@pytest.mark.parametrize("shape", [(2, 4, DIM), (DIM,), (2, 1, 1, DIM)])
def test_non_greedy_tree_rejects_rank_other_than_two(shape):
    x = np.zeros(shape, "float32")
    message = "x must have rank 2"
    with pytest.raises(ValueError, match=message):
        make("ngt")(x)  # unbuilt: build rejects it
    layer = built("ngt")
    with pytest.raises(ValueError, match=message):
        layer(x)
    with pytest.raises(ValueError, match=message):
        layer.predict(x, verbose=0)
    with pytest.raises(ValueError, match=message):
        layer.route(x)
    with pytest.raises(ValueError, match=message):
        _ngt().fit(x, np.zeros(shape[0], "int32"), verbose=0)
