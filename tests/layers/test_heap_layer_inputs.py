"""What the heap-tree layers (EndToEndTree, EndToEndForest, ConvexPolytopeTree)
accept, and what they reject with an error naming the culprit, on every path:

- NaN/Inf in ``x`` on the probabilistic paths too (training calls, the soft
  posterior, EM statistics, leaf probabilities), eagerly, inside
  ``tf.function`` (``model.fit``/``predict``) and inside ``jax.jit``
  (tests/backends/test_checks_inside_jax_jit.py, in the JAX run);
- NaN/Inf in a weight (assigned, or loaded from a ``.keras`` file or
  ``load_weights``), naming the layer and the variable;
- ``node_state`` values outside the enum or a split on the last level, at
  call time and when loaded;
- inputs with leading axes keep them (``keras.layers.Dense``), never become
  extra samples; paths that need one row per label refuse them clearly;
- strings, unknown rank and unknown feature dimensions.

The tests run on any backend (eager calls raise ``ValueError``/``TypeError``,
compiled ones the backend's runtime error carrying the same message).
"""

import os
import zipfile

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.callbacks import GreedyLevelGrowth
from keras_trees.layers import ConvexPolytopeTree, EndToEndForest, EndToEndTree
from keras_trees.ops import _library

BACKEND = keras.backend.backend()
DIM, CLASSES = 4, 3

FAMILIES = {
    "tree": lambda **kw: EndToEndTree(max_depth=3, num_classes=CLASSES, seed=0, **kw),
    "forest": lambda **kw: EndToEndForest(3, max_depth=3, num_classes=CLASSES, seed=0, **kw),
    "polytope": lambda **kw: ConvexPolytopeTree(max_depth=3, num_experts=3, num_classes=CLASSES, seed=0, **kw),
}
# The big float parameter of each family (the splits' weights) and a small one.
KERNEL = {"tree": "split_kernel", "forest": "split_kernel", "polytope": "expert_kernel"}
OTHERS = {"tree": ("split_bias", "gamma", "leaf_values", "leaf_logits"),
          "forest": ("split_bias", "gamma", "leaf_values"),
          "polytope": ("expert_bias", "log_expert_weight", "p0_logit", "steepness", "threshold", "leaf_values")}


def data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, DIM)).astype("float32")
    y = rng.integers(0, CLASSES, n).astype("int32")
    return x, y


def built(family, **kwargs):
    """A layer in a compiled model, with splits everywhere (every path routes)."""
    layer = FAMILIES[family](**kwargs)
    model = keras.Sequential([keras.Input((DIM,)), layer])
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    if family == "polytope":
        state = topology.perfect(1, layer.max_depth)
        layer.node_state.assign(state)
    return layer, model


def variable(layer, name):
    return next(v for v in layer.weights if v.name == name)


def assign_nan(v, value=np.nan):
    bad = np.array(keras.ops.convert_to_numpy(v))
    bad.reshape(-1)[0] = value
    v.assign(bad)


def raises_with(match, fn):
    """``fn()`` fails with ``match`` in its message: a ValueError/TypeError
    eagerly, the backend's runtime error inside a compiled function."""
    with pytest.raises(Exception) as info:
        out = fn()
        keras.ops.convert_to_numpy(out)  # an asynchronous failure shows here
    assert match in str(info.value), str(info.value)[-2000:]
    assert isinstance(info.value, (ValueError, TypeError)) or type(info.value).__name__ in (
        "InvalidArgumentError", "JaxRuntimeError"), type(info.value)
    return info.value


def probabilistic_paths(family, layer, x, y):
    """Every way to call the layer on ``x`` (name -> function)."""
    paths = {
        "inference": lambda: layer(x),
        "training": lambda: layer(x, training=True),
        "route": lambda: layer.route(x),
    }
    if family == "polytope":
        paths["leaf_log_probabilities"] = lambda: layer.leaf_log_probabilities(x)
        paths["split_values"] = lambda: layer.split_values(x)
        paths["leaf_statistics"] = lambda: layer.leaf_statistics(x, np.ones((len(x), 1), "float32"))
    else:
        paths["posterior"] = lambda: layer.posterior(x)
        paths["em_statistics"] = lambda: layer.em_statistics(x, y)
        paths["em_statistics (growth)"] = lambda: layer.em_statistics(x, y, branch="growth")
    return paths


