"""Writes the legacy ``.keras`` files that tests/test_legacy_files.py loads.

Run once with a given release of keras-trees (``python -m
tests.data.make_legacy_files``, from the repository root); it writes
``tests/data/legacy_v<version>/``: one small trained model per public layer
family, saved with ``model.save``, the fixed inputs ``x.npy``, and
``expected.npz`` with each model's predictions on them (and extra outputs
that exercise saved state: the soft posterior of the end-to-end trees).

The files are test data: they pin the on-disk format a release wrote, so a
later release (argument renames, routing conventions) must still load them
to identical predictions. Never regenerate the files of an existing release
with newer code; add a new directory for a new release instead.

The files in ``legacy_v0.1.0`` were written by main at commit fa1a6f5 (the
release before the unified vocabulary: ``depth``/``gamma`` arguments, the Tree
Ensemble Layer's split value is P(left)).
"""

import os
import sys
import tomllib

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

from keras_trees import layers as kt  # noqa: E402
from keras_trees.callbacks import EMLeafUpdate, SteepnessAnnealing  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def version():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5)).astype("float32")
    y = ((x[:, 0] + 0.5 * x[:, 1] * x[:, 2]) > 0).astype("int32")
    y_reg = (x[:, :1] - x[:, 1:2] ** 2).astype("float32")
    return x, y, y_reg


def build_models(x, y, y_reg):
    """``name -> (model, extra outputs dict)`` of trained models."""
    keras.utils.set_random_seed(0)
    sce_logits = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    models = {}

    # Tree Ensemble Layer: classification head and a hidden regression layer,
    # nonzero biases, a non-default gamma and an assigned gamma variable.
    inputs = keras.Input((5,))
    h = keras.layers.BatchNormalization()(inputs)
    h = kt.TreeEnsembleLayer(num_trees=3, depth=3, units=4, gamma=0.7, name="tel_hidden")(h)
    out = kt.TreeEnsembleLayer(num_trees=2, depth=2, units=2, activation="logistic",
                               name="tel_head")(h)
    model = keras.Model(inputs, out)
    model.compile(keras.optimizers.Adam(0.05), sce_logits)
    model.fit(x, y, epochs=3, batch_size=50, verbose=0)
    model.get_layer("tel_hidden").gamma.assign(0.5)  # as an annealing callback would
    models["tree_ensemble"] = (model, {})

    inputs = keras.Input((5,))
    out = kt.TreeEnsembleLayer(num_trees=4, depth=2, units=1, use_bias=False, name="tel")(inputs)
    model = keras.Model(inputs, out)
    model.compile(keras.optimizers.Adam(0.05), "mse")
    model.fit(x, y_reg, epochs=3, batch_size=50, verbose=0)
    models["tree_ensemble_regression"] = (model, {})

    # End-to-end tree: EM leaves, annealed gamma.
    tree = kt.EndToEndTree(max_depth=3, num_classes=2, gamma=1.0, seed=0, name="e2e_tree")
    model = keras.Sequential([keras.Input((5,)), tree])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
    model.fit(x, y, batch_size=50, epochs=3, verbose=0,
              callbacks=[EMLeafUpdate(x, y), SteepnessAnnealing(0.5)])
    models["end_to_end_tree"] = (model, {"soft": lambda m, xt: m.layers[-1].posterior(xt, routing="soft")})

    # End-to-end forest: regression, feature subsets.
    forest = kt.EndToEndForest(num_trees=3, max_depth=2, units=1, features_per_split=3,
                               gamma=2.0, seed=1, name="e2e_forest")
    model = keras.Sequential([keras.Input((5,)), forest])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    model.fit(x, y_reg, batch_size=50, epochs=3, verbose=0, callbacks=[SteepnessAnnealing(0.3)])
    models["end_to_end_forest"] = (model, {"soft": lambda m, xt: m.layers[-1].posterior(xt, routing="soft")})

    # Convex polytope tree, grown greedily, inside a model.
    poly = kt.ConvexPolytopeTree(max_depth=2, num_experts=3, num_classes=2, steepness=1.5,
                                 seed=0, name="polytope")
    poly.fit_greedy(x, y, epochs=3, batch_size=100, learning_rate=0.05, verbose=0)
    model = keras.Sequential([keras.Input((5,)), poly])
    models["convex_polytope_tree"] = (model, {})

    # Hinge forest and fern behind HingeBatchNormalization.
    for name, cls, kwargs in (
        ("hinge_forest", kt.HingeForest, dict(num_trees=4, depth=2, units=2, reduction="sum")),
        ("hinge_fern", kt.HingeFern, dict(num_trees=5, depth=3, units=1, reduction="mean")),
    ):
        inputs = keras.Input((5,))
        h = keras.layers.Dense(6, use_bias=False)(inputs)
        h = kt.HingeBatchNormalization(name="hinge_bn")(h)
        out = cls(seed=0, name=name, **kwargs)(h)
        model = keras.Model(inputs, out)
        if name == "hinge_forest":
            model.compile(keras.optimizers.Adam(0.02), sce_logits)
            model.fit(x, y, epochs=3, batch_size=50, verbose=0)
        else:
            model.compile(keras.optimizers.Adam(0.02), "mse")
            model.fit(x, y_reg, epochs=3, batch_size=50, verbose=0)
        models[name] = (model, {})

    # Non-greedy tree: a keras.Model of its own.
    model = kt.NonGreedyTree(depth=3, num_classes=2, nu=2.0, seed=0, name="ngt")
    model.compile(keras.optimizers.SGD(0.05))
    model.fit(x, y, batch_size=50, epochs=3, verbose=0)
    models["non_greedy_tree"] = (model, {})
    return models


def main(out_dir=None):
    out_dir = out_dir or os.path.join(ROOT, "tests", "data", f"legacy_v{version()}")
    if os.path.exists(os.path.join(out_dir, "expected.npz")):
        sys.exit(f"{out_dir} exists: legacy files of a release are never regenerated")
    os.makedirs(out_dir, exist_ok=True)
    x, y, y_reg = data()
    x_test = x[:64]
    expected = {}
    for name, (model, extras) in build_models(x, y, y_reg).items():
        model.save(os.path.join(out_dir, f"{name}.keras"))
        expected[name] = np.asarray(model.predict(x_test, verbose=0))
        for key, fn in extras.items():
            expected[f"{name}/{key}"] = np.asarray(keras.ops.convert_to_numpy(fn(model, x_test)))
    np.save(os.path.join(out_dir, "x.npy"), x_test)
    np.savez(os.path.join(out_dir, "expected.npz"), **expected)
    print(f"wrote {len(expected)} arrays and the models to {out_dir}")


if __name__ == "__main__":
    main(*sys.argv[1:])
