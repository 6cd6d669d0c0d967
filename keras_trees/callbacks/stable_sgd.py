"""Stable SGD (SSGD) for non-greedy trees (Norouzi et al. 2015, Section 6, Eq. 14)."""

import math

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.validation import arguments, bounds


@keras_trees_export("keras_trees.callbacks")
class StableSGD(keras.callbacks.Callback):
    """Keeps the leaf assignments of the training data fixed between rounds.

    At the start of training and of every round the callback freezes the
    current splits ([`NonGreedyTree.update_assignments`][keras_trees.layers.non_greedy_tree.NonGreedyTree.update_assignments]): the bound then
    constrains ``h`` to the frozen leaf ``a(x)`` (Eq. 14), which changes the
    assignment of samples to leaves more conservatively than SGD. A new round
    starts when the epoch's bound (``monitor``, the training ``loss``) has not
    improved by more than ``min_delta`` (relative) for ``patience`` epochs, or
    after ``max_round_epochs`` epochs. The assignments are kept per sample as a
    function of ``x`` (routing by the frozen splits), so no per-sample state is
    stored and shuffling is harmless. At the end of training the model returns
    to plain SGD. The model may be a [`NonGreedyTree`][keras_trees.layers.non_greedy_tree.NonGreedyTree] or contain one (or
    several) as sub-models; the callback acts on every tree it finds.

    Args:
        min_delta: relative improvement of the bound below which a round ends.
        patience: epochs without such improvement before a new round.
        max_round_epochs: optional cap on the length of a round.
        monitor: the logged quantity to watch (default ``"loss"``, the bound).
    """

    def __init__(self, min_delta=1e-3, patience=1, max_round_epochs=None, monitor="loss"):
        super().__init__()
        self.min_delta = bounds.nonnegative_float("min_delta", min_delta)
        self.patience = arguments.positive_int("patience", patience)
        self.max_round_epochs = (None if max_round_epochs is None
                                 else arguments.positive_int("max_round_epochs", max_round_epochs))
        if not isinstance(monitor, str):
            raise TypeError(f"monitor must be the name of a logged quantity (a string), got {monitor!r}")
        self.monitor = monitor
        self.rounds = 0

    def _trees(self):
        """The non-greedy trees trained by ``self.model``: the model itself or
        trees nested in it (e.g. behind preprocessing layers)."""
        model = self.model
        if hasattr(model, "_flatten_layers"):
            layers = model._flatten_layers(include_self=True, recursive=True)
        else:
            layers = [model]
        trees = [layer for layer in layers
                 if callable(getattr(layer, "update_assignments", None))
                 and callable(getattr(layer, "release_assignments", None))]
        if not trees:
            raise TypeError(
                f"StableSGD needs a NonGreedyTree model (or a model containing one), got {type(model).__name__}"
            )
        return trees

    def _new_round(self):
        for tree in self._trees():
            tree.update_assignments()
        self.rounds += 1
        self._best = math.inf
        self._wait = 0
        self._round_epochs = 0

    def on_train_begin(self, logs=None):
        self.rounds = 0
        self._new_round()

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            raise ValueError(f"StableSGD: monitor={self.monitor!r} is not in the logs {sorted(logs or {})}; "
                             "pass the name of a logged quantity")
        self._round_epochs += 1
        if value < self._best - self.min_delta * abs(self._best if math.isfinite(self._best) else value):
            self._best = value
            self._wait = 0
        else:
            self._wait += 1
        if self._wait >= self.patience or (
            self.max_round_epochs is not None and self._round_epochs >= self.max_round_epochs
        ):
            self._new_round()

    def on_train_end(self, logs=None):
        for tree in self._trees():
            tree.release_assignments()

    def get_config(self):
        return {
            "min_delta": self.min_delta,
            "patience": self.patience,
            "max_round_epochs": self.max_round_epochs,
            "monitor": self.monitor,
        }
