"""Keras Tuner search space for non-greedy oblique trees (Norouzi et al. 2015)."""

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.layers import NonGreedyTree, _validation
from keras_trees.tuner._base import TreeHyperModel


@keras_trees_export("keras_trees.tuner")
class NonGreedyHyperModel(TreeHyperModel):
    """A [`NonGreedyTree`][keras_trees.layers.non_greedy_tree.NonGreedyTree] initialized from a CART tree of the same depth.

    Hyperparameters (the paper picks ``nu`` on validation data for each depth):
    ``depth`` 2-``max_depth`` (the tree's ``max_depth``; the hyperparameter
    keeps its 0.1.0 name so saved tuner trials reload), ``nu`` 1-100 (log; the row-norm bound of the
    splits), ``lr_per_nu`` 1e-4-1e-2 (log; SGD learning rate per unit of
    ``nu``, momentum 0.9), plus ``batch_size``. The trial's ``fit`` fits the
    scikit-learn CART initialization (entropy criterion; scikit-learn is
    needed) on the trial's training data, then trains with ``model.fit``.
    """

    def __init__(self, input_shape, num_classes=None, units=None, max_depth=12, batch_sizes=(64, 128, 256),
                 **kwargs):
        super().__init__(input_shape, num_classes=num_classes, units=units, learning_rate=1.0,
                         batch_sizes=batch_sizes, **kwargs)
        if len(self.input_shape) != 1:
            raise ValueError(f"NonGreedyHyperModel needs flat inputs (features,), got {self.input_shape}")
        self.max_depth = _validation.positive_int("max_depth", max_depth)

    def build(self, hp):
        depth = self.clamped_int(hp, "depth", min(2, self.max_depth), self.max_depth)
        nu = hp.Float("nu", 1.0, 100.0, sampling="log")
        lr = hp.Float("lr_per_nu", 1e-4, 1e-2, sampling="log") * nu
        hp.Choice("batch_size", self.batch_sizes)
        task = {"num_classes": self.num_classes} if self.num_classes is not None else {"units": self.units}
        model = NonGreedyTree(max_depth=depth, nu=nu, **task)
        model.build((None,) + self.input_shape)
        metrics = (["accuracy"] if self.num_classes is not None else []) if self.metrics is None else self.metrics
        model.compile(keras.optimizers.SGD(lr, momentum=0.9), metrics=metrics)
        return model

    def fit(self, hp, model, x=None, y=None, *args, **kwargs):
        from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

        from keras_trees.interop.sklearn import from_sklearn

        if self.num_classes is not None:
            cart = DecisionTreeClassifier(max_depth=model.max_depth, criterion="entropy", random_state=0)
        else:
            cart = DecisionTreeRegressor(max_depth=model.max_depth, random_state=0)
        # The leaves of lowest training bound: from the default smoothing SGD
        # lowers the bound while the accuracy falls.
        model.initialize_from(from_sklearn(cart.fit(x, y)), leaf_smoothing="bound", x=x, y=y)
        kwargs.pop("batch_size", None)
        return model.fit(x, y, *args, batch_size=hp.get("batch_size"), **kwargs)

    def get_config(self):
        return super().get_config() | {"max_depth": self.max_depth}
