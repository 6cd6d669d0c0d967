"""The CUDA builds (keras_trees/_build.py, cuda=True), checked on machines
without a GPU: every .cu compiles with warnings as errors, the JAX CUDA
library links and loads and exports its handlers, the TensorFlow op library
built with the GPU kernels loads and registers a GPU kernel (float and double)
for each op of the GPU families; and no float atomics anywhere in the kernels.

The two CUDA builds are made by ``_build.build`` into a cache of their own
under the kernel cache (``tests-cuda/<toolchain>/``), shared by the tests of
this file and kept between runs: the library's own key covers every source,
the nvcc and compiler flags, nvcc's version, the architectures and the
framework's version, and the ``<toolchain>`` folder adds the build rules
(keras_trees/_build.py) and the host compiler's version, so a change to any
input of a build makes the next run compile it again (with warnings as
errors), and an unchanged build is not compiled twice. The TensorFlow one
links the objects of the suite's CPU build (copied into that cache), so it
compiles only the GPU adapters and the CUDA sources. When they compile: on 2
cores about 30-50 s for JAX's, about 60-70 s for TensorFlow's. Skipped, with
the reason, where nvcc is not found. Whether the kernels *run* right is the
business of tests/gpu/, on a GPU.
"""

import hashlib
import json
import re
import shutil
import subprocess
import time

import pytest

from keras_trees import _build
from tests.conftest import run_python

NVCC = _build.find_nvcc()
needs_nvcc = pytest.mark.skipif(
    NVCC is None,
    reason="nvcc not found ($KERAS_TREES_NVCC, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin): the CUDA "
    "builds are not checked here",
)

# The ops with GPU kernels in the TensorFlow CUDA build (the Tree Ensemble
# Layer: its trace-free ops; the traced op keeps its CPU kernel only).
GPU_OPS = ("KerasTrees>HingeForest", "KerasTrees>HingeForestGrad", "KerasTrees>HardRouting",
           "KerasTrees>HardRoutingExperts", "KerasTrees>SoftTreeEnsembleTraceFree",
           "KerasTrees>SoftTreeEnsembleTraceFreeGrad", "KerasTrees>PrunedRouting", "KerasTrees>PrunedRoutingGrad",
           "KerasTrees>PrunedLeafStatistics", "KerasTrees>PrunedRoutingExperts", "KerasTrees>PrunedRoutingExpertsGrad",
           "KerasTrees>PrunedLeafStatisticsExperts", "KerasTrees>PrunedEmStatistics")
# Ops with GPU kernels for two label dtypes per T (int32 labels, T targets).
GPU_LABELLED_OPS = ("KerasTrees>LossAugmentedInference",)
# The handlers of the JAX CUDA library (Python registers symbol X + "Cuda" as target X).
CUDA_SYMBOLS = ("KerasTreesHingeForestCuda", "KerasTreesHingeForestGradCuda", "KerasTreesHardRoutingCuda",
                "KerasTreesHardRoutingExpertsCuda", "KerasTreesCheckCuda", "KerasTreesSoftTreeEnsembleCuda",
                "KerasTreesSoftTreeEnsembleGradCuda", "KerasTreesPrunedRoutingCuda", "KerasTreesPrunedRoutingGradCuda",
                "KerasTreesPrunedLeafStatisticsCuda", "KerasTreesPrunedEmStatisticsCuda",
                "KerasTreesLossAugmentedInferenceCuda")