# ------------------------------------------------------------------ NaN/Inf in x
@pytest.mark.parametrize("prune_threshold", [0.0, 1e-4], ids=["dense", "pruned"])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_in_x_is_rejected_on_every_eager_path(family, prune_threshold, bad):
    layer, _ = built(family, prune_threshold=prune_threshold)
    x, y = data()
    x[3, 1] = bad
    for name, fn in probabilistic_paths(family, layer, x, y).items():
        error = raises_with("x contains NaN or Inf", fn)
        assert isinstance(error, ValueError), (name, type(error))
    if family != "polytope":  # the sparse path of deep heaps, and the reference ops
        layer.DENSE_POSITIONS = 0
        raises_with("x contains NaN or Inf", lambda: layer.posterior(x))
        with _library.reference_only():
            raises_with("x contains NaN or Inf", lambda: layer(x, training=True))


@pytest.mark.slow
@pytest.mark.parametrize("prune_threshold", [0.0, 1e-4], ids=["dense", "pruned"])
@pytest.mark.parametrize("family", FAMILIES)
def test_nan_in_x_is_rejected_inside_compiled_fit_and_predict(family, prune_threshold):
    """``model.predict`` and ``model.fit`` (their ``tf.function``/``jax.jit``
    steps) reject NaN in x."""
    layer, model = built(family, prune_threshold=prune_threshold)
    x, y = data()
    x[5, 0] = np.nan
    # predict first: a failed predict leaves the model as it was (a failed fit may not)
    raises_with("x contains NaN or Inf", lambda: model.predict(x, verbose=0))
    raises_with("x contains NaN or Inf", lambda: model.fit(x, y, epochs=1, batch_size=8, verbose=0))


@pytest.mark.slow
def test_growth_model_rejects_nan_x():
    layer, model = built("forest", prune_threshold=0.0)
    layer.node_state.assign(topology.stump(3, layer.max_depth))
    candidate = np.zeros(layer.candidate.shape, "int32")
    candidate[:, 1:3] = 1  # stumps being trained at the root's children
    layer.candidate.assign(candidate)
    layer.growing.assign(1)
    x, y = data()
    x[0, 0] = np.inf
    raises_with("x contains NaN or Inf", lambda: layer(x, training=True))
    with _library.reference_only():  # the keras.ops path of the growth model
        raises_with("x contains NaN or Inf", lambda: layer(x, training=True))
        raises_with("x contains NaN or Inf", lambda: layer.em_statistics(x, y))
    raises_with("x contains NaN or Inf", lambda: model.fit(x, y, epochs=1, batch_size=8, verbose=0))


# ------------------------------------------------------------------ NaN/Inf in weights
@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_nan_weights_are_rejected_naming_the_variable(family):
    """A NaN or -Inf in each float variable fails predict (compiled), the eager
    inference, training and route calls (and fit, for the kernel), naming the
    layer and the variable. One model per family: its compiled predict and
    train steps are traced once and read each poisoned value; every variable
    (the optimizer's included) is restored after each case."""
    x, y = data()
    layer, model = built(family)
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)  # builds the optimizer's variables
    state = model.trainable_variables + model.non_trainable_variables + model.optimizer.variables
    saved = [np.array(keras.ops.convert_to_numpy(v)) for v in state]
    for name, value in [(KERNEL[family], np.nan), (KERNEL[family], -np.inf)] + [(n, np.nan) for n in OTHERS[family]]:
        for v, original in zip(state, saved):
            v.assign(original)
        assign_nan(variable(layer, name), value)
        # (inside tf.function the message quotes the layer's name with escapes)
        expected = f"variable {name} contains NaN or Inf"
        error = raises_with(expected, lambda: model.predict(x, verbose=0))
        assert f"{type(layer).__name__} " in str(error) and layer.name in str(error)
        raises_with(expected, lambda: layer(x))
        raises_with(expected, lambda: layer(x, training=True))
        raises_with(expected, lambda: layer.route(x))
        if name == KERNEL[family]:
            raises_with(expected, lambda: model.fit(x, y, epochs=1, batch_size=8, verbose=0))


