"""PyTorch specifics of the torch binding (``torch.library`` ops of
custom_ops/torch/, wrappers keras_trees/ops/_torch_*.py): the registrations
(schema, fake kernels, autograd; ``torch.library.opcheck``), ``torch.compile``
of every op and of the layers without graph breaks, the checks inside compiled
code, dL/dx skipped when x needs no gradient, and the clear error of
``torch.func`` transforms. The kernels' numerics and error messages are checked by
tests/backends/test_compiled_kernels.py, which runs on every backend. Runs only
under ``KERAS_BACKEND=torch``; kept small: ``torch.compile`` costs seconds per
function on two cores."""

import os

import keras
import numpy as np
import pytest

from keras_trees import ops as tree_ops
from tests.backends.conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="PyTorch binding")

if BACKEND == "torch":
    import torch
    import torch._dynamo

needs_kernels = pytest.mark.skipif(bool(os.environ.get("KERAS_TREES_DISABLE_CUSTOM_OPS")),
                                   reason="KERAS_TREES_DISABLE_CUSTOM_OPS is set")


@pytest.fixture(autouse=True, scope="module")
def _fresh_inductor_cache(tmp_path_factory):
    """Inductor's caches in a folder of this run: its AOT-autograd cache is keyed
    by the forward graph, so a backward compiled against an older build of the
    ops (another schema of the backward op) would be reused from the user's
    cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    yield
    mp.undo()


def _t(a, grad=False):
    t = torch.tensor(a)
    return t.requires_grad_(True) if grad else t


def test_build_uses_torch_paths_and_is_keyed_by_torch_version():
    """Headers and libraries of torch.utils.cpp_extension, the stable ABI of
    PyTorch 2.10, a cache key of the torch version and only the cores and the
    torch adapters."""
    from torch.utils import cpp_extension

    from keras_trees import _build

    version, cflags, lflags = _build._flags("torch")
    assert version == torch.__version__
    assert cpp_extension.include_paths()[0] in cflags
    assert f"-L{cpp_extension.library_paths()[0]}" in lflags
    assert "-DTORCH_TARGET_VERSION=0x020a000000000000" in cflags
    path = _build.library_path("torch")
    assert path.name == "_keras_trees_torch.so" and path.parent.name.startswith(f"torch{torch.__version__}-")
    src = _build.source_dir()
    assert {p.relative_to(src).parts[0] for p in _build._sources("torch")} == {"core", "torch"}
    with pytest.raises(_build.BuildError, match="CUDA kernels for"):
        _build.library_path("torch", cuda=True)


@needs_kernels
def test_every_family_is_bound_and_reported():
    from keras_trees.ops import _library

    assert set(_library.DISPATCH[("torch", "cpu")]) == set(_library.FAMILIES)
    for family in _library.FAMILIES:
        assert tree_ops.custom_ops_available(family), family
    report = tree_ops.execution_report()
    assert report["summary"] == "keras-trees on torch: cpu: kernels", report["summary"]
    assert report["families"]["cpu"] == {f: "kernels" for f in _library.FAMILIES}
    with tree_ops.reference_only():
        assert not tree_ops.custom_ops_available("hinge")
        assert tree_ops.execution_report()["devices"] == {"cpu": "reference"}


def _op_samples(rng):
    """One small argument list per op of the binding."""
    f32 = "float64"  # opcheck compares gradients numerically: float64
    x = rng.normal(size=(5, 4)).astype(f32)
    t = rng.uniform(-1, 1, size=(2, 3)).astype(f32)
    f = rng.integers(0, 4, size=(2, 3)).astype("int32")
    w = rng.normal(size=(2, 4, 2)).astype(f32)
    is_split = np.ones((2, 3), bool)
    sw, sb = rng.normal(size=(2, 3, 4)).astype(f32), rng.normal(size=(2, 3)).astype(f32)
    gamma = rng.uniform(0.5, 2, size=(2, 3)).astype(f32)
    v = rng.normal(size=(2, 7, 2)).astype(f32)
    ops = torch.ops.keras_trees
    return [
        (ops.hinge_forest, (_t(x, True), _t(t, True), _t(f), _t(w, True), False)),
        (ops.hard_route, (_t(x), _t(sw), _t(sb), _t(is_split), True)),
        (ops.soft_tree_ensemble, (_t(x, True), _t(sw, True), _t(sb, True), _t(w, True), _t(np.array(1.5)))),
        (ops.loss_augmented_inference, (_t(x), _t(sw[0]), _t(sb[0]), _t(w[0]), _t(np.array([0, 1, 0, 1, 1], "int32")),
                                        True, True)),
        (ops.pruned_route, (_t(x, True), _t(sw, True), _t(sb, True), _t(gamma, True), _t(is_split), _t(v, True),
                            None, None, 0.05, True)),
        (ops.pruned_leaf_statistics, (_t(rng.normal(size=(5, 2, 2))), _t(x, True), _t(sw, True), _t(sb, True),
                                      _t(gamma), _t(is_split), None, None, 0.05, True)),
        (ops.check, (_t(np.array([True, True])), "a\nb\n")),
    ]


@needs_kernels
def test_opcheck_registrations():
    """torch.library.opcheck: schemas, fake kernels (shapes, dtypes) and the
    autograd registrations of the ops."""
    for op, args in _op_samples(np.random.default_rng(0)):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration",
                                                    "test_faketensor"))


def _compile(fn):
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


@needs_kernels
def test_ops_under_torch_compile_match_eager_bitwise():
    """Every op family traced by torch.compile (fullgraph: no graph break;
    the fake kernels give the shapes), forward and backward, bit-identical to
    eager calls."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 4)).astype("float32")
    t = rng.uniform(-1, 1, size=(2, 7)).astype("float32")
    f = _t(rng.integers(0, 4, size=(2, 7)).astype("int32"))  # captured: tensors (dynamo traces no NumPy array)
    w = rng.normal(size=(2, 8, 3)).astype("float32")
    sw, sb = rng.normal(size=(2, 7, 4)).astype("float32"), rng.normal(size=(2, 7)).astype("float32")
    gamma = rng.uniform(0.5, 2, size=(2, 7)).astype("float32")
    v = rng.normal(size=(2, 15, 3)).astype("float32")
    is_split = rng.random((2, 7)) < 0.8
    is_split[:, 0] = True
    is_split, labels = _t(is_split), _t(np.array([0, 1, 2, 0, 1, 2, 0], "int32"))

    def step(x, t, w, sw, sb, gamma, v):
        hinge = tree_ops.hinge_forest(x, t, f, w)
        soft = tree_ops.soft_tree_ensemble(x, sw, sb, w, 2.0)
        pruned = tree_ops.pruned_route(x, sw, sb, gamma, is_split, v, 0.05)
        node, path = tree_ops.hard_route(x, sw, sb, is_split)
        g, h, score = tree_ops.loss_augmented_inference(x, sw[0], sb[0], w[0], labels)
        loss = (hinge ** 2).sum() + (soft ** 2).sum() + (pruned ** 2).sum()
        return loss, node, path, g, h, score

    def run(fn):
        args = [_t(a, True) for a in (x, t, w, sw, sb, gamma, v)]
        loss, *rest = fn(*args)
        grads = torch.autograd.grad(loss, args)
        return [loss.detach(), *rest, *grads]

    eager = run(step)
    traced = run(_compile(step))
    for a, b in zip(eager, traced):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