def _build_into(cache, **kwargs):
    """Builds into `cache` (KERAS_TREES_CACHE_DIR only for the call); returns
    (path, seconds)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERAS_TREES_CACHE_DIR", str(cache))
        start = time.perf_counter()
        path = _build.build(verbose=False, **kwargs)
        return path, time.perf_counter() - start


def _toolchain_key():
    """What the builds depend on beyond the library's own cache key: the build
    rules (keras_trees/_build.py) and the host compiler's version."""
    digest = hashlib.sha256(open(_build.__file__, "rb").read())
    cxx = _build._compiler()
    digest.update(subprocess.run([cxx, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout)
    return digest.hexdigest()[:16]


def _current_builds():
    """The folder names of the builds this file makes with the current sources."""
    names = set()
    for framework, cuda in (("jax", True), ("tensorflow", True), ("tensorflow", False)):
        try:
            names.add(_build.library_path(framework, cuda=cuda).parent.name)
        except Exception:  # noqa: BLE001 - a framework that is not installed builds nothing here
            pass
    return names


@pytest.fixture(scope="module")
def cuda_cache():
    root = _build.cache_dir() / "tests-cuda"
    cache = root / _toolchain_key()
    # Only the current builds are kept: older toolchains' and sources' go.
    keep = _current_builds() if NVCC else set()
    for old in (root.iterdir() if root.is_dir() else ()):
        if old != cache:
            shutil.rmtree(old, ignore_errors=True)
    for old in (cache.iterdir() if cache.is_dir() else ()):
        if old.name not in keep:
            shutil.rmtree(old, ignore_errors=True)
    return cache


@pytest.fixture(scope="module")
def jax_cuda_library(cuda_cache):
    pytest.importorskip("jax")
    path, seconds = _build_into(cuda_cache, framework="jax", cuda=True)
    print(f"JAX CUDA build: {seconds:.0f} s ({path.parent})")
    return path


@pytest.fixture(scope="module")
def tf_cuda_library(cuda_cache):
    # The suite's CPU build (normally cached already), copied into this
    # file's cache with its objects: its key does not depend on the cache
    # folder, so the CUDA build finds it there and links its objects.
    cpu = _build.build(framework="tensorflow", verbose=False)
    seeded = cuda_cache / cpu.parent.name
    if not seeded.exists():
        partial = cuda_cache / (cpu.parent.name + ".copying")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(cpu.parent, partial, ignore=shutil.ignore_patterns(".lock", "tmp*"))
        partial.rename(seeded)
    path, seconds = _build_into(cuda_cache, framework="tensorflow", cuda=True)
    print(f"TensorFlow CUDA build: {seconds:.0f} s ({path.parent})")
    return path


# --------------------------------------------------------------------------- no GPU, no nvcc needed


def _kernel_sources():
    src = _build.source_dir()
    return sorted(p for p in src.rglob("*") if p.suffix in (".cu", ".cuh", ".h", ".cc"))


def test_no_float_atomics_in_the_kernels():
    """Every float output element has one writer (core/pipeline.h): no
    atomicAdd anywhere in custom_ops/, and the only CUDA atomic is the integer
    AtomicMin of the status words in core/portable.h."""
    src = _build.source_dir()
    calls = []
    for path in _kernel_sources():
        text = path.read_text()
        rel = path.relative_to(src).as_posix()
        assert "atomicAdd" not in text, f"{rel} mentions atomicAdd"
        assert "atomic_ref" not in text, f"{rel} uses cuda::atomic_ref"
        calls += [(rel, name) for name in re.findall(r"(?<![\w:])(atomic[A-Z]\w*)\s*\(", text)]
    assert calls == [("core/portable.h", "atomicMin")], calls
    portable = (src / "core" / "portable.h").read_text()
    assert re.search(r"void AtomicMin\(unsigned long long\* address, unsigned long long value\)", portable)


def _function_of(text, offset):
    """The name of the C++ function whose body holds ``text[offset]``: the
    last ``name(...) {`` opened before it at the same or lower indentation."""
    heads = list(re.finditer(r"^\s*(?:[\w:<>*&,]+\s+)*(\w+)\([^;{]*\)\s*(?:const\s*)?\{", text[:offset], re.M))
    return heads[-1].group(1) if heads else None


def test_gpu_calls_wait_only_where_the_sync_mode_asks():
    """The GPU pipelines do not wait for their kernels (core/check_modes.h):
    stream synchronizations and device-to-host copies appear in custom_ops/
    only in CopyToHost (the sync mode and the families not yet deferred),
    the deferred checks' queue of pinned copies (asynchronous; DeviceChecks
    waits only when asked or when a thousand calls are in flight) and the
    layers' check handler under jax.jit."""
    src = _build.source_dir()
    found = set()
    for path in _kernel_sources():
        text = path.read_text()
        rel = path.relative_to(src).as_posix()
        for match in re.finditer(r"cudaStreamSynchronize|cudaDeviceSynchronize|cudaMemcpyDeviceToHost|"
                                 r"cudaEventSynchronize|cudaMemcpy\(", text):
            found.add((rel, _function_of(text, match.start()), match.group(0)))
    assert found == {
        ("cuda/launch.cuh", "CopyToHost", "cudaMemcpyDeviceToHost"),
        ("cuda/launch.cuh", "CopyToHost", "cudaStreamSynchronize"),
        ("cuda/launch.cuh", "Defer", "cudaMemcpyDeviceToHost"),
        ("cuda/launch.cuh", "Read", "cudaEventSynchronize"),
        ("cuda/launch.cuh", "ReadOldest", "cudaEventSynchronize"),
        ("cuda/xla_handlers.cu", "Check", "cudaMemcpyDeviceToHost"),
        ("cuda/xla_handlers.cu", "Check", "cudaStreamSynchronize"),
    }, sorted(found)


def test_cpu_builds_leave_out_the_cuda_sources():
    src = _build.source_dir()
    for framework in _build.FRAMEWORKS:
        names = [p.relative_to(src).as_posix() for p in _build._sources(framework)]
        assert not [n for n in names if n.startswith("cuda/") or "gpu" in n.split("/")[-1]], names
    cuda_jax = {p.relative_to(src).as_posix() for p in _build._units("jax", cuda=True)}
    assert cuda_jax == {"cuda/xla_handlers.cu", "cuda/xla_pruned_routing.cu", "cuda/xla_loss_augmented.cu"}
    cuda_tf = {p.relative_to(src).as_posix() for p in _build._units("tensorflow", cuda=True)}
    cpu_tf = {p.relative_to(src).as_posix() for p in _build._units("tensorflow")}
    assert cuda_tf - cpu_tf == {"cuda/tf_entry.cu", "tensorflow/hinge_gpu_kernels.cc",
                                "tensorflow/hard_routing_gpu_kernels.cc", "tensorflow/tree_ensemble_gpu_kernels.cc",
                                "cuda/tf_loss_augmented.cu", "tensorflow/loss_augmented_gpu_kernels.cc",
                                "cuda/tf_pruned_routing.cu", "tensorflow/pruned_routing_gpu_kernels.cc"}


def test_cuda_build_without_nvcc_says_so(monkeypatch):
    monkeypatch.setattr(_build, "find_nvcc", lambda: None)
    with pytest.raises(_build.BuildError, match="needs nvcc"):
        _build.library_path("jax", cuda=True)


def test_cuda_archs(monkeypatch):
    monkeypatch.delenv("KERAS_TREES_CUDA_ARCHS", raising=False)
    assert _build._cuda_archs() == ("90",)
    assert _build._gencode_flags(("90",)) == ["-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
    monkeypatch.setenv("KERAS_TREES_CUDA_ARCHS", "90;sm_80, 8.0")
    assert _build._cuda_archs() == ("80", "90")
    assert _build._gencode_flags(("80", "90")) == [
        "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
    monkeypatch.setenv("KERAS_TREES_CUDA_ARCHS", "volta")
    with pytest.raises(_build.BuildError, match="KERAS_TREES_CUDA_ARCHS"):
        _build._cuda_archs()


# --------------------------------------------------------------------------- with nvcc


@needs_nvcc
def test_cuda_cache_key_has_nvcc_version_and_archs(monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.delenv("KERAS_TREES_CUDA_ARCHS", raising=False)
    default = _build.library_path("jax", cuda=True)
    import jax

    assert default.name == "_keras_trees_xla_cuda.so"
    assert default.parent.name.startswith(f"jaxcuda{jax.__version__}-")
    assert default.parent != _build.library_path("jax").parent
    monkeypatch.setenv("KERAS_TREES_CUDA_ARCHS", "80;90")
    assert _build.library_path("jax", cuda=True) != default
    monkeypatch.delenv("KERAS_TREES_CUDA_ARCHS")
    monkeypatch.setattr(_build, "_nvcc_version", lambda nvcc: "Build cuda_99.9")
    assert _build.library_path("jax", cuda=True) != default


@pytest.mark.slow
@needs_nvcc
def test_nvcc_flags_make_warnings_errors(tmp_path):
    """The flags the builds give nvcc turn a warning in our code into an error
    (and keep the GPU's arithmetic that of the CPU emulation: --fmad=false)."""
    pytest.importorskip("jax")
    flags = _build._nvcc_flags("jax", _build._cuda_archs())
    assert "--fmad=false" in flags
    unit = tmp_path / "warning.cu"
    unit.write_text("__global__ void Kernel(int* p) { int unused; p[0] = 1; }\n")
    result = subprocess.run([NVCC, *flags, "-c", str(unit), "-o", str(tmp_path / "warning.o")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert result.returncode != 0 and "unused" in result.stdout, result.stdout


@needs_nvcc
def test_every_cu_file_is_compiled_by_a_cuda_build():
    """Every .cu under custom_ops/ belongs to one of the two CUDA builds, so the
    builds below compile each of them with warnings as errors."""
    src = _build.source_dir()
    everything = {p for p in src.rglob("*.cu")}
    built = {p for framework in _build.CUDA_LIBRARIES for p in _build._units(framework, cuda=True)}
    assert everything and everything <= built, sorted(str(p) for p in everything - built)


@pytest.mark.slow
@needs_nvcc
def test_jax_cuda_library_links_loads_and_exports_its_handlers(jax_cuda_library, tmp_path):
    assert jax_cuda_library.name == "_keras_trees_xla_cuda.so" and jax_cuda_library.exists()
    out = run_python(
        f"""
        import ctypes
        library = ctypes.CDLL({str(jax_cuda_library)!r})
        print([name for name in {CUDA_SYMBOLS!r} if not hasattr(library, name)])
        """,
        cwd=tmp_path,
    )
    assert out.strip().splitlines()[-1] == "[]", out
    readelf = shutil.which("readelf")
    if readelf:  # the CUDA runtime is linked statically: no libcudart.so needed where it runs
        dynamic = subprocess.run([readelf, "-d", str(jax_cuda_library)], stdout=subprocess.PIPE, text=True).stdout
        assert "libcudart" not in dynamic, dynamic


@pytest.mark.slow
@needs_nvcc
def test_tensorflow_cuda_library_registers_gpu_kernels(tf_cuda_library, tmp_path):
    assert tf_cuda_library.name == "_keras_trees_ops_cuda.so" and tf_cuda_library.exists()
    out = run_python(
        f"""
        import json
        import tensorflow as tf
        from tensorflow.python.framework import kernels

        tf.load_op_library({str(tf_cuda_library)!r})
        found = {{}}
        for op in {GPU_OPS + GPU_LABELLED_OPS!r} + ("KerasTrees>SoftTreeEnsemble", "KerasTrees>SoftTreeEnsembleGrad"):
            found[op] = sorted(
                [kernel.device_type, tf.dtypes.as_dtype(c.allowed_values.list.type[0]).name]
                for kernel in kernels.get_registered_kernels_for_op(op).kernel
                for c in kernel.constraint if c.name == "T")
        print(json.dumps(found))
        """,
        cwd=tmp_path,
        env={"KERAS_TREES_DISABLE_CUSTOM_OPS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    found = json.loads(out.strip().splitlines()[-1])
    for op in GPU_OPS:
        assert found[op] == [["CPU", "float32"], ["CPU", "float64"], ["GPU", "float32"], ["GPU", "float64"]], (
            op, found[op])
    for op in GPU_LABELLED_OPS:
        assert found[op] == [[device, dtype] for device in ("CPU", "GPU") for dtype in ("float32", "float32",
                                                                                       "float64", "float64")], (
            op, found[op])
    # The traced Tree Ensemble Layer ops (a data-dependent trace) keep their CPU kernels only.
    for op in ("KerasTrees>SoftTreeEnsemble", "KerasTrees>SoftTreeEnsembleGrad"):
        assert found[op] == [["CPU", "float32"], ["CPU", "float64"]], (op, found[op])
