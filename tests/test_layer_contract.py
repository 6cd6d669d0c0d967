"""The contract every public layer and model of keras-trees keeps, in the spirit
of Keras' ``run_layer_test``: config round trip, build and call shapes, a
training step, ``.keras`` round trip (also in a fresh process) and dtype
policies.

A new family joins by adding one ``Case`` to ``CASES``; ``test_every_public_layer
_has_a_case`` fails until it does.
"""

import dataclasses
import json
import warnings
from typing import Any, Callable

import keras
import numpy as np
import pytest

from keras_trees import api_export, layers, topology
from keras_trees.layers._heap import HeapTreeLayer
from keras_trees.losses import GammaProcessPrior
from keras_trees.regularizers import SpatialLaplacian
from tests.conftest import run_python

SAMPLES = 32


def classes(num_classes):
    """Balanced integer labels, linearly separable in the first two features."""

    def labels(x):
        score = x.reshape(len(x), -1)[:, 0] + 0.5 * x.reshape(len(x), -1)[:, 1]
        edges = np.quantile(score, np.linspace(0, 1, num_classes + 1)[1:-1])
        return np.digitize(score, edges).astype("int32")

    return labels


def values(units):
    return lambda x: np.tanh(x.reshape(len(x), -1)[:, :1] + np.arange(units, dtype="float32"))


def fit_greedy(layer, x, y):  # grows the tree: a root leaf alone has no gradient
    layer.fit_greedy(x, y, epochs=2, batch_size=SAMPLES)


@dataclasses.dataclass
class Case:
    cls: type
    kwargs: dict  # small, and away from the defaults where that exercises the config
    input_shape: tuple  # of one sample
    target: Callable  # x -> y
    loss: Any = None  # None: the model trains on its own objective (compile without loss)
    optimizer: Callable = lambda: keras.optimizers.Adam(0.05)
    prepare: Callable = None  # (layer, x, y) before compile and fit, for families that need it

    @property
    def id(self):
        return self.cls.__name__

    def make(self, **overrides):
        return self.cls(**{**self.kwargs, **overrides})


CASES = [
    Case(layers.TreeEnsembleLayer,
         dict(num_trees=3, max_depth=2, units=2, transition_width=0.5, use_bias=False, node_regularizer=keras.regularizers.L2(1e-3),
              leaf_constraint=keras.constraints.MaxNorm(2.0)),
         (5,), values(2), loss="mse"),
    Case(layers.EndToEndTree,
         dict(max_depth=2, num_classes=3, split_regularizer=SpatialLaplacian(0.01, (2, 2)), seed=0),
         (2, 2), classes(3), loss=keras.losses.SparseCategoricalCrossentropy()),
    Case(layers.EndToEndForest,
         dict(num_trees=2, max_depth=2, num_classes=3, features_per_split=2, seed=1),
         (4,), classes(3), loss=keras.losses.SparseCategoricalCrossentropy()),
    Case(layers.HingeForest,
         dict(num_trees=3, max_depth=2, units=2, reduction="sum", leaf_regularizer=keras.regularizers.L2(1e-3), seed=0),
         (5,), values(2), loss="mse"),
    Case(layers.HingeFern,
         dict(num_trees=3, max_depth=2, units=2, reduction="mean", features_per_tree=3,
              threshold_constraint=keras.constraints.MaxNorm(3.0), seed=0),
         (5,), values(2), loss="mse"),
    Case(layers.HingeBatchNormalization, dict(axis=1, momentum=0.9, epsilon=1e-3), (3,), values(3), loss="mse"),
    Case(layers.ConvexPolytopeTree,
         dict(max_depth=2, num_experts=2, num_classes=2, prior=GammaProcessPrior(gamma0=2.0), steepness=2.0,
              seed=0),
         (2,), classes(2), loss=keras.losses.SparseCategoricalCrossentropy(), prepare=fit_greedy),
    Case(layers.NonGreedyTree, dict(max_depth=2, num_classes=3, nu=2.0, seed=0), (4,), classes(3),
         optimizer=lambda: keras.optimizers.SGD(0.05)),
]
CASE_IDS = [case.id for case in CASES]


