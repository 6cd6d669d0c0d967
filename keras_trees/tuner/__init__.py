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

from keras_trees.api_export import public_api
from keras_trees.tuner import (  # noqa: F401  (each module exports its HyperModel)
    _base,
    convex_polytope,
    end_to_end,
    hinge_forest,
    non_greedy,
    tree_ensemble,
)

__all__ = public_api(__name__)
