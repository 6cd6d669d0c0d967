"""One small feature model per split (Hehn et al. 2019, Section 3.4).

The paper trains "a very simple CNN" at each split of a tree on MNIST, whose
scalar output is that split's feature. [`per_split_features`][keras_trees.layers.per_split_features.per_split_features] builds such a
bank as one Functional model with an output per split, to be passed as
``split_features`` of an [`EndToEndTree`][keras_trees.layers.end_to_end_tree.EndToEndTree] (or
forest) with ``split_type="per_split"``: split ``n`` of tree ``t`` then reads
output ``t * (2**max_depth - 1) + n`` only, through a learned scale and bias.
"""

import keras

from keras_trees.api_export import keras_trees_export
from keras_trees.validation.arguments import choice, positive_int


def _shape(name, value):
    """A shape of positive integers, or a ``TypeError``/``ValueError`` naming it
    (``int()`` would truncate 2.7 and accept "8")."""
    try:
        dims = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a tuple of integers, got {value!r}") from None
    return tuple(positive_int(f"{name}[{i}]", d) for i, d in enumerate(dims))


@keras_trees_export("keras_trees.layers")
def split_cnn(input_shape, kernel_size=5, channels=(3, 6), hidden=50, padding="valid", name=None):
    """The split CNN of Section 3.4: ``Conv kxk @ c1 -> MaxPool 2 -> ReLU -> Conv kxk @ c2
    -> MaxPool 2 -> ReLU -> Dense(hidden) -> ReLU -> Dense(1)``.

    With the defaults on 28x28 MNIST images the flattened feature map has
    4 * 4 * 6 = 96 entries, the paper's "96 x 50" layer. Use ``kernel_size=3,
    padding="same"`` for small images such as scikit-learn's 8x8 digits.

    Args:
        input_shape: ``(height, width)`` or ``(height, width, channels)``.
        kernel_size: convolution kernel size.
        channels: output channels of the two convolutions.
        hidden: width of the hidden dense layer.
        padding: convolution padding, ``"valid"`` (the paper) or ``"same"``.
        name: model name.
    """
    input_shape = _shape("input_shape", input_shape)
    if len(input_shape) not in (2, 3):
        raise ValueError(f"split_cnn needs image inputs (height, width[, channels]), got {input_shape}")
    kernel_size = (_shape("kernel_size", kernel_size) if isinstance(kernel_size, (tuple, list))
                   else positive_int("kernel_size", kernel_size))
    channels = _shape("channels", channels)
    hidden = positive_int("hidden", hidden)
    padding = choice("padding", padding, {"valid", "same"})
    layers = [keras.Input(input_shape)]
    if len(input_shape) == 2:
        layers.append(keras.layers.Reshape(input_shape + (1,)))
    for c in channels:
        layers += [
            keras.layers.Conv2D(int(c), kernel_size, padding=padding),
            keras.layers.MaxPooling2D(2),
            keras.layers.ReLU(),
        ]
    layers += [keras.layers.Flatten(), keras.layers.Dense(int(hidden), activation="relu"), keras.layers.Dense(1)]
    return keras.Sequential(layers, name=name)


@keras_trees_export("keras_trees.layers")
def per_split_features(input_shape, max_depth, num_trees=1, split_model=None, name="per_split_features"):
    """A Functional model with one sub-model per split of ``num_trees`` heaps of ``max_depth``.

    Every position that may become a split gets its own sub-model (pre-allocated,
    like every other per-split variable, so grown trees reload into freshly built
    models). Each sub-model maps the input to one scalar; the outputs are
    concatenated in the order tree-major, heap position-minor.

    Note: at inference the tree routes each sample along one path, but this
    Keras model computes every split's feature; the saving is in the routing,
    not in the feature models.

    Args:
        input_shape: input shape without the batch dimension.
        max_depth: the tree's ``max_depth``.
        num_trees: trees sharing the bank (a forest's ``num_trees``).
        split_model: callable ``index -> keras layer/model`` mapping the input to
            shape ``(batch, 1)``; defaults to [`split_cnn`][keras_trees.layers.per_split_features.split_cnn] on ``input_shape``.
        name: model name.

    Example:

    >>> import numpy as np, keras
    >>> from keras_trees.layers import EndToEndTree, per_split_features, split_cnn
    >>> bank = per_split_features((8, 8), max_depth=2, split_model=lambda i: split_cnn((8, 8), 3, padding="same"))
    >>> tree = EndToEndTree(max_depth=2, num_classes=10, split_type="per_split", split_features=bank)
    >>> keras.Sequential([keras.Input((8, 8)), tree]).predict(np.zeros((4, 8, 8)), verbose=0).shape
    (4, 10)
    """
    input_shape = _shape("input_shape", input_shape)
    max_depth = positive_int("max_depth", max_depth)
    num_trees = positive_int("num_trees", num_trees)
    num_splits = num_trees * (2**max_depth - 1)
    if split_model is None:
        split_model = lambda index: split_cnn(input_shape, name=f"split_cnn_{index}")  # noqa: E731
    inputs = keras.Input(input_shape)
    outputs = []
    for index in range(num_splits):
        out = split_model(index)(inputs)
        if tuple(out.shape[1:]) != (1,):
            raise ValueError(f"split_model({index}) must output shape (batch, 1), got {tuple(out.shape)}")
        outputs.append(out)
    merged = outputs[0] if num_splits == 1 else keras.layers.Concatenate()(outputs)
    return keras.Model(inputs, merged, name=name)
