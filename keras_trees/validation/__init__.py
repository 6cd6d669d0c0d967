"""Input validation shared by layers, ops and loaders: each check is written once
here and holds on every path (eager, ``tf.function``, ``jax.jit``, the compiled
kernels' Python wrappers, the ``keras.ops`` reference and loaded files).

One module per concern:

- `keras_trees.validation.tensors`: runtime checks of tensor values (finite,
  non-negative, integer ids in range, dtypes) that raise ``ValueError`` /
  ``TypeError`` on concrete values and still hold inside compiled graphs.
- `keras_trees.validation.arguments`: Python arguments of constructors
  and functions (positive integers and numbers, choices, the task).

Errors name the argument and say what was expected. On concrete values (eager
TensorFlow, NumPy, eager JAX and PyTorch) they are ``ValueError``/``TypeError``.
Inside a compiled graph a value is only known when the graph runs, so the same
message arrives in the backend's runtime error: ``tf.errors.InvalidArgumentError``
inside ``tf.function``, ``jax.errors.JaxRuntimeError`` inside ``jax.jit``.
"""