@pytest.mark.slow
def test_polytope_training_steps_reject_a_nan_parameter():
    """fit_greedy's stump steps, refine's tree steps and the leaf update."""
    x, y = data(200)
    tree = ConvexPolytopeTree(max_depth=2, num_experts=3, num_classes=CLASSES, seed=0)
    tree.fit_greedy(x, y, epochs=1, batch_size=64, verbose=0)
    assert tree.num_splits() > 0
    assign_nan(tree.expert_bias)  # the root's
    raises_with("variable expert_bias contains NaN or Inf", lambda: tree.set_leaves_from_data(x, y))
    raises_with("variable expert_bias contains NaN or Inf", lambda: tree.refine(x, y, epochs=1, verbose=0))
    fresh = ConvexPolytopeTree(max_depth=2, num_experts=3, num_classes=CLASSES, seed=0)
    fresh.build((None, DIM))
    weights = np.array(keras.ops.convert_to_numpy(fresh.log_expert_weight))
    weights[0, -1, 0] = np.nan  # a node growth has not reached yet
    fresh.log_expert_weight.assign(weights)
    raises_with("variable log_expert_weight contains NaN or Inf", lambda: fresh.fit_greedy(x, y, epochs=1, verbose=0))


@pytest.mark.parametrize("family", FAMILIES)
def test_files_with_nan_weights_are_rejected_when_loaded(family, tmp_path):
    layer, model = built(family)
    name = KERNEL[family]
    path = str(tmp_path / "ok.keras")
    model.save(path)
    model.save_weights(str(tmp_path / "ok.weights.h5"))
    keras.saving.load_model(path)  # a sound file loads
    assign_nan(variable(layer, name))
    model.save(str(tmp_path / "nan.keras"))  # saved after training diverged
    model.save_weights(str(tmp_path / "nan.weights.h5"))
    expected = f"{type(layer).__name__} {layer.name!r}: variable {name} loaded from the file contains NaN or Inf"
    with pytest.raises(ValueError, match=expected):
        keras.saving.load_model(str(tmp_path / "nan.keras"))
    fresh, fresh_model = built(family, name=layer.name)
    with pytest.raises(ValueError, match=expected):
        fresh_model.load_weights(str(tmp_path / "nan.weights.h5"))


def test_a_damaged_keras_file_is_rejected_naming_layer_and_variable(tmp_path):
    """NaN written into the weights inside a saved ``.keras`` zip (bit rot, a bad edit)."""
    h5py = pytest.importorskip("h5py")
    layer, model = built("forest")
    path = str(tmp_path / "model.keras")
    model.save(path)
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path / "unzipped")
    with h5py.File(tmp_path / "unzipped" / "model.weights.h5", "r+") as f:
        key = "layers/end_to_end_forest/vars/1"  # the layer's second variable: split_bias
        assert f[key].shape == tuple(layer.split_bias.shape)
        data_ = f[key][...]
        data_.reshape(-1)[0] = np.nan
        f[key][...] = data_
    damaged = str(tmp_path / "damaged.keras")
    with zipfile.ZipFile(damaged, "w") as z:
        for root, _, files in os.walk(tmp_path / "unzipped"):
            for file in files:
                full = os.path.join(root, file)
                z.write(full, os.path.relpath(full, tmp_path / "unzipped"))
    with pytest.raises(ValueError, match=f"EndToEndForest {layer.name!r}: variable split_bias loaded from the file"):
        keras.saving.load_model(damaged)


