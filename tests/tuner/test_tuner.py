"""The HyperModels' search spaces and arguments, Hyperband and Bayesian
optimization, the polytope trial's fit. Every family's random search and the
reload of its best model in a fresh process run on every backend in
tests/backends/test_tuner_backends.py."""

import numpy as np
import pytest

kt = pytest.importorskip("keras_tuner")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("eager_tensorflow")]

from keras_trees.tuner import (  # noqa: E402
    ConvexPolytopeHyperModel,
    TreeEnsembleHyperModel,
)
from keras_trees import topology  # noqa: E402


def tiny(rng, n=120, d=4, classes=3):
    x = rng.normal(size=(n, d)).astype("float32")
    y = (np.digitize(x[:, 0], [-0.4, 0.4])).astype("int32") % classes
    return x, y


def completed(tuner):
    return [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]


@pytest.mark.parametrize("kind", ["hyperband", "bayesian"])
def test_hyperband_and_bayesian_optimization(rng, tmp_path, kind):
    x, y = tiny(rng)
    hypermodel = TreeEnsembleHyperModel((4,), num_classes=3, max_trees=4, max_depth=3)
    common = dict(objective="val_loss", seed=0, directory=str(tmp_path), project_name=kind)
    if kind == "hyperband":
        tuner = kt.Hyperband(hypermodel, max_epochs=2, factor=2, hyperband_iterations=1, **common)
    else:
        tuner = kt.BayesianOptimization(hypermodel, max_trials=2, num_initial_points=1, **common)
    tuner.search(x[:90], y[:90], validation_data=(x[90:], y[90:]), epochs=2, verbose=0)
    assert len(completed(tuner)) >= 2


def test_hypermodel_arguments_are_checked():
    with pytest.raises(ValueError, match="exactly one of num_classes"):
        TreeEnsembleHyperModel((4,))
    with pytest.raises(ValueError, match="learning_rate"):
        TreeEnsembleHyperModel((4,), num_classes=2, learning_rate=(0.1, 0.01))
    hp = kt.HyperParameters()
    hp.Fixed("depth", 5)
    model = TreeEnsembleHyperModel((4,), units=1).build(hp)
    assert model.layers[-1].max_depth == 5 and model.loss.name == "mean_squared_error"


def test_convex_polytope_trial_passes_verbose_and_weights_to_fit_greedy(rng, capsys):
    x, y = tiny(rng)
    hypermodel = ConvexPolytopeHyperModel((4,), num_classes=3, max_depth=2, num_experts=(1,))
    hp = kt.HyperParameters()
    hp.Fixed("epochs_per_level", 2)  # fixed before build: the search space's Choice keeps it
    model = hypermodel.build(hp)
    tree = model.layers[-1]
    hypermodel.fit(hp, model, x[:90], y[:90], validation_data=(x[90:], y[90:]), verbose=0)
    assert capsys.readouterr().out == ""
    # class 2 weighs 0: no leaf predicts it (the weights reach fit_greedy's leaves)
    logs = hypermodel.fit(hp, model, x[:90], y[:90], validation_data=(x[90:], y[90:]), verbose=2,
                          class_weight={2: 0.0})
    out = capsys.readouterr().out
    assert out.count("Level 1/") == 1 and "val_accuracy:" in out, out
    leaves = np.asarray(tree.node_state)[0] == topology.LEAF
    assert np.all(np.asarray(tree.leaf_values)[0][leaves, 2] == 0) and "val_accuracy" in logs


def test_convex_polytope_search_space_holds_the_prior():
    hypermodel = ConvexPolytopeHyperModel((4,), num_classes=3, max_depth=2, prior_weight=(0.0, 0.5),
                                          prior_gamma0=(2.0, 5.0), prior_a_beta=(0.5,))
    hp = kt.HyperParameters()
    hp.Fixed("prior_gamma0", 5.0)
    hp.Fixed("prior_weight", 0.5)
    prior = hypermodel.build(hp).layers[-1].prior
    assert (prior.gamma0, prior.a_beta, prior.weight) == (5.0, 0.5, 0.5)
    assert hp.values["prior_a_beta"] == 0.5 and hypermodel.get_config()["prior_weight"] == [0.0, 0.5]
    hp = kt.HyperParameters()
    hp.Fixed("prior_weight", 0.0)  # no prior at all
    assert hypermodel.build(hp).layers[-1].prior is None
    with pytest.raises(ValueError, match="prior_gamma0"):
        ConvexPolytopeHyperModel((4,), num_classes=3, prior_gamma0=(1.0, 0.0))
    with pytest.raises(ValueError, match="prior_weight"):
        ConvexPolytopeHyperModel((4,), num_classes=3, prior_weight=-1.0)
    for name in ("prior_a_beta", "num_experts", "epochs_per_level"):
        with pytest.raises(ValueError, match=f"{name} must hold at least one value"):
            ConvexPolytopeHyperModel((4,), num_classes=3, **{name: ()})
