"""Per-thread modes: a flag on a ``threading.local`` for the duration of a
``with`` block (the dispatch's `reference_only` and `portable_bodies`, the
benchmarks' unchecked tracing)."""

import contextlib


@contextlib.contextmanager
def thread_flag(local, name, value=True):
    """Sets ``local.<name>`` to ``value`` within the block, then back to what it
    was (``False`` when unset)."""
    previous = getattr(local, name, False)
    setattr(local, name, value)
    try:
        yield
    finally:
        setattr(local, name, previous)
