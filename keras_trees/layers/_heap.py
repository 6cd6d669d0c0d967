"""Sizes shared by the layers stored on the heap topology of :mod:`keras_trees.topology`."""

from keras_trees import topology


class HeapTreeMixin:
    """For tree layers with ``max_depth`` and a task from ``_validation.task``
    (``num_classes`` for classification or ``units`` for regression)."""

    @property
    def is_classifier(self):
        return self.num_classes is not None

    @property
    def output_dim(self):
        return self.num_classes if self.is_classifier else self.units

    @property
    def num_internal(self):
        """Heap positions that can hold a split: ``2**max_depth - 1``."""
        return topology.num_internal(self.max_depth)

    @property
    def num_positions(self):
        """All heap positions: ``2**(max_depth + 1) - 1``."""
        return topology.num_positions(self.max_depth)
