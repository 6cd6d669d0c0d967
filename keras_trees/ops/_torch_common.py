"""Shared pieces of the PyTorch (``torch.library``) wrappers. Imported only
under the PyTorch backend with the kernels loaded (``keras_trees.ops._library``).

The ops live in the ``keras_trees`` namespace (``torch.ops.keras_trees.*``),
registered from C++ (``custom_ops/torch/``) with CPU kernels; each wrapper
module registers its ops' fake kernels (``torch.library.register_fake``: the
output shapes, so ``torch.compile`` traces the ops without graph breaks) and
autograd formulas (``torch.library.register_autograd``, calling the backward
ops). ``torch.func`` transforms (``vmap``, ``grad``, ``jacrev``, ...) are not
supported: they raise ``NotImplementedError`` with `NO_FUNC`.
"""

import keras
import torch

_SUPPORTED = (torch.float32, torch.float64)
NO_FUNC = ("keras-trees kernels do not support torch.func transforms (vmap, grad, jacrev, ...): use "
           "torch.autograd (loss.backward(), torch.autograd.grad) and call the op on the whole batch, or "
           "keras_trees.ops.reference_only() for the keras.ops path")


def ops():
    return torch.ops.keras_trees


def no_func_transforms():
    """Raises `NO_FUNC` inside a ``torch.func`` transform (whose
    autograd.Function rules the registered formulas do not meet; PyTorch's own
    error would not say what to do). Called by every wrapper; free under
    ``torch.compile``."""
    if torch.compiler.is_compiling():
        return
    if torch._C._functorch.peek_interpreter_stack() is not None:
        raise NotImplementedError(NO_FUNC)


def tensor(x):
    """A torch tensor: tensors as they are, a Keras variable's value, else
    ``torch.as_tensor`` (NumPy arrays, Python numbers)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, keras.Variable):
        return x.value
    return torch.as_tensor(x)


def compute_dtype(x):
    """float32 or float64: the kernels' dtypes (mixed precision computes in float32)."""
    return x.dtype if x.dtype in _SUPPORTED else torch.float32


def out_dtype(x):
    """The dtype results come back in: x's when floating, else float32."""
    return x.dtype if x.dtype.is_floating_point else torch.float32


def cast(dtype, *arrays):
    """Dense (contiguous) tensors of ``dtype``: the kernels read row-major data.
    Every wrapper passes its inputs here first (see `no_func_transforms`)."""
    no_func_transforms()
    return [tensor(a).to(dtype).contiguous() for a in arrays]


def grad_or_zeros(grad, like):
    """An output's incoming gradient (None for an unused output: zeros)."""
    if grad is None:
        return torch.zeros_like(like)
    return grad.to(like.dtype).contiguous()


def no_vmap(name):
    """Registers a vmap rule for ``keras_trees::name`` that raises
    `NO_FUNC` (instead of PyTorch's generic message), for direct calls
    of the op under ``torch.func.vmap``."""

    def rule(info, in_dims, *args, **kwargs):
        raise NotImplementedError(NO_FUNC)

    torch.library.register_vmap(f"keras_trees::{name}", rule)


def register_ops(fakes, autograd=None):
    """Registers, in the ``keras_trees`` namespace, the fake kernel of each op
    of ``fakes`` (name -> fake), the autograd formula of each op of
    ``autograd`` (name -> (backward, setup_context)), and for every op of
    ``fakes`` a vmap rule that raises `NO_FUNC`. Each wrapper module's
    ``register()`` is one call of this."""
    for name, fake in fakes.items():
        torch.library.register_fake(f"keras_trees::{name}", fake)
    for name, (backward, setup_context) in (autograd or {}).items():
        torch.library.register_autograd(f"keras_trees::{name}", backward, setup_context=setup_context)
    for name in fakes:
        no_vmap(name)
