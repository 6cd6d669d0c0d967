"""Checks that an array about to be allocated fits in memory: a clear
``ValueError`` naming what asked for it and how much it needs, before NumPy
tries (and fails, or swaps) to allocate it.

Heap-layout arrays grow as ``2**(max_depth + 1)`` positions per tree, so a deep
unbalanced tree (a scikit-learn tree of depth 40, a document saying
``max_depth: 40``) would ask for terabytes.
"""

import os

from keras_trees import topology

# Fraction of physical memory one conversion may take (the arrays are copied at
# least once more when a Forest is made).
_FRACTION = 0.25


def available_bytes():
    """Physical memory of this machine (64 GiB when the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 64 * 2**30


def format_bytes(num_bytes):
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= size:
            return f"{num_bytes / size:.1f} {unit}"
    return f"{int(num_bytes)} bytes"


def heap_bytes(num_trees, max_depth, bytes_per_position, bytes_per_internal=0):
    """Bytes of heap-layout arrays: ``bytes_per_position`` for each of the
    ``2**(max_depth + 1) - 1`` positions and ``bytes_per_internal`` for each of
    the ``2**max_depth - 1`` internal positions, per tree (exact Python ints)."""
    return int(num_trees) * (topology.num_positions(int(max_depth)) * int(bytes_per_position)
                             + topology.num_internal(int(max_depth)) * int(bytes_per_internal))


def largest_depth(num_trees, bytes_per_position, bytes_per_internal=0, limit=None):
    """The largest ``max_depth`` whose heap arrays fit in ``limit`` bytes."""
    limit = _limit() if limit is None else limit
    depth = 0
    while depth < 62 and heap_bytes(num_trees, depth + 1, bytes_per_position, bytes_per_internal) <= limit:
        depth += 1
    return depth


def _limit():
    return int(available_bytes() * _FRACTION)


def check_heap(what, num_trees, max_depth, bytes_per_position, bytes_per_internal=0, hint=""):
    """Raises ``ValueError`` when heap arrays of ``num_trees`` trees of
    ``max_depth`` would not fit in a quarter of this machine's memory."""
    needed = heap_bytes(num_trees, max_depth, bytes_per_position, bytes_per_internal)
    limit = _limit()
    if needed > limit:
        fits = largest_depth(num_trees, bytes_per_position, bytes_per_internal, limit)
        raise ValueError(
            f"{what}: max_depth={max_depth} would need about {format_bytes(needed)} for its heap "
            f"arrays (2**(max_depth + 1) - 1 = {topology.num_positions(int(max_depth))} positions per tree); "
            f"the limit is {format_bytes(limit)} (a quarter of this machine's memory), i.e. "
            f"max_depth <= {fits}{'; ' + hint if hint else ''}"
        )
    return needed
