"""The build-at-import scheme and the reference-path fallback."""

import shutil
import subprocess

import numpy as np
import pytest

from keras_trees import _build, ops as tree_ops
from tests.conftest import run_python


def test_library_is_cached_by_tensorflow_version_and_source_hash():
    path = _build.library_path()
    assert path.name == "_keras_trees_ops.so"
    import tensorflow as tf

    assert path.parent.name.startswith(f"tf{tf.__version__}-")
    if tree_ops.custom_ops_available():
        assert path.exists()


def test_sources_are_found_and_hashed_recursively():
    src = _build.source_dir()
    names = {p.relative_to(src).as_posix() for p in _build._sources()}
    assert {"core/common.h", "core/tree_ensemble.cc", "tensorflow/kernel_utils.h",
            "tensorflow/tree_ensemble_ops.cc", "tensorflow/tree_ensemble_kernels.cc"} <= names
    units = {p.relative_to(src).parts[0] for p in _build._units()}
    assert units == {"core", "tensorflow"}
    assert {p.relative_to(src).parts[0] for p in _build._units("jax")} == {"core", "xla"}


def test_tensorflow_adapters_compile_in_unity_batches_the_cuda_build_reuses():
    """TensorFlow's adapters, whose compile time goes to TensorFlow's headers,
    are compiled in batches of at most ``_UNITY_BATCH`` with the same flags;
    every other unit alone. Every unit is in exactly one job, and the CUDA
    build's jobs for the CPU units are the CPU build's (same object names), so
    it links the kept objects instead of compiling them again."""
    src = _build.source_dir()

    def jobs(cuda):
        batches = _build._batches(_build._units("tensorflow", cuda=cuda), src)
        members = [m for _, _, ms, _ in batches for m in ms]
        assert sorted(members) == sorted(_build._units("tensorflow", cuda=cuda))
        names = [name for name, _, _, _ in batches]
        assert len(set(names)) == len(names)
        for name, _, ms, flags in batches:
            assert 1 <= len(ms) <= _build._UNITY_BATCH
            assert all(_build._unit_flags(m) == flags for m in ms)
            if len(ms) > 1:
                assert {m.relative_to(src).parts[0] for m in ms} == {"tensorflow"} and "unity" in name
        return {name: ms for name, _, ms, _ in batches}

    cpu = jobs(False)
    assert any(len(ms) > 1 for ms in cpu.values())
    assert all(len(ms) == 1 for name, ms in cpu.items() if not name.startswith("tensorflow"))
    cuda = jobs(True)
    assert cpu.items() <= cuda.items()
    gpu = [ms for name, ms in cuda.items() if name not in cpu and ms[0].suffix == ".cc"]
    assert gpu and all("gpu" in m.name for ms in gpu for m in ms)


def test_each_framework_has_its_own_library_and_cache_key():
    """The JAX (XLA FFI) library is keyed by JAX's version and hashes only the
    cores and the XLA adapters: a TensorFlow-only source change rebuilds
    nothing of JAX's, and neither build needs the other framework."""
    jax = pytest.importorskip("jax")
    tf_path, jax_path = _build.library_path("tensorflow"), _build.library_path("jax")
    assert jax_path.name == "_keras_trees_xla.so" and jax_path.parent.name.startswith(f"jax{jax.__version__}-")
    assert tf_path.parent != jax_path.parent
    src = _build.source_dir()
    assert not any(p.relative_to(src).parts[0] == "tensorflow" for p in _build._sources("jax"))
    with pytest.raises(_build.BuildError, match="framework must be one of"):
        _build.library_path("mxnet")


def test_torch_library_is_keyed_by_torch_version_and_its_sources():
    """The PyTorch library (torch.library ops) is keyed by PyTorch's version and
    hashes only the cores and the torch adapters; it needs neither TensorFlow
    nor JAX, and has no CUDA build."""
    torch = pytest.importorskip("torch")
    path = _build.library_path("torch")
    assert path.name == "_keras_trees_torch.so" and path.parent.name.startswith(f"torch{torch.__version__}-")
    assert path.parent not in (_build.library_path("tensorflow").parent,)
    src = _build.source_dir()
    assert {p.relative_to(src).parts[0] for p in _build._units("torch")} == {"core", "torch"}
    with pytest.raises(_build.BuildError, match="CUDA kernels for"):
        _build.library_path("torch", cuda=True)


@pytest.mark.slow
def test_kernel_cores_compile_without_tensorflow():
    """custom_ops/core/ is framework-free: its sources compile with nothing but
    the C++ standard library on the include path, so no TensorFlow (or XLA, CUDA)
    header can creep into the cores that other frameworks' adapters share."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    src = _build.source_dir()
    units = sorted(str(p) for p in (src / "core").glob("*.cc"))
    assert units
    result = subprocess.run(
        [cxx, "-std=c++17", "-fsyntax-only", "-I", str(src), *units],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.slow
def test_disable_env_var_forces_reference_path(tmp_path):
    out = run_python(
        """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import numpy as np
            from keras_trees import ops
            from keras_trees.layers import TreeEnsembleLayer
            assert not ops.custom_ops_available()
            layer = TreeEnsembleLayer(num_trees=2, max_depth=3, units=2)
            print(layer(np.ones((3, 4), "float32")).shape)
        # Explicitly disabled: no warning.
        assert not [w for w in caught if "keras-trees" in str(w.message)], caught
        """,
        cwd=tmp_path,
        env={"KERAS_TREES_DISABLE_CUSTOM_OPS": "1"},
    )
    assert "(3, 2)" in out


@pytest.mark.slow
def test_failed_build_falls_back_with_one_warning(tmp_path):
    out = run_python(
        """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import numpy as np
            from keras_trees import ops
            from keras_trees.layers import TreeEnsembleLayer
            layer = TreeEnsembleLayer(num_trees=2, max_depth=3, units=2)
            layer(np.ones((3, 4), "float32"))
            ops.custom_ops_available()
        messages = [str(w.message) for w in caught if "keras-trees" in str(w.message)]
        assert len(messages) == 1, messages
        print(messages[0])
        """,
        cwd=tmp_path,
        env={"KERAS_TREES_CACHE_DIR": str(tmp_path / "cache"), "CXX": str(tmp_path / "no-compiler")},
    )
    assert "reference path" in out


def test_reference_only_context_switches_paths():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3))
    w = rng.normal(size=(2, 3, 3))
    o = rng.normal(size=(2, 4, 1))
    with tree_ops.reference_only():
        assert not tree_ops.custom_ops_available()
        ref = np.asarray(tree_ops.soft_tree_ensemble(x, w, None, o, 1.0))
    np.testing.assert_allclose(np.asarray(tree_ops.soft_tree_ensemble(x, w, None, o, 1.0)), ref, atol=1e-12)


def test_custom_ops_are_built_and_loaded():
    """The kernel tests skip themselves when the op library is missing; this test
    makes a broken build fail the suite instead of passing it silently. Only an
    explicit KERAS_TREES_DISABLE_CUSTOM_OPS (or another Keras backend) opts out."""
    import keras

    from keras_trees.ops import _library

    if _library._env_disabled() or keras.backend.backend() != "tensorflow":
        pytest.skip("custom ops disabled explicitly or backend is not TensorFlow")
    assert tree_ops.custom_ops_available(), f"custom ops failed to load: {_library.load_error()}"