def sample(case):
    x = np.random.default_rng(0).normal(size=(SAMPLES, *case.input_shape)).astype("float32")
    return x, case.target(x)


def model_of(layer, case):
    """The layer in a model (a model family is its own model)."""
    if isinstance(layer, keras.Model):
        layer.build((None, *case.input_shape))
        return layer
    return keras.Sequential([keras.Input(case.input_shape), layer])


def state(layer):
    """What training moves: the trainable weights (all weights of a layer that has none)."""
    return [np.array(keras.ops.convert_to_numpy(v)) for v in (layer.trainable_weights or layer.weights)]


def dtype_of(tensor):
    return keras.backend.standardize_dtype(tensor.dtype)


def test_every_public_layer_has_a_case():
    public = {name for name, obj in api_export.exports("keras_trees.layers").items()
              if isinstance(obj, type) and issubclass(obj, keras.layers.Layer)}
    assert public == set(CASE_IDS)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_config_round_trip(case):
    layer = case.make()
    config = layer.get_config()
    for key, value in case.kwargs.items():  # every argument the case sets is kept
        assert key in config, f"get_config() drops {key!r}"
        if isinstance(value, (bool, int, float, str)):
            assert config[key] == value, key
        else:
            assert config[key] is not None, key
    assert case.cls.from_config(config).get_config() == config
    # Through the registered name, as a .keras file stores it.
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(clone) is case.cls and clone.get_config() == config


# A bad value of each layer's config and the start of the constructor's message.
BAD_CONFIG = {
    "TreeEnsembleLayer": ("transition_width", -1.0, "transition_width must be a finite number > 0"),
    "EndToEndTree": ("steepness", -1.0, "steepness must be a finite number > 0"),
    "EndToEndForest": ("steepness", 0.0, "steepness must be a finite number > 0"),
    "HingeForest": ("max_depth", 0, "max_depth must be"),
    "HingeFern": ("max_depth", 0, "max_depth must be"),
    "HingeBatchNormalization": ("momentum", 1.5, "momentum must be"),
    "ConvexPolytopeTree": ("steepness", -1.0, "steepness must be a finite number > 0"),
    "NonGreedyTree": ("nu", -1.0, "nu must be a finite number > 0"),
}


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_bad_config_value_gets_the_constructors_message(case):
    """A corrupt or hand-edited config fails as the constructor would, naming
    the argument (not Keras' TypeError that dumps the whole config first)."""
    key, value, message = BAD_CONFIG[case.id]
    config = dict(case.make().get_config(), **{key: value})
    with pytest.raises(ValueError, match="^" + message):
        case.cls.from_config(config)
    with pytest.raises(ValueError, match="^" + message):
        keras.saving.deserialize_keras_object({"class_name": case.cls.__name__, "module": case.cls.__module__,
                                               "registered_name": keras.saving.get_registered_name(case.cls),
                                               "config": config})


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_build_and_call_shapes(case):
    x, _ = sample(case)
    layer = case.make()
    expected = tuple(layer.compute_output_shape((None, *case.input_shape)))
    symbolic = layer(keras.Input(case.input_shape))
    assert tuple(symbolic.shape) == expected
    assert layer.built
    concrete = layer(x)
    assert tuple(concrete.shape) == (SAMPLES, *expected[1:])
    assert dtype_of(concrete) == dtype_of(symbolic) == layer.compute_dtype == "float32"
    assert tuple(layer.compute_output_shape(x.shape)) == tuple(concrete.shape)


@dataclasses.dataclass
class Trained:
    model: Any
    layer: Any
    x: np.ndarray
    loss: list
    before: list
    after: list
    prediction: np.ndarray


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("contract")


