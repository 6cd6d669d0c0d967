"""Annealing of convex polytope trees' split functions (Armandpour & Zhou 2021, Appendix B)."""

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.callbacks._common import layer_names, nonnegative_float, optional_positive_float
from keras_trees.layers._forest_layer import numpy


def polytope_layers(model, names=None):
    from keras_trees.layers.convex_polytope_tree import ConvexPolytopeTree

    layers = [l for l in model._flatten_layers(include_self=True, recursive=True) if isinstance(l, ConvexPolytopeTree)]
    if names is not None:
        names = [names] if isinstance(names, str) else list(names)
        layers = [l for l in layers if l.name in names]
    if not layers:
        raise ValueError("found no ConvexPolytopeTree layer" + (f" named {names}" if names else "")
                         + " in the model passed to fit()")
    return layers


@keras_trees_export("keras_trees.callbacks")
class PolytopeAnnealing(keras.callbacks.Callback):
    """Raises ``lambda`` of ``f_lambda = 1 / (1 + ((1 - f) / (1 - p0))**lambda)`` per epoch.

    At the start of epoch ``e`` every split of every
    [`ConvexPolytopeTree`][keras_trees.layers.convex_polytope_tree.ConvexPolytopeTree] in the
    model gets ``lambda = steepness + increment * e`` (capped at
    ``max_steepness``), written into the layer's non-trainable ``steepness``
    variable with ``assign``, so the compiled training step sees it (no
    variable is created during training). Trees are found recursively, also
    inside nested ``Sequential``, Functional and subclassed models.
    ``fit_greedy`` and ``refine`` apply the same schedule internally.

    Args:
        increment: ``lambda`` increase per epoch (>= 0).
        max_steepness: optional cap.
        layers: optional layer name(s).

    >>> PolytopeAnnealing(0.1).increment
    0.1
    """

    def __init__(self, increment=0.1, max_steepness=None, layers=None):
        super().__init__()
        self.increment = nonnegative_float("increment", increment)
        self.max_steepness = optional_positive_float("max_steepness", max_steepness)
        self.layer_names = layer_names(layers)

    def on_epoch_begin(self, epoch, logs=None):
        from keras_trees.layers._polytope_training import anneal

        for layer in polytope_layers(self.model, self.layer_names):
            anneal(layer, epoch, self.increment, numpy(layer.is_split()), self.max_steepness)

    def get_config(self):
        return {"increment": self.increment, "max_steepness": self.max_steepness, "layers": self.layer_names}