@needs_kernels
def test_layers_trace_without_graph_breaks():
    """A layer call (its input checks included: one check op) is one graph."""
    from keras_trees import layers

    x = torch.tensor(np.random.default_rng(2).normal(size=(8, 5)).astype("float32"))
    for layer in (layers.HingeForest(num_trees=3, max_depth=3, units=2),
                  layers.TreeEnsembleLayer(num_trees=3, max_depth=3, units=2)):
        layer(x)
        explanation = torch._dynamo.explain(layer)(x)
        assert explanation.graph_break_count == 0, (layer, explanation.break_reasons)


@needs_kernels
def test_checks_fail_inside_torch_compile():
    """Bad values are rejected inside compiled code with the eager message:
    the kernels' own checks and the library's checks (the check op)."""
    x = np.zeros((2, 3), "float32")
    w, b, split = torch.zeros((1, 3, 3)), torch.zeros((1, 3)), torch.ones((1, 3), dtype=torch.bool)
    route = _compile(lambda x: tree_ops.hard_route(x, w, b, split)[0])
    with pytest.raises(ValueError, match="x contains NaN"):
        route(torch.tensor(x + np.nan))
    from keras_trees.validation import tensors

    def checked(x):
        return tensors.torch_check([torch.all(x > 0)], ["x must be positive"], output=x * 2)

    def unread(x):  # a check nothing depends on: the op is kept for its error
        tensors.require(torch.all(x > 0), "x must be positive")
        return x * 2

    for fn in (_compile(checked), _compile(unread)):
        np.testing.assert_array_equal(fn(torch.ones(3)).numpy(), [2, 2, 2])
        with pytest.raises(ValueError, match="x must be positive"):
            fn(-torch.ones(3))


def _skip_cases():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 4))
    sw, sb, gamma = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3)), rng.uniform(0.5, 2, size=(2, 3))
    v = rng.normal(size=(2, 7, 2))
    t, w = rng.uniform(-1, 1, size=(2, 3)), rng.normal(size=(2, 4, 2))
    f = rng.integers(0, 4, size=(2, 3)).astype("int32")
    split = np.ones((2, 3), bool)
    return {
        "pruned_route_grad": (lambda x, sw, sb, gamma, v: tree_ops.pruned_route(x, sw, sb, gamma, split, v, 0.05),
                              [x, sw, sb, gamma, v]),
        "soft_tree_ensemble_grad": (lambda x, sw, sb, w: tree_ops.soft_tree_ensemble(x, sw, sb, w, 2.0),
                                    [x, sw, sb, w]),
        "hinge_forest_grad": (lambda x, t, w: tree_ops.hinge_forest(x, t, f, w), [x, t, w]),
    }


