"""Facts the docstrings state that the code can confirm.

* every estimator's ``Default: X`` of an argument, and the numbers of its
  defaults sentence, equal its ``__init__`` defaults;
* the shared training facts of the estimators' docstrings (the shortest epoch,
  the adaptive patience, the leaf smoothing) equal the constants the code uses;
* :class:`keras_trees.Forest`'s ``right_if`` and ``family`` entries match what
  each layer's ``to_forest()`` and ``from_sklearn`` write;
* the GPU families :func:`keras_trees.ops.custom_ops_available` names match
  ``DISPATCH`` and the GPU policy, and ``benchmarks/gpu_speed.py``'s docstring
  lists every family its table times.

Cheap: tiny layers, no training.
"""

import ast
import inspect
import math
import os
import re

import keras
import numpy as np
import pytest

import keras_trees
from keras_trees import estimators, layers
from keras_trees.estimators import _base
from keras_trees.estimators import end_to_end as end_to_end_estimators
from keras_trees.ops import _library

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ESTIMATORS = [getattr(estimators, name) for name in estimators.__all__ if inspect.isclass(getattr(estimators, name))]


def _defaults(cls):
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}


def _args_entries(doc):
    """{argument: the text of its entry} of a docstring's ``Args:`` section;
    an entry naming several arguments (``a, b: ...``) is listed under each."""
    section = doc.split("Args:", 1)[1].split("Attributes", 1)[0]
    entries, names = {}, []
    for line in section.splitlines():
        match = re.match(r"^ {8}([a-z_][a-z_0-9, ]*):(.*)$", line)
        if match:
            names = [n.strip() for n in match.group(1).split(",")]
            for name in names:
                entries[name] = match.group(2)
        elif line.startswith(" " * 12):
            for name in names:
                entries[name] += " " + line.strip()
    return entries


def _parse(value):
    value = value.strip().strip("`").rstrip(".")
    if value == "None":
        return None
    if value in ("True", "False"):
        return value == "True"
    if value.startswith('"'):
        return value.strip('"')
    return float(value)


