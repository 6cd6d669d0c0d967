"""End-to-end learned deterministic decision forest (Hehn et al. 2019, Section 2.7)."""

from keras_trees.api_export import keras_trees_export
from keras_trees.layers._end_to_end import EndToEndTreesBase


@keras_trees_export("keras_trees.layers")
class EndToEndForest(EndToEndTreesBase):
    """A forest of [`EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree] trees whose prediction is their mean (Eq. 20).

    Each split sees a random subset of the features (Section 2.7):
    ``features_per_split`` features drawn uniformly (letter: 8 of 16), or for
    image-shaped inputs a random ``patch_size`` 2D patch (USPS: 10x10, MNIST:
    15x15). Subsets are redrawn for every new stump during greedy growth. At
    inference each sample follows one path per tree (at most
    ``num_trees * max_depth`` split evaluations; see ``split_evaluations``).

    Training: all trees are grown level by level at the same time
    ([`keras_trees.callbacks.GreedyLevelGrowth`][keras_trees.callbacks.greedy_level_growth.GreedyLevelGrowth]; a stump only sees the
    samples routed to it, so trees do not interact while growing) and then
    finetuned together. The objective is the likelihood of the forest's mean
    prediction (Eq. 20 inside Eq. 4), and EM responsibilities are normalized over
    all trees' leaves accordingly; the paper trains every tree on its own
    likelihood (the two coincide for one tree).

    Args:
        num_trees: number of trees ``T``.
        max_depth, num_classes, units, ...: as for [`EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree].
        features_per_split: features per split (uniform random subsets).
        patch_size: ``int`` or ``(height, width)`` random 2D patches for inputs
            of shape ``(height, width[, channels])``.

    Example:

    >>> import numpy as np, keras
    >>> from keras_trees.layers import EndToEndForest
    >>> forest = EndToEndForest(num_trees=4, max_depth=3, num_classes=3, features_per_split=2, seed=0)
    >>> model = keras.Sequential([keras.Input((5,)), forest])
    >>> model.predict(np.zeros((2, 5), "float32"), verbose=0).shape
    (2, 3)
    >>> forest.split_evaluations(np.zeros((2, 5), "float32"))  # 4 perfect trees of depth 3
    12.0
    """

    def __init__(self, num_trees, max_depth=10, num_classes=None, units=None, **kwargs):
        super().__init__(num_trees=num_trees, max_depth=max_depth, num_classes=num_classes,
                         units=units, **kwargs)

    def get_config(self):
        config = super().get_config()
        config["num_trees"] = self.num_trees
        return config
