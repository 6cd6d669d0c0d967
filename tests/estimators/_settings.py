"""Tiny settings of every estimator for the tests (small depth, few trees and
epochs): the least that passes scikit-learn's accuracy (> 0.83) and R^2 (> 0.5)
checks on its easy problems."""

from keras_trees import estimators as E

TINY = {
    E.TreeEnsembleClassifier: dict(max_depth=2, num_trees=3, max_epochs=3, learning_rate=0.1),
    E.TreeEnsembleRegressor: dict(max_depth=2, num_trees=3, max_epochs=3, learning_rate=0.1),
    E.HingeForestClassifier: dict(max_depth=2, num_trees=8, num_features=8, max_epochs=3, learning_rate=0.05),
    E.HingeForestRegressor: dict(max_depth=2, num_trees=8, num_features=8, max_epochs=3, learning_rate=0.05),
    E.EndToEndTreeClassifier: dict(max_depth=2, epochs_per_level=3, finetune_epochs=1, learning_rate=0.05),
    E.EndToEndTreeRegressor: dict(max_depth=3, epochs_per_level=3, finetune_epochs=5, learning_rate=0.3, batch_size=50),
    E.ConvexPolytopeTreeClassifier: dict(max_depth=2, num_experts=3, epochs_per_level=3),
    E.ConvexPolytopeTreeRegressor: dict(max_depth=3, num_experts=3, epochs_per_level=5),
    E.NonGreedyTreeClassifier: dict(max_depth=2, max_epochs=3),
    E.NonGreedyTreeRegressor: dict(max_depth=3, max_epochs=3),
}


def tiny(cls, **overrides):
    return cls(**{**TINY[cls], **overrides})