def _same(documented, actual):
    if isinstance(documented, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        return math.isclose(documented, actual)
    return documented == actual


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_stated_argument_defaults_are_the_signature_defaults(cls):
    defaults = _defaults(cls)
    entries = _args_entries(cls.__doc__)
    stated = 0
    for name, text in entries.items():
        for match in re.finditer(r"[Dd]efault:\s*(``[^`]+``|None|True|False|-?[0-9.e+-]+)", text):
            assert name in defaults, f"{cls.__name__}: the docstring documents {name!r}, which it does not take"
            documented = _parse(match.group(1))
            assert _same(documented, defaults[name]), (
                f"{cls.__name__}.{name}: the docstring says the default is {match.group(1)}, "
                f"the signature has {defaults[name]!r}")
            stated += 1
        match = re.search(r"\b([0-9.]+) \(the default\)", text)
        if match:
            assert _same(float(match.group(1)), defaults[name]), (
                f"{cls.__name__}.{name}: the docstring says {match.group(1)} is the default, "
                f"the signature has {defaults[name]!r}")
            stated += 1
    for name in entries:  # every documented argument exists
        assert name in defaults, f"{cls.__name__}: the docstring documents {name!r}, which it does not take"
    if cls.__name__.startswith(("EndToEnd", "NonGreedy", "ConvexPolytope")):
        assert stated, f"{cls.__name__}: no stated default found (has the docstring's wording changed?)"


# (estimator prefix, pattern of the defaults sentence, the arguments its groups are)
DEFAULTS_SENTENCES = [
    ("TreeEnsembleClassifier", r"defaults are (\d+) trees of depth (\d+)", ("num_trees", "max_depth")),
    ("TreeEnsembleRegressor", r"the paper's (\d+) trees of depth (\d+)", ("num_trees", "max_depth")),
    ("TreeEnsemble", r"with Adam ([0-9.]+)\s+and batch (\d+)", ("learning_rate", "batch_size")),
    ("TreeEnsembleClassifier", r"``code_indicators=(\d+)``", ("code_indicators",)),
    ("HingeForest",
     r"\((\d+) trees over (\d+) learned\s+features, Adam ([0-9.]+), batch (\d+), patience (\d+)\) at depth (\d+)",
     ("num_trees", "num_features", "learning_rate", "batch_size", "patience", "max_depth")),
    ("ConvexPolytope", r"\((\d+) per level, ``lambda`` \+([0-9.]+) per epoch\)",
     ("epochs_per_level", "annealing_increment")),
    ("ConvexPolytope", r"tutorials/convex_polytope_trees`` at depth (\d+)", ("max_depth",)),
    ("EndToEnd", r"tutorials/end_to_end_trees`` at depth (\d+)", ("max_depth",)),
    ("NonGreedy", r"tutorials/non_greedy_trees`` at depth (\d+)", ("max_depth",)),
    ("EndToEndTreeClassifier", r"default (\d+) for the classifier", ("min_samples_split",)),
    ("EndToEndTreeRegressor", r"(\d+)\s+for the regressor", ("min_samples_split",)),
]


@pytest.mark.parametrize("prefix, pattern, names", DEFAULTS_SENTENCES, ids=lambda v: v if isinstance(v, str) else "")
def test_the_defaults_sentences_state_the_signature_defaults(prefix, pattern, names):
    found = [cls for cls in ESTIMATORS if cls.__name__.startswith(prefix)]
    assert found, prefix
    for cls in found:
        match = re.search(pattern, re.sub(r"\s+", " ", cls.__doc__)) or re.search(pattern, cls.__doc__)
        assert match, f"{cls.__name__}: the docstring no longer says {pattern!r}"
        defaults = _defaults(cls)
        for name, value in zip(names, match.groups()):
            assert _same(float(value), defaults[name]), (
                f"{cls.__name__}: the docstring says {name} = {value}, the signature has {defaults[name]!r}")


def test_the_polytope_estimators_say_the_prior_is_off_by_default():
    for cls in (estimators.ConvexPolytopeTreeClassifier, estimators.ConvexPolytopeTreeRegressor):
        assert _defaults(cls)["prior_weight"] == 0
        text = re.sub(r"\s+", " ", cls.__doc__)
        assert re.search(r"with the gamma-process prior when ``prior_weight`` > 0", text), cls.__name__


def test_the_non_greedy_estimators_start_from_the_tree_of_init_depth():
    for cls in (estimators.NonGreedyTreeClassifier, estimators.NonGreedyTreeRegressor):
        assert _defaults(cls)["init_depth"] == "cv"
        intro = re.sub(r"\s+", " ", cls.__doc__.split("Args:")[0])
        assert "of the same depth" not in intro, f"{cls.__name__}: the start has depth init_depth, not max_depth"
        assert "of depth ``init_depth``" in intro, cls.__name__


def test_the_shared_training_facts_are_the_code_s():
    epoch = re.compile(r"an epoch is at least (\d+)\s+mini-batches", re.IGNORECASE)
    patience = re.compile(r"``ceil\(best_epoch / (\d+)\) \+ (\d+)``")
    rate, offset = _base.ADAPTIVE_PATIENCE
    checked = 0
    for cls in ESTIMATORS:
        doc = re.sub(r"\s+", " ", cls.__doc__)
        for match in epoch.finditer(doc):
            assert int(match.group(1)) == cls._min_epoch_steps, cls.__name__
            checked += 1
        for match in patience.finditer(doc):
            assert math.isclose(1 / int(match.group(1)), rate) and int(match.group(2)) == offset, cls.__name__
            checked += 1
    assert checked >= 2 * (len(ESTIMATORS) - 2)  # the polytope estimators train no epochs of fit
    pseudo = end_to_end_estimators.LEAF_PSEUDO_ROWS
    match = re.search(r"``\(n_k \+ ([0-9.]+) / K\) / \(n \+ ([0-9.]+)\)``", estimators.EndToEndTreeClassifier.__doc__)
    assert match and float(match.group(1)) == float(match.group(2)) == pseudo


def _tiny_layers():
    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    built = {
        "TreeEnsembleLayer": layers.TreeEnsembleLayer(num_trees=2, max_depth=2, units=2),
        "HingeForest": layers.HingeForest(num_trees=2, max_depth=2, units=2, reduction="sum", seed=0),
        "HingeFern": layers.HingeFern(num_trees=2, max_depth=2, units=2, reduction="sum", seed=0),
        "EndToEndTree": layers.EndToEndTree(max_depth=2, num_classes=2, seed=0),
        "EndToEndForest": layers.EndToEndForest(num_trees=2, max_depth=2, num_classes=2, features_per_split=2, seed=0),
        "ConvexPolytopeTree": layers.ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=2, seed=0),
        "NonGreedyTree": layers.NonGreedyTree(max_depth=2, num_classes=2, nu=2.0, seed=0),
    }
    for layer in built.values():
        layer(x)
    return built


# How the Forest docstring may name each family in its right_if entry.
FAMILY_WORDS = {
    "TreeEnsembleLayer": "Tree Ensemble Layer", "HingeForest": "hinge", "HingeFern": "hinge",
    "EndToEndTree": "end-to-end", "EndToEndForest": "end-to-end", "ConvexPolytopeTree": "polytope",
    "NonGreedyTree": "non-greedy",
}


def _entry(doc, name):
    match = re.search(rf"^ {{8}}{name}:(.*?)(?=^ {{8}}\w[\w, ]*:|\Z)", doc, re.MULTILINE | re.DOTALL)
    assert match, f"Forest's docstring has no {name!r} entry"
    return re.sub(r"\s+", " ", match.group(1))


