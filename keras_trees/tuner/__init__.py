"""Ready Keras Tuner HyperModels with the papers' search spaces, one per family.

Needs the ``tuner`` extra (``pip install "keras-trees[tuner]"``: keras-tuner and
tensorboard, which keras-tuner imports on the TensorFlow backend). Every
HyperModel works with ``RandomSearch``, ``Hyperband`` and
``BayesianOptimization``; the models it builds contain only registered
keras-trees objects, so the best model reloads from the tuner's directory in a
fresh process (``tuner.get_best_models()`` after ``import keras_trees``).

>>> import keras_tuner as kt
>>> from keras_trees.tuner import TreeEnsembleHyperModel
>>> tuner = kt.RandomSearch(TreeEnsembleHyperModel((16,), num_classes=26),  # doctest: +SKIP
...                         objective="val_accuracy", max_trials=20)
"""

from keras_trees.tuner._base import TreeHyperModel
from keras_trees.tuner.convex_polytope import ConvexPolytopeHyperModel
from keras_trees.tuner.end_to_end import EndToEndTreeHyperModel
from keras_trees.tuner.hinge_forest import HingeForestHyperModel
from keras_trees.tuner.non_greedy import NonGreedyHyperModel
from keras_trees.tuner.tree_ensemble import TreeEnsembleHyperModel

__all__ = [
    "TreeHyperModel",
    "TreeEnsembleHyperModel",
    "HingeForestHyperModel",
    "EndToEndTreeHyperModel",
    "ConvexPolytopeHyperModel",
    "NonGreedyHyperModel",
]
