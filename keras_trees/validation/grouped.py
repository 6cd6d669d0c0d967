"""Several runtime checks, one host round trip under ``jax.jit``.

Inside ``jax.jit`` every check of :mod:`keras_trees.validation.tensors` is a
``jax.debug.callback``: one transfer to the host and one Python call each time
the compiled function runs. A layer that checks its inputs, a handful of
variables and its topology at every call pays that a dozen times per batch,
which costs more than the routing itself on small batches.
:func:`one_runtime_check` gathers the traced checks made inside its block and
issues them as one callback (a vector of booleans) that raises the message of
the first failed check, exactly as the separate checks would have. Concrete
values, ``tf.function`` (asserts are cheap graph ops) and symbolic tensors are
checked as before, at once.
"""

import contextlib
import threading

import numpy as np

from keras_trees.validation import tensors


def _raise_first(oks, messages, errors):
    oks = np.asarray(oks)
    for ok, message, error in zip(oks, messages, errors):
        if not bool(ok):
            raise error(message)


@contextlib.contextmanager
def one_runtime_check():
    """Within the block, checks traced by ``jax.jit`` are gathered; they run as
    one ``jax.debug.callback`` when the block ends."""
    pending = []
    original = tensors.require
    owner = threading.get_ident()

    def gather(ok, message, error=ValueError):
        if threading.get_ident() == owner and tensors._jax_traced(ok):
            pending.append((ok, message, error))
        else:
            original(ok, message, error)

    gather.gathers = True
    tensors.require = gather
    try:
        yield
    finally:
        tensors.require = original
    if pending and getattr(original, "gathers", False):  # nested: the outer block issues them
        for check in pending:
            original(*check)
    elif pending:
        import jax
        import jax.numpy as jnp

        oks = jnp.stack([jnp.asarray(ok, dtype=bool).reshape(()) for ok, _, _ in pending])
        jax.debug.callback(_raise_first, oks, [m for _, m, _ in pending], [e for _, _, e in pending])
