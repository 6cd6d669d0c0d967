"""XLA and device placement on the TensorFlow backend (issue: default compile() on GPU hosts).

Keras turns XLA on (``jit_compile="auto"``) whenever TensorFlow sees a GPU and
every layer reports ``supports_jit``. The custom ops have no XLA kernels, so the
layers must report False, and the ops must take the ``keras.ops`` path on a GPU
and inside XLA.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.trainers.trainer import model_supports_jit

from keras_trees import layers as kt_layers
from keras_trees import ops as tree_ops
from keras_trees.ops import _library, soft_tree

pytestmark = pytest.mark.skipif(
    not tree_ops.custom_ops_available(), reason="needs the TensorFlow backend with the custom ops"
)


def _tel_model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(4), kt_layers.TreeEnsembleLayer(num_trees=4, max_depth=3, units=2)]
    )
    return model


def _data(n=256):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, (x[:, 0] + x[:, 1] > 0).astype("int32")


FAMILIES = {
    "tree_ensemble": lambda: kt_layers.TreeEnsembleLayer(num_trees=2, max_depth=2, units=2),
    "end_to_end": lambda: kt_layers.EndToEndTree(max_depth=2, num_classes=2),
    "hinge_forest": lambda: kt_layers.HingeForest(num_trees=2, max_depth=2, units=2, reduction="sum"),
    "hinge_fern": lambda: kt_layers.HingeFern(num_trees=2, max_depth=2, units=2, reduction="sum"),
    "convex_polytope": lambda: kt_layers.ConvexPolytopeTree(max_depth=2, num_classes=2),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_models_holding_a_tree_layer_do_not_support_jit(family):
    layer = FAMILIES[family]()
    assert layer.supports_jit is False  # Layer.__init__ assigned True; the property wins
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), layer])
    assert not model_supports_jit(model)
    # Nested: the tree inside a sub-model.
    outer = keras.Sequential([keras.Input((4,)), model])
    assert not model_supports_jit(outer)


def test_non_greedy_tree_model_does_not_support_jit():
    model = kt_layers.NonGreedyTree(max_depth=2, num_classes=2)
    assert not model_supports_jit(model)


def _fake_gpu(monkeypatch):
    """TensorFlow (and so Keras' jit_compile="auto") reports a GPU; the ops'
    placement check sees it too. Ops still execute on the CPU here."""
    real = tf.config.list_physical_devices

    def list_physical_devices(device_type=None):
        devices = list(real(device_type))
        if device_type in (None, "GPU"):
            devices.append(tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU"))
        return devices

    monkeypatch.setattr(tf.config, "list_physical_devices", list_physical_devices)
    monkeypatch.setattr(
        _library, "_visible_accelerators", lambda: [tf.config.LogicalDevice("/device:GPU:0", "GPU")]
    )


def _count_reference_calls(monkeypatch):
    calls = []
    original = soft_tree.soft_tree_ensemble_reference

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(soft_tree, "soft_tree_ensemble_reference", spy)
    return calls


@pytest.mark.slow
def test_default_compile_trains_when_a_gpu_is_visible(monkeypatch):
    _fake_gpu(monkeypatch)
    calls = _count_reference_calls(monkeypatch)
    x, y = _data()
    model = _tel_model()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert model.jit_compile is False  # "auto" saw the GPU, but the model opts out
    history = model.fit(x, y, epochs=3, batch_size=64, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    # On a GPU the kernels (CPU only) are not used: the keras.ops path is traced.
    assert calls, "the keras.ops path should run when the target device is a GPU"
    assert not tree_ops.custom_ops_available()
    assert tree_ops.execution_report()["devices"]  # reports every device


def test_cpu_device_scope_uses_kernels_even_with_a_gpu(monkeypatch):
    _fake_gpu(monkeypatch)
    with tf.device("/cpu:0"):
        assert tree_ops.custom_ops_available()
    assert not tree_ops.custom_ops_available()


@pytest.mark.slow
def test_explicit_jit_compile_warns_and_trains_without_xla():
    x, y = _data()
    model = _tel_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    assert any("jit_compile" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert model.jit_compile is False
    history = model.fit(x, y, epochs=2, batch_size=64, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.slow
def test_user_xla_function_takes_the_reference_path():
    x, _ = _data(64)
    layer = kt_layers.TreeEnsembleLayer(num_trees=3, max_depth=3, units=2, transition_width=0.5)
    eager = keras.ops.convert_to_numpy(layer(x))  # kernels

    @tf.function(jit_compile=True)
    def forward_and_grad(inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            out = layer(inputs, training=True)
            loss = tf.reduce_sum(out**2)
        return out, tape.gradient(loss, [inputs, layer.node_weights])

    out, (gx, gw) = forward_and_grad(tf.constant(x))
    np.testing.assert_allclose(out.numpy(), eager, rtol=1e-5, atol=1e-5)
    with tf.GradientTape() as tape:
        xt = tf.constant(x)
        tape.watch(xt)
        loss = tf.reduce_sum(layer(xt, training=True) ** 2)
    kx, kw = tape.gradient(loss, [xt, layer.node_weights])
    np.testing.assert_allclose(gx.numpy(), kx.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw.numpy(), kw.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_jit_support_follows_the_op_library(tmp_path):
    """With the custom ops disabled the layers are plain keras.ops and may be XLA-compiled."""
    from tests.conftest import run_python

    out = run_python(
        """
        import keras
        from keras.src.trainers.trainer import model_supports_jit
        from keras_trees.layers import TreeEnsembleLayer
        model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(num_trees=2, max_depth=2, units=1)])
        print("jit", model_supports_jit(model))
        model.compile("adam", "mse", jit_compile=True)
        import numpy as np
        model.fit(np.ones((8, 3), "float32"), np.ones((8, 1), "float32"), verbose=0)
        print("xla", model.jit_compile)
        """,
        cwd=tmp_path,
        env={"KERAS_TREES_DISABLE_CUSTOM_OPS": "1"},
    )
    assert "jit True" in out and "xla True" in out


def test_gpu_runs_the_families_measured_slower_there_on_the_keras_ops_path(monkeypatch):
    """On a GPU the Tree Ensemble Layer and pruned routing (their CUDA kernels
    measured 0.26-0.31x and 0.17-0.61x the keras.ops path on an H200) take the
    keras.ops path unless KERAS_TREES_GPU_KERNELS=all, and so does every family
    under TensorFlow (its GPU kernels have never run on a GPU); under JAX the
    other families with CUDA kernels keep them. A bad value names the variable."""
    monkeypatch.setitem(_library._state, "gpu", True)  # as if the CUDA kernels had loaded
    monkeypatch.delenv("KERAS_TREES_GPU_KERNELS", raising=False)
    measured = _library._compiled_families("jax", "gpu")
    assert set(measured) == {"hinge", "hard_routing", "loss_augmented", "check"}
    assert _library._compiled_families("tensorflow", "gpu") == ()
    assert {"soft_tree", "pruned_routing"} <= set(_library._compiled_families("tensorflow", "cpu"))
    assert {"soft_tree", "pruned_routing"} <= set(_library._compiled_families("jax", "cpu"))
    jax_gpu = _library._device_families("jax", "gpu")
    assert jax_gpu["soft_tree"] == jax_gpu["pruned_routing"] == "reference" and jax_gpu["hinge"] == "kernels"
    monkeypatch.setenv("KERAS_TREES_GPU_KERNELS", "all")
    assert set(_library._compiled_families("jax", "gpu")) == set(measured) | {"soft_tree", "pruned_routing"}
    assert set(_library._compiled_families("tensorflow", "gpu")) == set(_library.DISPATCH[("tensorflow", "gpu")])
    assert _library._device_families("jax", "gpu")["soft_tree"] == "kernels"
    monkeypatch.setenv("KERAS_TREES_GPU_KERNELS", "fastest")
    with pytest.raises(ValueError, match="KERAS_TREES_GPU_KERNELS must be one of 'measured', 'all', got 'fastest'"):
        _library._compiled_families("tensorflow", "gpu")