@pytest.fixture(scope="module")
def trained(workdir):
    """``trained(case)``: the case's model after a short fit, saved as
    ``<id>.keras`` with its inputs and predictions (trained once per module)."""
    done = {}

    def train(case):
        if case.id not in done:
            x, y = sample(case)
            layer = case.make()
            model = model_of(layer, case)
            if case.prepare is not None:
                case.prepare(layer, x, y)
            model.compile(case.optimizer(), case.loss)
            before = state(layer)
            history = model.fit(x, y, batch_size=SAMPLES // 2, epochs=2, verbose=0)
            prediction = model.predict(x, verbose=0)
            model.save(workdir / f"{case.id}.keras")
            np.save(workdir / f"{case.id}_x.npy", x)
            np.save(workdir / f"{case.id}_prediction.npy", prediction)
            done[case.id] = Trained(model, layer, x, history.history["loss"], before, state(layer), prediction)
        return done[case.id]

    return train


@pytest.mark.filterwarnings("ignore:The model does not have any trainable weights")  # batch norm
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_training_step(case, trained):
    run = trained(case)
    assert np.all(np.isfinite(run.loss)), run.loss
    assert any(not np.array_equal(a, b) for a, b in zip(run.before, run.after)), "fit changed no weight"
    assert np.all(np.isfinite(run.prediction))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_keras_file_round_trip(case, trained, workdir):
    run = trained(case)
    loaded = keras.saving.load_model(workdir / f"{case.id}.keras")
    assert type(loaded) is type(run.model)
    np.testing.assert_array_equal(loaded.predict(run.x, verbose=0), run.prediction)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_to_forest_predicts_like_the_layer(case, trained):
    """Every tree layer describes itself as a ``keras_trees.Forest``; where its
    inference output is the reached leaves' values (``leaf_prediction``), the
    forest predicts exactly that."""
    run = trained(case)
    if not hasattr(run.layer, "to_forest"):
        assert case.cls is layers.HingeBatchNormalization  # the only public layer that is not a tree
        return
    forest = run.layer.to_forest()
    features = np.asarray(keras.ops.convert_to_numpy(run.layer.forest_features(run.x)))
    leaves = forest.route(features)
    assert leaves.shape == (len(run.x), forest.num_trees)
    assert np.all(forest.node_state[np.arange(forest.num_trees), leaves] == topology.LEAF)
    predicted = forest.predict(features)
    assert predicted.shape[0] == len(run.x)
    if forest.leaf_prediction:
        np.testing.assert_allclose(predicted.reshape(run.prediction.shape), run.prediction, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_keras_files_load_in_a_fresh_process(trained, workdir):
    for case in CASES:
        trained(case)
    out = run_python(
        f"""
        import json, numpy as np, keras
        import keras_trees  # registers the serializable classes
        results = {{}}
        for name in {CASE_IDS!r}:
            try:
                model = keras.saving.load_model(name + ".keras")
                prediction = model.predict(np.load(name + "_x.npy"), verbose=0)
                np.testing.assert_array_equal(prediction, np.load(name + "_prediction.npy"))
                results[name] = "ok"
            except Exception as e:
                results[name] = repr(e)
        print(json.dumps(results))
        """,
        cwd=workdir,
    )
    results = json.loads(out.strip().splitlines()[-1])
    assert results == {name: "ok" for name in CASE_IDS}


@pytest.mark.parametrize("policy", ["float64", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_dtype_policy(case, policy):
    x, _ = sample(case)
    layer = case.make(dtype=policy)
    compute = keras.DTypePolicy(policy).compute_dtype
    symbolic = layer(keras.Input(case.input_shape))
    out = layer(x)
    assert layer.compute_dtype == compute
    assert dtype_of(out) == dtype_of(symbolic) == compute
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32"))))
    variable = keras.DTypePolicy(policy).variable_dtype
    assert all(dtype_of(v) == variable for v in layer.weights if "float" in dtype_of(v))
    # The policy survives the config round trip.
    assert case.cls.from_config(layer.get_config()).dtype_policy.name == policy


# ---------------------------------------------------------------- heap layers
HEAP_CASES = [case for case in CASES if issubclass(case.cls, HeapTreeLayer)]
NUM_LEAVES_PROPERTY = (layers.TreeEnsembleLayer, layers.HingeForest, layers.HingeFern, layers.NonGreedyTree)


def test_heap_layers_share_the_base_class():
    assert {case.cls for case in HEAP_CASES} == {
        layers.EndToEndTree, layers.EndToEndForest, layers.ConvexPolytopeTree, layers.NonGreedyTree}


@pytest.mark.parametrize("case", HEAP_CASES, ids=[case.id for case in HEAP_CASES])
def test_heap_layer_route_is_the_forest_apply(case, trained):
    """``route`` of every heap layer: ``(rows, num_trees)`` int32 heap positions
    of the reached leaves, the same as ``to_forest().apply`` of its features."""
    run = trained(case)
    layer, forest = run.layer, run.layer.to_forest()
    node = keras.ops.convert_to_numpy(layer.route(run.x))
    assert node.shape == (len(run.x), forest.num_trees) and dtype_of(layer.route(run.x)) == "int32"
    np.testing.assert_array_equal(node, forest.apply(layer.forest_features(run.x)))
    state = keras.ops.convert_to_numpy(layer.node_state)
    assert np.all(state[np.arange(forest.num_trees), node] == topology.LEAF)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.is_split()), topology.is_split_mask(state))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.features(run.x)), layer.forest_features(run.x))
    assert layer.split_evaluations(run.x) == pytest.approx(topology.position_depth(node).sum(1).mean())


