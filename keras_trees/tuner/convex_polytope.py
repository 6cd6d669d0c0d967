"""Keras Tuner search space for convex polytope trees (Armandpour & Zhou 2021)."""

import numpy as np

from keras_trees.api_export import keras_trees_export
from keras_trees.layers import ConvexPolytopeTree, _validation
from keras_trees.losses import GammaProcessPrior
from keras_trees.tuner._base import TreeHyperModel
from keras_trees.validation import bounds


@keras_trees_export("keras_trees.tuner")
class ConvexPolytopeHyperModel(TreeHyperModel):
    """A [`ConvexPolytopeTree`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree] grown by ``fit_greedy`` in every trial.

    Hyperparameters (the paper tunes K, the learning rate, the epochs, the
    batch size and the prior per data set): ``max_depth`` 2-``max_depth``,
    ``num_experts`` (K) 1/5/10/20, ``epochs_per_level`` 10/20/30,
    ``annealing_increment`` 0.05/0.1/0.2, ``refine_epochs`` 0/10, the
    gamma-process prior (Eq. 14, [`keras_trees.losses.GammaProcessPrior`][keras_trees.losses.gamma_process_prior.GammaProcessPrior])
    through ``prior_weight`` 0/0.1/1 (its strength against the likelihood,
    on top of the layer's ``1 / N``; 0 trains without it), ``prior_gamma0``
    1/5/20 (its mass: small values switch unneeded experts off) and
    ``prior_a_beta`` 0.01/1 (the Student-t shrinkage of the experts' weights:
    larger is stronger), plus ``learning_rate`` and ``batch_size``. The
    prior's ``c0`` and ``b_beta`` keep their defaults. The lists of choices of
    K, the epochs and the prior are arguments.

    The trial's ``fit`` runs ``fit_greedy`` on the training data (the depth is
    chosen on ``validation_data`` when given) and reports ``val_accuracy``
    (classification) or ``val_loss`` (mean squared error) to the tuner through
    its callbacks, so ``objective="val_accuracy"`` (or ``"val_loss"``) selects
    trials and the best tree reloads with ``tuner.get_best_models()``.
    ``verbose`` (as given to ``tuner.search``; default ``"auto"``),
    ``sample_weight`` and ``class_weight`` reach ``fit_greedy``.
    """

    def __init__(self, input_shape, num_classes=None, units=None, max_depth=8,
                 num_experts=(1, 5, 10, 20), learning_rate=(3e-3, 3e-2), batch_sizes=(256, 512),
                 epochs_per_level=(10, 20, 30), prior_weight=(0.0, 0.1, 1.0), prior_gamma0=(1.0, 5.0, 20.0),
                 prior_a_beta=(0.01, 1.0), **kwargs):
        super().__init__(input_shape, num_classes=num_classes, units=units, learning_rate=learning_rate,
                         batch_sizes=batch_sizes, **kwargs)
        self.max_depth = _validation.positive_int("max_depth", max_depth)
        self.num_experts = _choices("num_experts", num_experts, _validation.positive_int)
        self.epochs_per_level = _choices("epochs_per_level", epochs_per_level, _validation.positive_int)
        self.prior_weight = _choices("prior_weight", prior_weight, bounds.nonnegative_float)
        self.prior_gamma0 = _choices("prior_gamma0", prior_gamma0, _validation.positive_float)
        self.prior_a_beta = _choices("prior_a_beta", prior_a_beta, bounds.nonnegative_float)

    @property
    def outputs_probabilities(self):
        return True  # empirical class distributions at the leaves

    def tree_layers(self, hp):
        depth = self.clamped_int(hp, "max_depth", min(2, self.max_depth), self.max_depth)
        experts = hp.Choice("num_experts", self.num_experts)
        hp.Choice("epochs_per_level", self.epochs_per_level)
        hp.Choice("annealing_increment", [0.05, 0.1, 0.2])
        hp.Choice("refine_epochs", [0, 10])
        prior = GammaProcessPrior.weighted(hp.Choice("prior_weight", self.prior_weight),
                                           gamma0=hp.Choice("prior_gamma0", self.prior_gamma0),
                                           a_beta=hp.Choice("prior_a_beta", self.prior_a_beta))
        task = {"num_classes": self.num_classes} if self.num_classes is not None else {"units": self.units}
        return [ConvexPolytopeTree(max_depth=depth, num_experts=experts, prior=prior, **task)]

    def fit(self, hp, model, x=None, y=None, validation_data=None, callbacks=None, **kwargs):
        tree = model.layers[-1]
        tree.fit_greedy(
            x, y, validation_data=validation_data, epochs=hp.get("epochs_per_level"),
            batch_size=hp.get("batch_size"), learning_rate=hp.get("learning_rate"),
            annealing_increment=hp.get("annealing_increment"), refine_epochs=hp.get("refine_epochs"),
            verbose=kwargs.get("verbose", "auto"), sample_weight=kwargs.get("sample_weight"),
            class_weight=kwargs.get("class_weight"),
        )
        logs = {}
        for name, (xs, ys) in (("", (x, y)), ("val_", validation_data)) if validation_data else (("", (x, y)),):
            pred = np.asarray(model.predict(xs, verbose=0, batch_size=4096))
            if self.num_classes is not None:
                logs[name + "accuracy"] = float(np.mean(pred.argmax(-1) == np.asarray(ys).reshape(-1)))
            else:
                logs[name + "loss"] = float(np.mean((pred - np.asarray(ys).reshape(pred.shape)) ** 2))
        # Report like a one-epoch fit, so the tuner records and checkpoints the trial.
        for callback in callbacks or []:
            callback.set_model(model)
            callback.on_train_begin()
            callback.on_epoch_begin(0)
            callback.on_epoch_end(0, logs=dict(logs))
            callback.on_train_end(logs=dict(logs))
        return logs

    def get_config(self):
        return super().get_config() | {"max_depth": self.max_depth, "num_experts": self.num_experts,
                                       "epochs_per_level": self.epochs_per_level, "prior_weight": self.prior_weight,
                                       "prior_gamma0": self.prior_gamma0, "prior_a_beta": self.prior_a_beta}


def _choices(name, values, check):
    """A non-empty tuple or list of values (or one value), checked one by one."""
    values = values if isinstance(values, (list, tuple)) else [values]
    if not values:
        raise ValueError(f"{name} must hold at least one value, got {values!r}")
    return [check(name, v) for v in values]
