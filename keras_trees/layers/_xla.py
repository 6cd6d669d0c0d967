"""Whether a keras-trees layer may be compiled with XLA (``jit_compile``)."""

from keras_trees.ops import _library


class XLACompatibility:
    """Mixin for every layer and model that may call the compiled ops.

    ``keras.layers.Layer.__init__`` sets ``self.supports_jit = True`` on every
    instance, so a class attribute cannot opt out. This property reports the
    truth instead: on the TensorFlow backend with the op library loaded, the
    layers call custom ops that XLA cannot compile, so Keras must not turn XLA on
    (``jit_compile="auto"`` turns it on whenever TensorFlow sees a GPU). On JAX,
    PyTorch, or with the ops disabled, the layers are pure ``keras.ops`` and
    compile like any other layer. Inside a user's own XLA-compiled
    ``tf.function`` the ops detect the XLA context and take the reference path.
    """

    @property
    def supports_jit(self):
        return not _library.kernels_block_xla()

    @supports_jit.setter
    def supports_jit(self, value):
        # Keras assigns True in Layer.__init__; the property above decides.
        pass