@needs_kernels
@pytest.mark.parametrize("grad_op", ["pruned_route_grad", "soft_tree_ensemble_grad", "hinge_forest_grad"])
def test_input_gradient_is_skipped_when_x_needs_none(grad_op):
    """dL/dx is not computed when x does not require a gradient (the backward
    op's last flag), and the weight gradients are unchanged."""
    from torch.utils._python_dispatch import TorchDispatchMode

    flags = []
    op = getattr(torch.ops.keras_trees, grad_op).default

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is op:
                flags.append(args[-1])
            return func(*args, **(kwargs or {}))

    call, inputs = _skip_cases()[grad_op]
    grads = []
    for x_grad in (True, False):
        args = [_t(inputs[0], x_grad)] + [_t(a, True) for a in inputs[1:]]
        with Record():
            (call(*args) ** 2).sum().backward()
        grads.append([a.grad.numpy() for a in args[1:]])
        assert (args[0].grad is not None) == x_grad
    assert flags == [True, False]
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


@needs_kernels
def test_torch_func_transforms_raise_a_clear_error():
    x = torch.zeros((3, 2, 4))
    t, f, w = torch.zeros((2, 3)), torch.zeros((2, 3), dtype=torch.int32), torch.zeros((2, 4, 1))
    with pytest.raises(NotImplementedError, match="do not support torch.func transforms"):
        torch.func.vmap(lambda x: torch.ops.keras_trees.hinge_forest(x, t, f, w, False)[0])(x)
    for transform, inputs in ((torch.func.vmap, x), (torch.func.grad, x[0])):
        with pytest.raises(NotImplementedError, match="do not support torch.func transforms"):
            transform(lambda x: tree_ops.hinge_forest(x, t, f, w).sum())(inputs)


@needs_kernels
def test_mixed_precision_and_variables():
    """float16 inputs compute in float32 and come back in float16; Keras
    variables are read as tensors."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(4, 3)).astype("float16")
    t = keras.Variable(rng.normal(size=(2, 3)).astype("float32"))
    f = keras.Variable(rng.integers(0, 3, size=(2, 3)).astype("int32"), trainable=False)
    w = keras.Variable(rng.normal(size=(2, 4, 2)).astype("float32"))
    out = tree_ops.hinge_forest(x, t, f, w)
    assert out.dtype == torch.float16
    ref = tree_ops.hinge_forest_reference(x.astype("float32"), t, f, w)
    np.testing.assert_allclose(out.float().detach().numpy(), ref.detach().numpy(), rtol=2e-3, atol=2e-3)


@needs_kernels
def test_inductor_compiles_a_training_step():
    """torch.compile's default backend (Inductor, what users get) on a hinge
    forest's forward and backward pass: the ops run as extern kernels in the
    generated code, bit-identical to eager."""
    rng = np.random.default_rng(5)
    f = _t(rng.integers(0, 4, size=(2, 3)).astype("int32"))
    args = [rng.normal(size=(6, 4)).astype("float32"), rng.normal(size=(2, 3)).astype("float32"),
            rng.normal(size=(2, 4, 2)).astype("float32")]

    cot = _t(rng.normal(size=(6, 2, 2)).astype("float32"))

    def step(x, t, w):
        out = tree_ops.hinge_forest(x, t, f, w)
        return out, (out * cot).sum()

    results = []
    for fn in (step, torch.compile(step, fullgraph=True)):
        tensors = [_t(a, True) for a in args]
        out, loss = fn(*tensors)
        results.append([out.detach().numpy(), *[g.numpy() for g in torch.autograd.grad(loss, tensors)]])
    for a, b in zip(*results):  # the loss's sum may be fused in another order: not compared
        np.testing.assert_array_equal(a, b)


def test_older_pytorch_falls_back_with_a_clear_warning(tmp_path):
    """PyTorch before 2.10 lacks the stable C++ ABI the binding is built
    against: the kernels are not built, and the one warning says what to install."""
    from tests.backends.conftest import run_fresh

    out = run_fresh("""
import warnings
import torch
torch.__version__ = "2.9.1"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import keras_trees
    print("available", keras_trees.ops.custom_ops_available())
    print("error", keras_trees.ops.execution_report()["load_error"])
    layer = keras_trees.layers.HingeForest(num_trees=2, max_depth=2, units=1)
    layer(torch.zeros((3, 4)))
ours = [str(w.message) for w in caught if "keras-trees" in str(w.message)]
print("warnings", len(ours), ours)
""", tmp_path)
    assert "available False" in out
    error = out.split("error ", 1)[1].splitlines()[0]
    assert "need PyTorch 2.10 or later" in error and "found 2.9.1" in error and "torch>=2.10" in error
    assert "warnings 1 " in out and "compiled kernels unavailable" in out and error in out.split("warnings", 1)[1]
