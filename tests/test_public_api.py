"""The public API: declared at the definition (``@keras_trees_export``), each
package's ``__all__`` generated from it, and Keras serialization names frozen."""

import importlib
import inspect
import pkgutil

import keras
import pytest

import keras_trees
from keras_trees import api_export
from tests.conftest import run_python

# Packages whose __all__ is generated.
PACKAGES = [
    "keras_trees",
    "keras_trees.callbacks",
    "keras_trees.constraints",
    "keras_trees.distribute",
    "keras_trees.estimators",
    "keras_trees.initializers",
    "keras_trees.inspection",
    "keras_trees.interop",
    "keras_trees.layers",
    "keras_trees.losses",
    "keras_trees.ops",
    "keras_trees.regularizers",
    "keras_trees.streaming",
    "keras_trees.topology",
    "keras_trees.tuner",
]
HAND_WRITTEN = {"keras_trees": {"__version__"}}

# The names .keras files of every release store: never change one (files saved
# before would stop loading); a new serializable class adds its line.
REGISTERED_NAMES = {
    "keras_trees>ClipValues": "keras_trees.constraints.ClipValues",
    "keras_trees>ConditionalEntropy": "keras_trees.losses.ConditionalEntropy",
    "keras_trees>ConvexPolytopeTree": "keras_trees.layers.ConvexPolytopeTree",
    "keras_trees>EMLeafUpdate": "keras_trees.callbacks.EMLeafUpdate",
    "keras_trees>EndToEndForest": "keras_trees.layers.EndToEndForest",
    "keras_trees>EndToEndTree": "keras_trees.layers.EndToEndTree",
    "keras_trees>GammaProcessPrior": "keras_trees.losses.GammaProcessPrior",
    "keras_trees>GreedyLevelGrowth": "keras_trees.callbacks.GreedyLevelGrowth",
    "keras_trees>HingeBatchNormalization": "keras_trees.layers.HingeBatchNormalization",
    "keras_trees>HingeFern": "keras_trees.layers.HingeFern",
    "keras_trees>HingeForest": "keras_trees.layers.HingeForest",
    "keras_trees>LeafVariance": "keras_trees.losses.LeafVariance",
    "keras_trees>NonGreedyTree": "keras_trees.layers.NonGreedyTree",
    "keras_trees>PolytopeAnnealing": "keras_trees.callbacks.PolytopeAnnealing",
    "keras_trees>PolytopeLeafUpdate": "keras_trees.callbacks.PolytopeLeafUpdate",
    "keras_trees>RowNorm": "keras_trees.constraints.RowNorm",
    "keras_trees>SpatialLaplacian": "keras_trees.regularizers.SpatialLaplacian",
    "keras_trees>SplitUniform": "keras_trees.initializers.SplitUniform",
    "keras_trees>StableSGD": "keras_trees.callbacks.StableSGD",
    "keras_trees>SteepnessAnnealing": "keras_trees.callbacks.SteepnessAnnealing",
    "keras_trees>TreeEnsembleLayer": "keras_trees.layers.TreeEnsembleLayer",
}


def _package(name):
    if name == "keras_trees.tuner":
        pytest.importorskip("keras_tuner")
    return importlib.import_module(name)


def _resolve(path):
    package, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(package), name)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_generated_from_the_exports(name):
    package = _package(name)
    exported = api_export.exports(name)
    names = set(package.__all__) - HAND_WRITTEN.get(name, set())
    assert len(package.__all__) == len(set(package.__all__))
    assert set(exported) <= names
    for submodule in names - set(exported):  # a public module: objects are exported to it
        value = getattr(package, submodule)
        assert inspect.ismodule(value) and api_export.exports(value.__name__), submodule
    for public, obj in exported.items():
        assert getattr(package, public) is obj  # importable as package.name
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__.startswith("keras_trees."), (public, obj.__module__)


def _public_modules(name):
    """The package and its public modules (the top level: its plain modules only;
    its subpackages are checked on their own)."""
    package = _package(name)
    yield package
    path, prefix = getattr(package, "__path__", []), f"{name}."
    if name == "keras_trees":
        found = [info for info in pkgutil.iter_modules(path, prefix) if not info.ispkg]
    else:
        found = pkgutil.walk_packages(path, prefix)
    for info in found:
        if not any(part.startswith("_") for part in info.name.split(".")):
            yield importlib.import_module(info.name)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_class_is_exported(name):
    modules = list(_public_modules(name))
    exported = {id(obj) for package in api_export.packages() for obj in api_export.exports(package).values()}
    for module in modules:
        for cls_name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and not cls_name.startswith("_"):
                assert id(cls) in exported, f"{module.__name__}.{cls_name} lacks @keras_trees_export"


def test_registered_names_are_unchanged():
    for registered, path in REGISTERED_NAMES.items():
        cls = _resolve(path)
        assert keras.saving.get_registered_object(registered) is cls, registered
        assert keras.saving.get_registered_name(cls) == registered
    ours = {k for k in keras.saving.get_custom_objects() if k.startswith("keras_trees>")}
    assert ours == set(REGISTERED_NAMES), "a new serializable class: add its name above"


def test_objects_load_by_registered_name_whatever_module_saved_them():
    # ClipValues lived in keras_trees.layers.convex_polytope_tree before.
    config = {"module": "keras_trees.layers.convex_polytope_tree", "class_name": "ClipValues",
              "config": {"min_value": -1.0, "max_value": 2.0}, "registered_name": "keras_trees>ClipValues"}
    clip = keras.saving.deserialize_keras_object(config)
    assert isinstance(clip, keras_trees.constraints.ClipValues) and clip.max_value == 2.0


def test_export_checks():
    with pytest.raises(ValueError, match="keras_trees"):
        api_export.keras_trees_export("somewhere.else")(lambda: None)
    with pytest.raises(ValueError, match="exported twice"):
        api_export.keras_trees_export("keras_trees.layers", name="TreeEnsembleLayer")(lambda: None)


@pytest.mark.slow
def test_keras_trees_imports_without_keras_tuner(tmp_path):
    out = run_python(
        """
        import sys
        sys.modules["keras_tuner"] = None  # as if keras-tuner were not installed
        import keras_trees
        try:
            import keras_trees.tuner
        except ImportError as e:
            print("needs the tuner extra" if "keras-trees[tuner]" in str(e) else e)
        """,
        cwd=tmp_path,
    )
    assert out.strip().endswith("needs the tuner extra")