def test_forest_docstring_right_if_and_family_match_what_the_layers_write():
    from sklearn.tree import DecisionTreeClassifier

    from keras_trees.interop import from_sklearn

    forests = {name: layer.to_forest() for name, layer in _tiny_layers().items()}
    x = np.random.default_rng(1).normal(size=(20, 3))
    forests["sklearn"] = from_sklearn(DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, x[:, 0] > 0))
    entry = _entry(keras_trees.Forest.__doc__, "right_if")
    positive, negative = entry.split('``"negative"``', 1)
    written = {name: forest.right_if for name, forest in forests.items()}
    assert set(written.values()) == {"positive"}, written
    assert "every layer" in positive, "the right_if entry should say what the layers write"
    for name, word in FAMILY_WORDS.items():
        assert word.lower() not in negative.lower(), (
            f"Forest's docstring ties right_if='negative' to the {word} family, whose to_forest() writes "
            f"{written[name]!r}")
    families = set(re.findall(r'``"(\w+)"``', _entry(keras_trees.Forest.__doc__, "family")))
    assert families, "Forest's family entry names no family"
    made = {forest.family for forest in forests.values()}
    assert families <= made, f"Forest's docstring names families no source writes: {sorted(families - made)}"


GPU_WORDS = {"hinge": "hinge forests", "hard_routing": "hard routing", "loss_augmented": "loss-augmented",
             "pruned_routing": "pruned routing", "soft_tree": "Tree Ensemble Layer", "check": '``"check"``'}


def test_custom_ops_available_names_the_gpu_families_and_the_policy():
    doc = re.sub(r"\s+", " ", _library.custom_ops_available.__doc__)
    gpu = set(_library.DISPATCH[("tensorflow", "gpu")]) | set(_library.DISPATCH[("jax", "gpu")])
    for family in gpu:
        assert GPU_WORDS[family] in doc, f"custom_ops_available's docstring does not name {family!r} on GPUs"
    for family in _library._GPU_SLOWER:
        tail = doc.split(GPU_WORDS[family], 1)[1][:200]
        assert "KERAS_TREES_GPU_KERNELS=all" in tail, f"the docstring should say {family!r} needs the 'all' choice"


def test_gpu_speed_docstring_lists_every_family_it_times():
    path = os.path.join(REPO_ROOT, "benchmarks", "gpu_speed.py")
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    rows = re.sub(r"\s+", " ", ast.get_docstring(ast.parse(source)).split("Timing:")[0])
    words = {"hinge": "hinge forest", "routing": "hard routing", "tel": "Tree Ensemble Layer",
             "pruned": "pruned probabilistic routing", "pruned_em": "E-step", "lai": "loss-augmented inference"}
    timed = set(re.findall(r'family="(\w+)"', source))
    assert timed and timed <= set(words), timed
    for family in timed:
        assert words[family] in rows, f"gpu_speed.py times {family!r} rows its docstring does not list"


def test_a_wrong_stated_default_fails(monkeypatch):
    """The default check can fail: a docstring stating another default is caught."""
    cls = estimators.EndToEndTreeRegressor
    broken = cls.__doc__.replace('Default: ``"cv"``', "Default: None")
    assert broken != cls.__doc__
    monkeypatch.setattr(cls, "__doc__", broken)
    with pytest.raises(AssertionError, match="depth_cap"):
        test_stated_argument_defaults_are_the_signature_defaults(cls)
    keras.backend.clear_session()


def test_the_error_page_quotes_what_keras_and_tensorflow_raise(tmp_path):
    """docs/errors.md's table of errors raised before keras-trees sees the input."""
    import tensorflow as tf

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "errors.md")) as f:
        page = f.read()
    model = keras.Sequential([keras.Input((4,)), layers.TreeEnsembleLayer(num_trees=1, max_depth=1, num_classes=2)])
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.ones((4, 4), "float32")
    with pytest.raises(ValueError, match="Invalid dtype: str32") as string_labels:
        model.fit(x, np.array(["a", "b", "a", "b"]), epochs=1, verbose=0)
    model.export(str(tmp_path / "saved"), verbose=False)
    (data,) = (tmp_path / "saved" / "variables").glob("variables.data-*")
    with open(data, "r+b") as handle:
        handle.truncate(data.stat().st_size // 2)
    with pytest.raises(Exception, match="Read less bytes than requested") as truncated:
        tf.saved_model.load(str(tmp_path / "saved"))
    for error in (string_labels, truncated):
        assert f"`{error.type.__name__}: {error.value}`" in page or f"{error.type.__name__}: {error.value}" in page, (
            f"docs/errors.md does not quote {error.type.__name__}: {error.value}")