# ------------------------------------------------------------------ node_state
def broken_states(layer):
    state = np.array(keras.ops.convert_to_numpy(layer.node_state))
    seven = state.copy()
    seven[0, 0] = 7
    negative = state.copy()
    negative[0, 1] = -1
    last_level = topology.perfect(state.shape[0], layer.max_depth)
    last_level[0, -1] = topology.SPLIT
    return {"7": seven, "-1": negative, "split on the last level": last_level}


@pytest.mark.parametrize("family", FAMILIES)
def test_node_state_outside_the_enum_is_rejected_at_call_time(family):
    x, y = data()
    layer, _ = built(family)
    for state in broken_states(layer).values():
        layer, model = built(family)
        layer.node_state.assign(state)
        raises_with("node_state is not a valid topology", lambda: model.predict(x, verbose=0))
        raises_with("node_state is not a valid topology", lambda: layer(x, training=True))
        raises_with("node_state is not a valid topology", lambda: layer.route(x))


@pytest.mark.parametrize("family", FAMILIES)
def test_node_state_outside_the_enum_is_rejected_when_loaded(family, tmp_path):
    layer, model = built(family)
    layer.node_state.assign(broken_states(layer)["7"])
    model.save(str(tmp_path / "bad.keras"))
    with pytest.raises(ValueError, match=f"{layer.name!r}: variable node_state loaded from the file is not a valid"):
        keras.saving.load_model(str(tmp_path / "bad.keras"))


# ------------------------------------------------------------------ leading axes
@pytest.mark.parametrize("family", FAMILIES)
def test_leading_axes_are_kept_like_dense(family):
    """Built on 4 features, called on ``(2, 5, 4)``: ``(2, 5, classes)``, the
    per-row results; never 10 samples in a ``(10, classes)`` output."""
    layer, model = built(family)
    x, y = data(10)
    x3 = x.reshape(2, 5, DIM)
    for training in (False, True):
        out = np.asarray(keras.ops.convert_to_numpy(layer(x3, training=training)))
        assert out.shape == (2, 5, CLASSES)
        flat = np.asarray(keras.ops.convert_to_numpy(layer(x, training=training)))
        np.testing.assert_allclose(out.reshape(10, CLASSES), flat, rtol=1e-5, atol=1e-6)
    assert tuple(layer.compute_output_shape((2, 5, DIM))) == (2, 5, CLASSES)
    assert tuple(layer.compute_output_shape((None, 7, 5, DIM))) == (None, 7, 5, CLASSES)
    node = np.asarray(keras.ops.convert_to_numpy(layer.route(x3)))
    assert node.shape == (2, 5, layer.num_trees)
    np.testing.assert_array_equal(node.reshape(10, -1), keras.ops.convert_to_numpy(layer.route(x)))
    if family == "polytope":
        assert tuple(layer.leaf_log_probabilities(x3).shape) == (2, 5, layer.num_positions)
        assert tuple(layer.split_values(x3).shape) == (2, 5, layer.num_internal)
    else:
        assert tuple(layer.posterior(x3).shape) == (2, 5, CLASSES)
        # EM statistics: labels with the same leading axes count the same samples.
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.em_statistics(x3, y.reshape(2, 5))),
                                   keras.ops.convert_to_numpy(layer.em_statistics(x, y)), rtol=1e-5, atol=1e-6)
        with pytest.raises(ValueError, match="labels must hold one value per sample of x"):
            layer.em_statistics(x3, y[:2])
    assert layer.split_evaluations(x3) == pytest.approx(layer.split_evaluations(x))


