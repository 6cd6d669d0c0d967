"""scikit-learn compatible estimators, one classifier (and regressor) per family.

Needs scikit-learn >= 1.6 (the ``sklearn`` extra). Each estimator packages its
paper's recipe (see the class docstrings) behind ``fit``/``predict``/
``predict_proba``/``score``, takes NumPy arrays or pandas frames with numeric,
categorical and missing values (preprocessed by scikit-learn imputers and
encoders, ``preprocessor_``), and exposes the trained Keras model as
``model_`` (``model_.save("model.keras")``, ``keras_trees.export_portable``).

>>> from sklearn.datasets import load_breast_cancer
>>> from keras_trees.estimators import TreeEnsembleClassifier
>>> X, y = load_breast_cancer(return_X_y=True, as_frame=True)
>>> clf = TreeEnsembleClassifier(max_depth=3, max_epochs=5, random_state=0).fit(X, y)  # doctest: +SKIP
>>> clf.predict_proba(X).shape  # doctest: +SKIP
(569, 2)
"""

try:
    import sklearn  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        'keras_trees.estimators needs scikit-learn: pip install "keras-trees[sklearn]"') from e

from keras_trees.api_export import public_api
from keras_trees.estimators import (  # noqa: F401  (each module exports its estimators)
    convex_polytope,
    end_to_end,
    hinge_forest,
    non_greedy,
    tree_ensemble,
)

__all__ = public_api(__name__)
