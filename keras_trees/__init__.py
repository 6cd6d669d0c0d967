"""keras-trees: differentiable decision trees as Keras 3 layers.

Importing the package loads (and on first use compiles) the compiled kernels
of the active Keras backend: the custom TensorFlow ops under TensorFlow (which
also registers the ops needed to ``tf.saved_model.load`` a SavedModel exported
from a keras-trees model), the XLA FFI handlers under JAX, the
``torch.library`` ops under PyTorch.
"""

__version__ = "0.2.0"

from keras_trees import ops  # noqa: E402,F401
from keras_trees.ops._library import load as _load_ops  # noqa: E402

_load_ops()

from keras_trees import callbacks  # noqa: E402,F401
from keras_trees import constraints  # noqa: E402,F401
from keras_trees import distribute  # noqa: E402,F401
from keras_trees import export  # noqa: E402,F401
from keras_trees import initializers  # noqa: E402,F401
from keras_trees import inspection  # noqa: E402,F401
from keras_trees import interop  # noqa: E402,F401
from keras_trees import layers  # noqa: E402,F401
from keras_trees import losses  # noqa: E402,F401
from keras_trees import regularizers  # noqa: E402,F401
from keras_trees import streaming  # noqa: E402,F401
from keras_trees import topology  # noqa: E402,F401
from keras_trees.forest import Forest  # noqa: E402,F401
from keras_trees.api_export import public_api  # noqa: E402

# The exported objects (Forest, export_portable) and the public modules (those
# objects are exported to).
__all__ = ["__version__", *public_api(__name__)]
