"""One vocabulary (docs/vocabulary.md): the names of 0.1.0 still work, with a
warning naming the new argument, and give the same objects as the new names."""

import warnings

import keras
import numpy as np
import pytest

from keras_trees import layers
from keras_trees.callbacks import SteepnessAnnealing

# (class, arguments in the new vocabulary, the same arguments in the old one)
ALIASES = [
    (layers.TreeEnsembleLayer, dict(num_trees=2, max_depth=3, units=2),
     dict(num_trees=2, depth=3, units=2), "max_depth"),
    (layers.TreeEnsembleLayer, dict(num_trees=2, max_depth=3, units=2, transition_width=0.3),
     dict(num_trees=2, max_depth=3, units=2, gamma=0.3), "transition_width"),
    (layers.HingeForest, dict(num_trees=2, max_depth=3, units=2, seed=0),
     dict(num_trees=2, depth=3, units=2, seed=0), "max_depth"),
    (layers.HingeFern, dict(num_trees=2, max_depth=3, units=2, seed=0),
     dict(num_trees=2, depth=3, units=2, seed=0), "max_depth"),
    (layers.NonGreedyTree, dict(max_depth=3, num_classes=2, seed=0),
     dict(depth=3, num_classes=2, seed=0), "max_depth"),
    (layers.EndToEndTree, dict(max_depth=3, num_classes=2, steepness=2.5, seed=0),
     dict(max_depth=3, num_classes=2, gamma=2.5, seed=0), "steepness"),
    (layers.EndToEndForest, dict(num_trees=2, max_depth=3, units=1, steepness=2.5, seed=0),
     dict(num_trees=2, max_depth=3, units=1, gamma=2.5, seed=0), "steepness"),
    (SteepnessAnnealing, dict(increment=0.2, max_steepness=4.0),
     dict(increment=0.2, max_gamma=4.0), "max_steepness"),
]


def _config(obj):
    config = obj.get_config()
    config.pop("name", None)
    return config


@pytest.mark.parametrize("cls,new,old,name", ALIASES, ids=lambda v: getattr(v, "__name__", None))
def test_old_name_warns_naming_the_new_one_and_builds_the_same_object(cls, new, old, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names never warn
        expected = cls(**new)
    with pytest.warns(DeprecationWarning, match=f"use '{name}' instead") as record:
        got = cls(**old)
    assert len(record) == 1
    # The warning points at the caller's line (this file), not into keras_trees.
    assert record[0].filename == __file__
    assert _config(got) == _config(expected)


@pytest.mark.parametrize("cls,new,old,name", ALIASES, ids=lambda v: getattr(v, "__name__", None))
def test_configs_of_0_1_0_load_silently(cls, new, old, name):
    """A config written by 0.1.0 (old keys) gives the same object, without a warning."""
    new_config = _config(cls(**new))
    old_config = dict(new_config)
    old_key = next(k for k in old if k not in new)
    old_config[old_key] = old_config.pop(name)
    if cls is layers.TreeEnsembleLayer:
        old_config.pop("right_if")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = cls.from_config(old_config)
    assert _config(loaded) == new_config
    assert "depth" not in new_config and "gamma" not in new_config and "max_gamma" not in new_config


@pytest.mark.parametrize("cls,new,old,name", ALIASES[:2] + ALIASES[5:6])
def test_old_and_new_name_together_is_an_error(cls, new, old, name):
    both = dict(new, **old)
    both[name] = {"max_depth": 4, "transition_width": 0.5, "steepness": 3.0}[name]
    with pytest.raises(ValueError, match=f"pass {name} only"):
        cls(**both)


def test_positional_arguments_keep_their_meaning():
    layer = layers.TreeEnsembleLayer(3, 2, 4, 0.5)
    assert (layer.num_trees, layer.max_depth, layer.units, layer.initial_transition_width) == (3, 2, 4, 0.5)
    hinge = layers.HingeFern(3, 2, 4)
    assert (hinge.num_trees, hinge.max_depth, hinge.units) == (3, 2, 4)
    assert layers.NonGreedyTree(5, num_classes=2).max_depth == 5


def test_deprecated_attribute_names_still_read():
    tel = layers.TreeEnsembleLayer(num_trees=2, max_depth=3, units=2, transition_width=0.4)
    assert tel.depth == tel.max_depth == 3 and tel.initial_gamma == 0.4
    tree = layers.EndToEndTree(max_depth=2, num_classes=2, steepness=1.5)
    assert tree.initial_gamma == tree.initial_steepness == 1.5
    assert SteepnessAnnealing(max_steepness=3.0).max_gamma == 3.0


def test_tree_ensemble_layer_positive_split_value_goes_right(rng):
    layer = layers.TreeEnsembleLayer(num_trees=1, max_depth=1, units=1, transition_width=1.0)
    layer.build((None, 2))
    layer.node_weights.assign(np.array([[[1.0, 0.0]]], "float32"))
    layer.node_bias.assign(np.zeros((1, 1), "float32"))
    layer.leaf_weights.assign(np.array([[[-1.0], [1.0]]], "float32"))  # left leaf -1, right leaf +1
    x = np.array([[5.0, 0.0], [-5.0, 0.0], [0.0, 3.0]], "float32")
    np.testing.assert_allclose(np.asarray(layer(x))[:, 0], [1.0, -1.0, 0.0], atol=1e-6)
    forest = layer.to_forest()
    assert forest.right_if == "positive"
    np.testing.assert_array_equal(forest.weights, np.asarray(layer.node_weights))


def test_flip_legacy_splits_converts_0_1_0_weights(rng, tmp_path):
    """Weights of 0.1.0 (split value = P(left)) loaded without a config: flip them."""
    from keras_trees import ops as tree_ops

    layer = layers.TreeEnsembleLayer(num_trees=2, max_depth=2, units=3)
    x = rng.normal(size=(6, 4)).astype("float32")
    layer(x)
    w, b = np.asarray(layer.node_weights), np.asarray(layer.node_bias)
    old_output = tree_ops.soft_tree_ensemble(x, w, b, layer.leaf_weights, 1.0)  # what 0.1.0 computed
    layer.flip_legacy_splits()
    np.testing.assert_array_equal(np.asarray(layer.node_weights), -w)
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(old_output))


def test_tree_ensemble_layer_round_trip_does_not_flip_twice(rng, tmp_path):
    x = rng.normal(size=(10, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), layers.TreeEnsembleLayer(num_trees=2, max_depth=2, units=2)])
    expected = model.predict(x, verbose=0)
    for round_trip in range(2):
        path = str(tmp_path / f"m{round_trip}.keras")
        model.save(path)
        model = keras.saving.load_model(path)
        np.testing.assert_array_equal(model.predict(x, verbose=0), expected)


def test_tree_ensemble_layer_config_marks_the_routing_side():
    layer = layers.TreeEnsembleLayer(num_trees=2, max_depth=2, units=1)
    config = layer.get_config()
    assert config["right_if"] == "positive"
    assert layers.TreeEnsembleLayer(**config).get_config() == config  # plain cls(**config) works too
    with pytest.raises(ValueError, match="right_if must be 'positive'"):
        layers.TreeEnsembleLayer(num_trees=2, max_depth=2, units=1, right_if="negative")