@pytest.mark.parametrize("family", FAMILIES)
def test_leading_axes_in_a_functional_model(family):
    """A tree after a Dense on sequences: one prediction per position."""
    inputs = keras.Input((6, DIM))
    if family == "polytope":  # Dense semantics from the build on: the last axis
        outputs = FAMILIES[family]()(keras.layers.Dense(DIM)(inputs))
    else:  # end-to-end trees read a whole sample (images) of their build shape
        tree = FAMILIES[family]()
        tree.build((None, DIM))
        outputs = tree(keras.layers.Dense(DIM)(inputs))
    model = keras.Model(inputs, outputs)
    assert tuple(model.output.shape) == (None, 6, CLASSES)
    out = model.predict(np.zeros((3, 6, DIM), "float32"), verbose=0)
    assert out.shape == (3, 6, CLASSES)


def test_end_to_end_trees_built_on_images_read_the_whole_image():
    """Image inputs (``patch_size``, ``SpatialLaplacian``) are one sample each:
    ``(batch, 8, 8)`` gives ``(batch, classes)``; axes in front stay."""
    tree = EndToEndForest(2, max_depth=2, num_classes=CLASSES, patch_size=3, seed=0)
    model = keras.Sequential([keras.Input((8, 8)), tree])
    images = np.random.default_rng(0).normal(size=(6, 8, 8)).astype("float32")
    assert model.predict(images, verbose=0).shape == (6, CLASSES)
    grouped = np.asarray(keras.ops.convert_to_numpy(tree(images.reshape(2, 3, 8, 8))))
    assert grouped.shape == (2, 3, CLASSES)
    np.testing.assert_allclose(grouped.reshape(6, CLASSES), model.predict(images, verbose=0), rtol=1e-5)
    with pytest.raises(ValueError):  # fewer axes than one sample
        tree(images[0])


def test_paths_that_need_one_row_per_label_refuse_leading_axes():
    x, y = data(40)
    x3 = np.repeat(x[:, None, :], 3, axis=1)  # (40, 3, 4)
    polytope = ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=CLASSES, seed=0)
    polytope.build((None, DIM))
    for fit in (polytope.fit_greedy, polytope.set_leaves_from_data):
        with pytest.raises(ValueError, match=r"x must have shape \(n, 4\): one row of features per label"):
            fit(x3, y)
    # Growth inside fit: the tree receives (batch, 3, 4) from a Dense over a sequence.
    tree = EndToEndTree(max_depth=2, num_classes=CLASSES, seed=0)
    tree.build((None, DIM))
    inputs = keras.Input((3, DIM))
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling1D()(tree(inputs)))
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    with pytest.raises(ValueError, match="needs one row of features per target"):
        model.fit(x3, y, epochs=1, verbose=0, callbacks=[GreedyLevelGrowth(x3, y, epochs_per_level=1)])


# ------------------------------------------------------------------ strings and unknown shapes
@pytest.mark.parametrize("family", FAMILIES)
def test_string_inputs_are_a_type_error_naming_x(family):
    layer, _ = built(family)
    strings = np.array([["a"] * DIM] * 2)
    for fn in (lambda: layer(strings), lambda: layer(strings, training=True), lambda: layer.route(strings)):
        with pytest.raises(TypeError, match="x must be numeric"):
            fn()


@pytest.mark.skipif(BACKEND != "tensorflow", reason="unknown shapes exist inside tf.function only")
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("built_first", [False, True])
def test_unknown_rank_or_feature_dimension_in_tf_function(family, built_first):
    import tensorflow as tf

    x, _ = data()
    layer = FAMILIES[family]()
    if built_first:
        layer(x)
    for spec, match in ((tf.TensorSpec(None), "x must have a known rank"),
                        (tf.TensorSpec([None, None]), "x must have known feature dimensions")):
        fn = tf.function(lambda a: layer(a), input_signature=[spec])
        with pytest.raises(ValueError, match=match):
            fn(x)
    if built_first:  # a known feature dimension with an unknown batch is fine
        fn = tf.function(lambda a: layer(a), input_signature=[tf.TensorSpec([None, DIM])])
        np.testing.assert_allclose(fn(x).numpy(), keras.ops.convert_to_numpy(layer(x)), rtol=1e-6)
