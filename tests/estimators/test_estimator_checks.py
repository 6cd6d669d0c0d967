"""scikit-learn's estimator checks on every estimator.

Cost: every check fits a new Keras model (about 70 fits per estimator for the
~60 checks), so the suite is arranged to stay cheap:

* tiny settings (depth 2, a few trees and epochs) for the checks that score
  the fit (``ACCURACY_CHECKS``: accuracy and R^2 thresholds, every class
  predicted), and the least model that runs the same code (``CHEAP``: one
  epoch, one tree or expert where the family has several) for the others,
  which check the estimator's interface and invariances whatever the model's
  quality; epochs of at least 2 mini-batches instead of 16 (conftest.py), and
  no validation split (the early-stopping path is tested in test_estimators.py);
* on TensorFlow the checks run with ``tf.config.run_functions_eagerly(True)``:
  for these few-step fits, tracing the train function (about 1 s per fit,
  10 s for the first end-to-end tree with its growth and EM functions) costs
  more than running the steps eagerly (0.3-3 s);
* the reference estimators (the Tree Ensemble Layer classifier and regressor)
  run every check; the other families run the checks whose outcome depends on
  the family's model, training and prediction (``MODEL_CHECKS``, plain variant
  only; their regressors the checks of the head and loss,
  ``REGRESSOR_CHECKS``). The checks left out for them exercise only code all estimators share
  (:class:`keras_trees.estimators._base.TreeEstimator`: argument, input,
  target and sample-weight validation, tags, cloning, fitted attributes), so
  they pass or fail alike for every family.

Run every check on every estimator (about 6 minutes on 2 cores) with
``KERAS_TREES_ALL_ESTIMATOR_CHECKS=1``.
"""

import os

import keras
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.estimator_checks import estimator_checks_generator

from keras_trees import estimators as E
from keras_trees.estimators import EXPECTED_FAILED_CHECKS
from tests.estimators._settings import TINY, tiny

REFERENCE = (E.TreeEnsembleClassifier, E.TreeEnsembleRegressor)

MODEL_CHECKS = {
    "check_classifiers_train",          # accuracy > 0.83 on easy problems
    "check_regressors_train",           # R^2 > 0.5
    "check_classifiers_classes",        # string and integer labels, 2 and 3 classes
    "check_class_weight_classifiers",
    "check_regressor_multioutput",
    "check_fit_idempotent",             # same random_state, same predictions
    "check_estimators_pickle",
    "check_fit2d_1sample",
    "check_fit2d_1feature",
    "check_methods_subset_invariance",  # predictions independent of the batch
    "check_methods_sample_order_invariance",
}
# A family's regressor shares its model, training and prediction with the
# classifier but for the output head and the loss: it runs the checks of those.
REGRESSOR_CHECKS = {"check_regressors_train", "check_regressor_multioutput", "check_fit_idempotent"}
# The checks that fail on a poor model: they run with the TINY settings.
ACCURACY_CHECKS = {
    "check_classifiers_train",
    "check_regressors_train",
    "check_classifiers_classes",
    "check_class_weight_classifiers",
}
# Overrides of TINY for the other checks: one epoch (per level), the fewest
# trees or experts the family builds as it does with more.
CHEAP = {
    E.TreeEnsembleClassifier: dict(num_trees=1, max_epochs=1),
    E.TreeEnsembleRegressor: dict(num_trees=1, max_epochs=1),
    E.HingeForestClassifier: dict(num_trees=2, max_epochs=1),
    E.HingeForestRegressor: dict(num_trees=2, max_epochs=1),
    E.EndToEndTreeClassifier: dict(epochs_per_level=1, finetune_epochs=1),
    E.EndToEndTreeRegressor: dict(max_depth=2, epochs_per_level=1, finetune_epochs=1),
    E.ConvexPolytopeTreeClassifier: dict(num_experts=2, epochs_per_level=1),
    E.ConvexPolytopeTreeRegressor: dict(max_depth=2, num_experts=2, epochs_per_level=1),
    E.NonGreedyTreeClassifier: dict(max_epochs=1),
    E.NonGreedyTreeRegressor: dict(max_depth=2, max_epochs=1),
}
ALL_CHECKS = os.environ.get("KERAS_TREES_ALL_ESTIMATOR_CHECKS") == "1"


def _name(check):
    while hasattr(check, "func"):
        check = check.func
    return check.__name__


def _cases():
    for cls in TINY:
        seen = set()
        scored = tiny(cls, validation_fraction=0.0)
        cheap = tiny(cls, validation_fraction=0.0, **CHEAP[cls])
        for case in estimator_checks_generator(
            cheap, legacy=True, expected_failed_checks=EXPECTED_FAILED_CHECKS, mark="xfail",
        ):
            _, check = getattr(case, "values", case)
            name = _name(check)
            wanted = REGRESSOR_CHECKS if issubclass(cls, RegressorMixin) else MODEL_CHECKS
            if ALL_CHECKS or cls in REFERENCE or (name in wanted and name not in seen):
                seen.add(name)
                estimator = scored if name in ACCURACY_CHECKS else cheap
                yield pytest.param(estimator, check, marks=getattr(case, "marks", ()))


def _id(value):
    if isinstance(value, BaseEstimator):
        return type(value).__name__
    keywords = getattr(value, "keywords", {}) or {}
    return _name(value) + ("(" + ",".join(f"{k}={v}" for k, v in sorted(keywords.items())) + ")" if keywords else "")


@pytest.fixture(autouse=True, scope="module")
def _eager_functions():
    if keras.backend.backend() != "tensorflow":
        yield
        return
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    yield
    tf.config.run_functions_eagerly(False)


@pytest.mark.slow
@pytest.mark.parametrize("estimator, check", list(_cases()), ids=_id)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
