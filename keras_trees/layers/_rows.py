"""Features of any rank >= 2 as the ``(rows, features)`` matrix the ops take, and back."""

from keras import ops


def to_rows(x):
    """``(x as (rows, features), lead)``: ``lead`` the leading axes to restore
    with `from_rows`, or None when ``x`` is already a matrix (no reshape:
    eager PyTorch pays for every op)."""
    if len(x.shape) == 2:
        return x, None
    return ops.reshape(x, (-1, x.shape[-1])), ops.shape(x)[:-1]


def from_rows(y, lead, *tail):
    """``y`` of ``(rows, *tail)`` with its leading axes ``lead`` restored (None: as it is)."""
    return y if lead is None else ops.reshape(y, (*lead, *tail))
