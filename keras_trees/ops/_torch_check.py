"""PyTorch (``torch.library``) wrapper of the compiled check op
(``keras_trees::check``): the runtime input checks of one call inside
``torch.compile``'d code as one op that the checked output depends on
(`keras_trees.validation.tensors.torch_check`), instead of a graph break
on every ``bool(tensor)``. Eager calls check at once without it. Imported
only under the PyTorch backend with the kernels loaded."""

import torch

from keras_trees.ops import _torch_common as common


def _fake(oks, messages):
    return oks.new_empty((), dtype=torch.bool)


def check(oks, messages):
    """A true boolean scalar once every condition of ``oks`` (scalar booleans)
    holds; else ``ValueError`` with the message of the first false one."""
    stacked = torch.stack([torch.as_tensor(ok, dtype=torch.bool).reshape(()) for ok in oks]).detach()
    text = "".join(str(m).replace("\n", " ") + "\n" for m in messages)
    return common.ops().check(stacked.cpu(), text)


def depend(x, token):
    """``x``, computed only once ``token`` (the result of `check`) is."""
    other = float("nan") if x.dtype.is_floating_point or x.dtype.is_complex else 0
    return torch.where(token.to(x.device), x, torch.full_like(x, other))


def register():
    """Registers the ops' fake kernels, autograd formulas and vmap errors
    (called once, when ``keras_trees.ops._library`` has loaded the library)."""
    common.register_ops({"check": _fake})
    # The op's result may go unread (a check without an output to depend on): it
    # is kept in compiled graphs for its error.
    torch.fx.node.has_side_effect(torch.ops.keras_trees.check.default)
