"""Every family's HyperModel searches two trials and its best model reloads from
the tuner directory in a fresh process, on every Keras backend."""

import os

import numpy as np
import pytest

kt = pytest.importorskip("keras_tuner")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("eager_tensorflow")]

from tests.backends.conftest import run_fresh  # noqa: E402

# name -> constructor expression, evaluated in this process and in the child.
# The fewest epochs each family trains with (one batch of the 90 training rows
# an epoch for the greedily grown trees): the search and reload paths are the
# same at any length of training.
HYPERMODELS = {
    "tree_ensemble": "TreeEnsembleHyperModel((4,), num_classes=3, max_trees=4, max_depth=3)",
    "hinge": "HingeForestHyperModel((4,), num_classes=3, max_trees=10, max_depth=3)",
    "end_to_end_tree": "EndToEndTreeHyperModel((4,), num_classes=3, max_depth=2, epochs_per_level=1, batch_sizes=90)",
    "end_to_end_forest": "EndToEndTreeHyperModel((4,), num_classes=3, max_depth=2, forest=True, max_trees=5, "
                         "epochs_per_level=1, batch_sizes=90)",
    "convex_polytope": "ConvexPolytopeHyperModel((4,), num_classes=3, max_depth=2, num_experts=(1, 3), "
                       "epochs_per_level=(1, 2))",
    "non_greedy": "NonGreedyHyperModel((4,), num_classes=3, max_depth=3)",
}


def tiny(n=120, d=4, classes=3):
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(n, d)).astype("float32")
    y = (np.digitize(x[:, 0], [-0.4, 0.4])).astype("int32") % classes
    return x, y


def search(family, directory, x, y):
    from keras_trees import tuner as kt_tuner

    hypermodel = eval(HYPERMODELS[family], vars(kt_tuner))  # noqa: S307 - fixed expressions above
    tuner = kt.RandomSearch(hypermodel, objective="val_accuracy", max_trials=2, seed=0,
                            directory=directory, project_name=family)
    tuner.search(x[:90], y[:90], validation_data=(x[90:], y[90:]), epochs=2, verbose=0)
    return tuner


def test_every_family_searches_and_its_best_model_reloads(tmp_path):
    """Each family's search runs two trials (a polytope trial's checkpoint holds
    its grown tree); one named trial of each reloads
    in one fresh process (one for all five: a process start and its imports
    cost more than a search) with identical predictions."""
    x, y = tiny()
    np.save(tmp_path / "x.npy", x)
    trials = {}
    for family in sorted(HYPERMODELS):
        tuner = search(family, str(tmp_path), x, y)
        done = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
        assert len(done) == 2, family
        # Reload one named trial: with tied scores (tiny validation sets) the best
        # trial of the in-memory oracle and of a reloaded one may differ.
        trial_id = tuner.oracle.get_best_trials(1)[0].trial_id
        best = tuner.load_model(tuner.oracle.get_trial(trial_id))
        expected = best.predict(x, verbose=0)
        if family == "convex_polytope":  # the checkpoint holds the grown tree, not a fresh root leaf
            assert int(best.layers[-1].num_leaves()) > 1
        assert expected.shape == (120, 3) and np.all(np.isfinite(expected)), family
        np.save(tmp_path / f"{family}.npy", expected)
        trials[family] = trial_id
    out = run_fresh(
        f"""
import numpy as np, keras_tuner as kt
import keras_trees
from keras_trees import tuner as kt_tuner
x = np.load({os.path.join(str(tmp_path), "x.npy")!r})
for family, (expression, trial_id) in {({f: (HYPERMODELS[f], t) for f, t in trials.items()})!r}.items():
    tuner = kt.RandomSearch(eval(expression, vars(kt_tuner)), objective="val_accuracy", max_trials=2, seed=0,
                            directory={str(tmp_path)!r}, project_name=family, overwrite=False)
    model = tuner.load_model(tuner.oracle.get_trial(trial_id))
    expected = np.load({str(tmp_path)!r} + "/" + family + ".npy")
    print(family, "identical predictions =", np.array_equal(model.predict(x, verbose=0), expected))
""",
        tmp_path,
    )
    for family in HYPERMODELS:
        assert f"{family} identical predictions = True" in out, out