@pytest.mark.parametrize("case", HEAP_CASES, ids=[case.id for case in HEAP_CASES])
def test_heap_layer_sizes(case, trained):
    """``num_leaves()`` / ``num_splits()``: per tree (a plain int for the
    single-tree families); ``depth()``: the deepest tree's depth, an int."""
    layer = trained(case).layer
    forest = layer.to_forest()
    for name, expected in (("num_leaves", forest.num_leaves()), ("num_splits", forest.num_splits())):
        value = getattr(layer, name)()
        if layer.single_tree:
            assert type(value) is int and value == int(expected[0]), name
        else:
            np.testing.assert_array_equal(value, expected)
    np.testing.assert_array_equal(layer.tree_depths(), forest.tree_depths())
    assert type(layer.depth()) is int and layer.depth() == int(forest.tree_depths().max())


@pytest.mark.parametrize("cls", NUM_LEAVES_PROPERTY, ids=lambda c: c.__name__)
def test_num_leaves_property_spelling_warns(cls):
    case = next(case for case in CASES if case.cls is cls)
    layer = case.make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert layer.num_leaves() == 4 and type(layer.num_leaves()) is int  # the new spelling: no warning
    with pytest.warns(FutureWarning, match=r"num_leaves is a method now: call num_leaves\(\)"):
        assert layer.num_leaves == 4
    with pytest.warns(FutureWarning, match="num_leaves"):
        assert layer.num_leaves * 2 == 8
    with warnings.catch_warnings():  # NumPy reads the int without Python's number protocol: no warning
        warnings.simplefilter("ignore", FutureWarning)
        assert np.zeros(layer.num_leaves).shape == (4,) and f"{layer.num_leaves}" == "4"


def test_non_greedy_old_route_convention_warns():
    case = next(case for case in CASES if case.cls is layers.NonGreedyTree)
    x, _ = sample(case)
    tree = case.make()
    node = keras.ops.convert_to_numpy(tree.route(x))
    with pytest.warns(FutureWarning, match=r"route\(x\)\[:, 0\] - \(2\*\*max_depth - 1\)"):
        old = keras.ops.convert_to_numpy(tree.route(x, leaf_index=True))
    np.testing.assert_array_equal(old, node[:, 0] - (2**tree.depth - 1))
    assert tree.depth == 2 and tree.depth() == 2 and type(tree.depth()) is int


def test_old_heap_mixin_name_warns():
    from keras_trees.layers import _heap

    with pytest.warns(FutureWarning, match="HeapTreeLayer"):
        assert _heap.HeapTreeMixin is HeapTreeLayer
