"""What every tree layer offers inspection and interop: its trained trees as a
[`keras_trees.forest.Forest`][keras_trees.forest.Forest] (``to_forest``) and the rows those trees read
(``forest_features``)."""

import numpy as np
from keras_trees._arrays import to_numpy


def numpy(value):
    """A variable or tensor as a NumPy array."""
    return np.asarray(to_numpy(value))


class ForestLayer:
    """Mixin of the tree layers (each family implements ``_forest``)."""

    def to_forest(self):
        """The trained trees as a [`keras_trees.forest.Forest`][keras_trees.forest.Forest]: topology,
        splits, leaves and aggregation, read from the layer's variables now (a
        copy: later training does not change it). The layer must be built."""
        if not self.built:
            raise ValueError(f"layer {self.name!r} is not built yet: call it on data first")
        return self._forest()

    def forest_features(self, inputs):
        """``(rows, input_dim)`` NumPy rows that the splits of `to_forest`
        read when the layer receives ``inputs``; here the inputs with every
        dimension but the last flattened into rows."""
        x = numpy(inputs)
        return x.reshape(-1, x.shape[-1])
