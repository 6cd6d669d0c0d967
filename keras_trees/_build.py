"""Builds the keras-trees compiled kernels for the installed framework.

The C++ sources in ``custom_ops/`` are compiled against the framework that is
installed *when the library is first imported*, never against the copy that a
PEP 517 build environment might hold. Each library is made of the
framework-free kernel cores (``custom_ops/core/``) and one framework's
adapters over them:

* ``tensorflow``: ``custom_ops/tensorflow/`` (op registrations and kernels),
  loaded with ``tf.load_op_library`` under the TensorFlow backend;
* ``jax``: ``custom_ops/xla/`` (XLA FFI handlers, header-only against
  ``jax.ffi.include_dir()``), loaded with ctypes and registered with
  ``jax.ffi.register_ffi_target`` under the JAX backend;
* ``torch``: ``custom_ops/torch/`` (``torch.library`` ops on PyTorch's stable
  C++ ABI, targeting PyTorch 2.10, against the headers of
  ``torch.utils.cpp_extension``), loaded with ``torch.ops.load_library``
  under the PyTorch backend (CPU kernels only).

With ``cuda=True`` (and nvcc, the CUDA compiler) the GPU kernels of
``custom_ops/cuda/`` are built too:

* ``tensorflow``: the op library *with* GPU kernels (the CPU kernels, the GPU
  adapters ``custom_ops/tensorflow/*gpu*`` compiled with ``KERAS_TREES_CUDA=1``
  and ``custom_ops/cuda/tf_*.cu``), a separate library with its own cache key:
  the CPU-only build is unchanged;
* ``jax``: a separate library of XLA FFI CUDA handlers
  (``custom_ops/cuda/xla_*.cu``), registered for the ``"CUDA"`` platform.

Both link the CUDA runtime statically, so they load on machines without a GPU
(or a CUDA toolkit) and need only the NVIDIA driver where they run.

TensorFlow's adapters compile in unity batches (up to ``_UNITY_BATCH`` sources
with the same flags in one translation unit): their time goes to TensorFlow's
headers, which a batch parses once.

Neither build needs the other framework installed. Each library goes into a
cache directory keyed by the framework and its version, the compile flags, the
Python ABI (not for the JAX CUDA library, which holds no Python), the nvcc
version and GPU architectures of CUDA builds, a version of these build rules
and a hash of the sources it is made of, so an upgrade or a source change
triggers a rebuild and two versions can never be mixed.

* Cache directory: ``$KERAS_TREES_CACHE_DIR`` or ``~/.cache/keras_trees``.
* ``python -m keras_trees.build`` builds ahead of time for the active Keras
  backend (``--framework`` picks another, ``--force`` rebuilds, ``--cuda``
  builds the CUDA kernels too; without it they are built when nvcc is found
  and the framework sees a GPU).
* ``KERAS_TREES_PORTABLE_BUILD=1`` compiles without the AVX2/FMA flags that are
  otherwise used when the CPU has them.
* ``KERAS_TREES_NVCC``: the nvcc to use (else ``$CUDA_HOME/bin/nvcc``, the
  ``PATH``, ``/usr/local/cuda/bin/nvcc``); ``KERAS_TREES_CUDA_ARCHS``: the GPU
  architectures to compile for, e.g. ``"80;90"`` (default ``"90"``: SASS for
  each, PTX for the newest).
* ``KERAS_TREES_DISABLE_CUSTOM_OPS=1`` skips building and loading; the library
  then runs on its ``keras.ops`` reference path.
"""

import contextlib
import functools
import hashlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

# Every file with these endings under the compiled folders is part of the cache key.
_SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
# Translation units: .cc by the C++ compiler, .cu by nvcc.
_UNIT_SUFFIXES = (".cc", ".cu")
# framework -> (folders of custom_ops/ it is compiled from, library file name)
FRAMEWORKS = {
    "tensorflow": (("core", "tensorflow"), "_keras_trees_ops.so"),
    "jax": (("core", "xla"), "_keras_trees_xla.so"),
    "torch": (("core", "torch"), "_keras_trees_torch.so"),
}
# The PyTorch adapters use only PyTorch's stable C++ ABI, targeting its first
# release with a stable parallel_for: one build loads into PyTorch 2.10 and later.
_TORCH_TARGET_VERSION = "-DTORCH_TARGET_VERSION=0x020a000000000000"
# framework -> the file name of its CUDA build.
CUDA_LIBRARIES = {
    "tensorflow": "_keras_trees_ops_cuda.so",
    "jax": "_keras_trees_xla_cuda.so",
}
# The folder of the CUDA sources (custom_ops/cuda/): launch.cuh and what the
# builds share, tf_* only in TensorFlow's, xla_* only in JAX's.
_CUDA_FOLDER = "cuda"
_CUDA_PREFIX = {"tensorflow": "tf_", "jax": "xla_"}
# Part of every cache key: bump it when the build rules change in a way the
# other parts of the key do not see (e.g. per-unit flags).
_RULES_VERSION = "keras-trees-build-4"
_DEFAULT_CUDA_ARCHS = ("90",)
_GPU_ADAPTER_FLAGS = ["-DKERAS_TREES_CUDA=1"]
# TensorFlow's adapters are compiled in unity batches (one translation unit
# that includes up to this many of them, with the same flags): each of them
# spends most of its compile time in TensorFlow's headers, which a batch
# parses once.
_UNITY_FOLDERS = ("tensorflow",)
_UNITY_BATCH = 8
# The folder, next to a TensorFlow CPU library, of its object files: the
# TensorFlow CUDA build links them instead of compiling its CPU kernels again.
_OBJECTS = "objects"


class BuildError(RuntimeError):
    """The custom op library could not be compiled."""


def default_framework():
    """The framework whose library the active Keras backend loads."""
    import keras

    backend = keras.backend.backend()
    if backend not in FRAMEWORKS:
        raise BuildError(f"keras-trees has compiled kernels for {sorted(FRAMEWORKS)}, not {backend!r}")
    return backend


def _check_framework(framework):
    framework = framework or default_framework()
    if framework not in FRAMEWORKS:
        raise BuildError(f"framework must be one of {sorted(FRAMEWORKS)}, got {framework!r}")
    return framework


def source_dir():
    """Returns the folder holding the C++ sources (checkout or installed wheel):
    ``custom_ops/`` with its ``core/``, ``tensorflow/`` and ``xla/`` subfolders
    (and ``cuda/``, used only by the CUDA builds). It is also the include root:
    sources include ``"core/common.h"`` and so on."""
    here = pathlib.Path(__file__).resolve().parent
    folders = {sub for dirs, _ in FRAMEWORKS.values() for sub in dirs}
    for candidate in (here.parent / "custom_ops", here / "custom_ops"):
        if all(any((candidate / sub).glob("*.cc")) for sub in folders):
            return candidate
    raise BuildError(
        f"keras-trees C++ sources not found next to {here} (expected custom_ops/"
        + "/*.cc, custom_ops/".join(sorted(folders))
        + "/*.cc); reinstall the package."
    )


def _cuda_only(rel):
    """Whether a source (path relative to custom_ops/) belongs only to CUDA
    builds: the GPU adapters of the TensorFlow kernels (``tensorflow/*gpu*``)."""
    return rel.parts[0] == "tensorflow" and "gpu" in rel.name


def _in_cuda_build(rel, framework):
    """Whether a source belongs to a framework's CUDA build."""
    if rel.parts[0] == _CUDA_FOLDER:
        name = rel.name
        other = [p for f, p in _CUDA_PREFIX.items() if f != framework]
        return not any(name.startswith(p) for p in other)
    if framework == "jax":
        # The CUDA handlers use the cores' and the XLA adapters' headers only.
        return rel.parts[0] in ("core", "xla") and rel.suffix in (".h", ".cuh")
    return rel.parts[0] in FRAMEWORKS[framework][0]


def _sources(framework="tensorflow", cuda=False):
    """The source files of a framework's library (cores and adapters; with
    `cuda`, of its CUDA build), recursively, in a stable order."""
    src = source_dir()
    dirs, _ = FRAMEWORKS[framework]
    if cuda and not any((src / _CUDA_FOLDER).glob("*.cu")):
        raise BuildError(f"keras-trees CUDA sources not found (expected {src / _CUDA_FOLDER}/*.cu)")

    def wanted(path):
        if not path.is_file() or path.suffix not in _SOURCE_SUFFIXES:
            return False
        rel = path.relative_to(src)
        if cuda:
            return _in_cuda_build(rel, framework)
        return rel.parts[0] in dirs and not _cuda_only(rel)

    return sorted((p for p in src.rglob("*") if wanted(p)), key=lambda p: p.relative_to(src).as_posix())


def _units(framework="tensorflow", cuda=False):
    """The translation units of a framework's library (with `cuda`, of its CUDA
    build: .cc for the C++ compiler, .cu for nvcc)."""
    return [p for p in _sources(framework, cuda) if p.suffix in _UNIT_SUFFIXES]


def _compiler():
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise BuildError("no C++ compiler found (install g++ or set $CXX)")
    return cxx


def _flags(framework):
    """(framework version, compile flags, link flags)."""
    common = ["-std=c++17", "-O3", "-fPIC", "-DNDEBUG", "-fvisibility=hidden", "-fopenmp-simd"]
    if framework == "tensorflow":
        import tensorflow as tf

        compile_flags = list(tf.sysconfig.get_compile_flags())
        return tf.__version__, common + _cpu_flags() + compile_flags, list(tf.sysconfig.get_link_flags())
    if framework == "torch":
        return _torch_flags(common)
    import jax
    import jax.ffi

    # The XLA FFI API is header-only: nothing of jaxlib is linked.
    return jax.__version__, common + _cpu_flags() + ["-isystem", str(jax.ffi.include_dir())], []


def _torch_flags(common):
    """PyTorch's version and flags: its headers and libraries are those of
    ``torch.utils.cpp_extension.include_paths()`` and ``library_paths()``
    (the ``include/`` and ``lib/`` folders of the installed package, found
    here without importing cpp_extension, which imports setuptools: a third
    of a second on every start). The adapters use the stable ABI only (the
    AOTI C shim of libtorch_cpu)."""
    import torch

    root = os.path.dirname(os.path.abspath(torch.__file__))
    include, lib = os.path.join(root, "include"), os.path.join(root, "lib")
    compile_flags = common + _cpu_flags() + [_TORCH_TARGET_VERSION, "-isystem", include]
    # The stable ABI's C shim (aoti_torch_*, torch_*) lives in libtorch_cpu.
    return torch.__version__, compile_flags, [f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltorch_cpu"]


def _cpu_flags():
    """AVX2/FMA code when this CPU has them. The flags are part of the cache key,
    so a cache shared with a machine lacking them can never load the wrong build."""
    if os.environ.get("KERAS_TREES_PORTABLE_BUILD"):
        return []
    try:
        with open("/proc/cpuinfo") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        return []
    return ["-mavx2", "-mfma"] if {"avx2", "fma"} <= set(flags) else []


def _unit_flags(unit):
    """Flags of one translation unit: the CPU emulation of the GPU kernels
    (``*portable*.cc``) is compiled without floating-point contraction, so its
    arithmetic is the GPU's bit for bit (core/portable.h); the TensorFlow GPU
    adapters (``tensorflow/*gpu*``, in the CUDA build only) with
    KERAS_TREES_CUDA=1."""
    flags = ["-ffp-contract=off"] if "portable" in unit.name else []
    if unit.parent.name == "tensorflow" and "gpu" in unit.name:
        flags += _GPU_ADAPTER_FLAGS
    return flags


# --------------------------------------------------------------------------- CUDA


def find_nvcc():
    """The path of nvcc, the CUDA compiler, or None: ``$KERAS_TREES_NVCC``,
    ``$CUDA_HOME/bin/nvcc``, ``nvcc`` on the PATH, ``/usr/local/cuda/bin/nvcc``,
    the first that is an executable file."""
    candidates = [os.environ.get("KERAS_TREES_NVCC")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _require_nvcc():
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError(
            "building the CUDA kernels (cuda=True) needs nvcc, the CUDA compiler: none found in "
            "$KERAS_TREES_NVCC, $CUDA_HOME/bin, the PATH or /usr/local/cuda/bin (install the CUDA "
            "toolkit or set KERAS_TREES_NVCC)"
        )
    return nvcc


def _run_text(cmd):
    try:
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise BuildError(f"running {cmd[0]} failed: {exc}") from exc
    return result.returncode, result.stdout


@functools.lru_cache(maxsize=None)
def _nvcc_version(nvcc):
    """The last line of ``nvcc --version`` (e.g. ``Build cuda_13.0.r13.0/compiler.36424714_0``)."""
    code, out = _run_text([nvcc, "--version"])
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if code != 0 or not lines:
        raise BuildError(f"{nvcc} --version failed:\n{out}")
    return lines[-1]


@functools.lru_cache(maxsize=None)
def _nvcc_dryrun_paths(nvcc):
    """{"INCLUDES": [...], "LIBRARIES": [...]}: the include and library folders
    of this nvcc's toolkit, read off ``nvcc --dryrun``."""
    _, out = _run_text([nvcc, "--dryrun", "-shared", "-o", "keras_trees_probe.so", "keras_trees_probe.o"])
    paths = {"INCLUDES": [], "LIBRARIES": []}
    for line in out.splitlines():
        for name, flag in (("INCLUDES", "-I"), ("LIBRARIES", "-L")):
            if line.startswith(f"#$ {name}="):
                paths[name] += [arg[2:] for arg in shlex.split(line.split("=", 1)[1]) if arg.startswith(flag)]
    return paths


def _cuda_library_dir(nvcc):
    """The folder of libcudart_static.a of this nvcc's toolkit (among the
    library folders nvcc itself links with)."""
    candidates = list(_nvcc_dryrun_paths(nvcc)["LIBRARIES"])
    root = pathlib.Path(nvcc).resolve().parent.parent
    candidates += [str(root / "lib64"), str(root / "lib"), str(root / "targets" / "x86_64-linux" / "lib")]
    for folder in candidates:
        if os.path.isfile(os.path.join(folder, "libcudart_static.a")):
            return os.path.normpath(folder)
    raise BuildError(f"libcudart_static.a (the static CUDA runtime) not found next to {nvcc} "
                     f"(looked in {', '.join(dict.fromkeys(candidates))})")


def _cuda_archs():
    """The GPU architectures of ``$KERAS_TREES_CUDA_ARCHS`` (e.g. "80;90",
    "sm_80,sm_90", "8.0 9.0", "90a"), sorted, or the default ("90",)."""
    raw = os.environ.get("KERAS_TREES_CUDA_ARCHS", "").strip()
    if not raw:
        return _DEFAULT_CUDA_ARCHS
    archs = []
    for item in re.split(r"[;,\s]+", raw):
        if not item:
            continue
        arch = re.sub(r"^(sm_|compute_)", "", item.lower()).replace(".", "")
        if not re.fullmatch(r"\d{2,3}[af]?", arch):
            raise BuildError(f"KERAS_TREES_CUDA_ARCHS: {item!r} is not a GPU architecture "
                             "(expected e.g. \"80;90\")")
        archs.append(arch)
    if not archs:
        return _DEFAULT_CUDA_ARCHS
    return tuple(sorted(dict.fromkeys(archs), key=lambda a: (int(re.match(r"\d+", a).group()), a)))


def _gencode_flags(archs):
    """SASS for every architecture, PTX for the newest (which later GPUs JIT)."""
    flags = []
    for arch in archs[:-1]:
        flags += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    last = archs[-1]
    flags += ["-gencode", f"arch=compute_{last},code=[sm_{last},compute_{last}]"]
    return flags


def _nvcc_flags(framework, archs, nvcc=None):
    """nvcc's flags: no fused multiply-add contraction (--fmad=false), so the
    GPU computes the bits of the CPU emulation (core/portable.h); our warnings
    are errors (third-party headers come in with -isystem: the framework's,
    and the toolkit's own, CUB included, when `nvcc` is given)."""
    flags = [
        "-std=c++17", "-O3", "--fmad=false", "-DNDEBUG",
        "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden", "-Xcompiler", "-fopenmp-simd",
        "-Werror", "all-warnings", "-Xcompiler", "-Wall",
        *_gencode_flags(archs),
    ]
    for folder in _nvcc_dryrun_paths(nvcc)["INCLUDES"] if nvcc else []:
        flags += ["-isystem", os.path.normpath(folder)]
    if framework == "jax":
        import jax.ffi

        flags += ["-isystem", str(jax.ffi.include_dir())]
    else:
        import tensorflow as tf

        # TensorFlow's defines (the C++ ABI of std::string above all): the
        # entry points' strings cross into the host compiler's objects.
        flags += [f for f in tf.sysconfig.get_compile_flags() if f.startswith("-D")]
    return flags


def _cuda_config(framework):
    """(key prefix, C++ flags, nvcc, nvcc flags, link flags, extra key) of a
    framework's CUDA build."""
    nvcc = _require_nvcc()
    archs = _cuda_archs()
    cuda_link = ["-L", _cuda_library_dir(nvcc), "-lcudart_static", "-ldl", "-lrt", "-lpthread"]
    nvcc_flags = _nvcc_flags(framework, archs, nvcc)
    if framework == "jax":
        import jax

        # The handlers are C++ against the header-only XLA FFI: no Python ABI in the key.
        return (f"jaxcuda{jax.__version__}", [], nvcc, nvcc_flags, cuda_link,
                [_nvcc_version(nvcc), ";".join(archs)])
    version, cflags, lflags = _flags(framework)
    return (f"tfcuda{version}", cflags, nvcc, nvcc_flags, lflags + cuda_link,
            [_nvcc_version(nvcc), ";".join(archs), sysconfig.get_config_var("SOABI") or "",
             " ".join(_GPU_ADAPTER_FLAGS)])


# --------------------------------------------------------------------------- cache


def cache_dir():
    root = os.environ.get("KERAS_TREES_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "keras_trees"
    )
    return pathlib.Path(root)


def _digest(framework, cuda, parts):
    digest = hashlib.sha256()
    digest.update(_RULES_VERSION.encode())
    src = source_dir()
    for path in _sources(framework, cuda):
        digest.update(path.relative_to(src).as_posix().encode())
        digest.update(path.read_bytes())
    for part in parts:
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:16]


def library_path(framework=None, cuda=False):
    """Path of the shared library for the installed framework (by default the
    active Keras backend's) and the current sources; with `cuda`, of its CUDA
    build (raises BuildError when nvcc is not found)."""
    framework = _check_framework(framework)
    if cuda and framework not in CUDA_LIBRARIES:
        raise BuildError(f"keras-trees has CUDA kernels for {sorted(CUDA_LIBRARIES)}, not {framework!r}")
    if cuda:
        prefix, cflags, _, nvcc_flags, lflags, extra = _cuda_config(framework)
        key = _digest(framework, True, [" ".join(cflags), " ".join(nvcc_flags), " ".join(lflags), *extra])
        return cache_dir() / f"{prefix}-{key}" / CUDA_LIBRARIES[framework]
    version, cflags, lflags = _flags(framework)
    key = _digest(framework, False, [" ".join(cflags + lflags), sysconfig.get_config_var("SOABI") or ""])
    prefix = {"tensorflow": "tf", "jax": "jax", "torch": "torch"}[framework]
    return cache_dir() / f"{prefix}{version}-{key}" / FRAMEWORKS[framework][1]


@contextlib.contextmanager
def _file_lock(path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _compile_all(jobs_list):
    """Runs the (label, command) compile jobs, as many at a time as there are
    CPUs; raises BuildError with the output of the first that fails."""
    procs = []
    pending = list(jobs_list)
    jobs = max(1, min(len(pending), os.cpu_count() or 1))
    try:
        while pending or procs:
            while pending and len(procs) < jobs:
                label, cmd = pending.pop(0)
                try:
                    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                except OSError as exc:
                    raise BuildError(f"compiling {label} failed: {exc}") from exc
                procs.append((label, proc))
            label, proc = procs.pop(0)
            out, _ = proc.communicate()
            if proc.returncode != 0:
                raise BuildError(f"compiling {label} failed:\n{out.decode(errors='replace')}")
    finally:
        for _, other in procs:
            other.kill()
            other.wait()


def _batches(units, src):
    """The compile jobs of ``units`` as (object name, label, sources, flags):
    one per unit, but the C++ units of ``_UNITY_FOLDERS`` with the same flags
    are taken together, up to ``_UNITY_BATCH`` at a time in name order, into
    one unity unit (its object named after the units it holds)."""
    single, grouped = [], {}
    for unit in units:
        rel = unit.relative_to(src)
        if unit.suffix == ".cc" and rel.parts[0] in _UNITY_FOLDERS:
            grouped.setdefault((rel.parts[0], tuple(_unit_flags(unit))), []).append(unit)
        else:
            single.append((_object_name(unit, src), rel.as_posix(), [unit], _unit_flags(unit)))
    batches = []
    for (folder, flags), members in sorted(grouped.items()):
        members = sorted(members)
        for start in range(0, len(members), _UNITY_BATCH):
            part = members[start:start + _UNITY_BATCH]
            if len(part) == 1:
                batches.append((_object_name(part[0], src), part[0].relative_to(src).as_posix(), part, list(flags)))
                continue
            names = " ".join(u.relative_to(src).as_posix() for u in part)
            tag = hashlib.sha256(f"{names}|{' '.join(flags)}".encode()).hexdigest()[:12]
            batches.append((f"{folder}__unity-{tag}.o", f"{names} (one unity unit)", part, list(flags)))
    return single + batches


def _object_name(unit, src):
    return "__".join(unit.relative_to(src).with_suffix(".o").parts)


def _kept_objects(library):
    """{object name: path} of the object files kept next to a CPU library."""
    folder = library.parent / _OBJECTS
    return {p.name: str(p) for p in folder.glob("*.o")} if folder.is_dir() else {}


def build(force=False, verbose=True, framework=None, cuda=False):
    """Compiles a framework's library (by default the active Keras backend's)
    if needed and returns its path; with `cuda`, its CUDA build (BuildError
    when nvcc is not found). The TensorFlow CUDA build links the objects of the
    CPU build (built first if needed) and compiles only the GPU adapters and
    the CUDA sources."""
    framework = _check_framework(framework)
    target = library_path(framework, cuda=cuda)
    if target.exists() and not force:
        return target
    reuse = {}
    if cuda and framework == "tensorflow":
        reuse = _kept_objects(build(verbose=verbose, framework=framework))
    with _file_lock(target.parent / ".lock"):
        if target.exists() and not force:
            return target
        cxx = _compiler()
        src = source_dir()
        units = _units(framework, cuda)
        if cuda:
            _, cflags, nvcc, nvcc_flags, lflags, _ = _cuda_config(framework)
        else:
            _, cflags, lflags = _flags(framework)
            nvcc, nvcc_flags = None, []
        objects, jobs_list, sources = [], [], 0
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            object_dir = os.path.join(tmp, _OBJECTS)
            os.mkdir(object_dir)
            # nvcc units first, then the unity batches: they take longest.
            batches = sorted(_batches(units, src), key=lambda b: (b[2][0].suffix != ".cu", -len(b[2])))
            for name, label, members, flags in batches:
                if name in reuse:
                    objects.append(reuse[name])
                    continue
                obj = os.path.join(object_dir, name)
                if members[0].suffix == ".cu":
                    cmd = [nvcc, "-I", str(src), *nvcc_flags, "-c", str(members[0]), "-o", obj]
                else:
                    unit = members[0]
                    if len(members) > 1:
                        unit = pathlib.Path(tmp) / (name[:-2] + ".cc")
                        unit.write_text("".join(f'#include "{m}"\n' for m in members))
                    # custom_ops/ first: its "core/..." headers before the framework's.
                    cmd = [cxx, "-I", str(src), *cflags, *flags, "-c", str(unit), "-o", obj]
                jobs_list.append((label, cmd))
                sources += len(members)
                objects.append(obj)
            if verbose:
                if cuda:
                    what = (f"keras-trees: compiling CUDA kernels for {framework} (sm_"
                            + ", sm_".join(_cuda_archs()) + f", {sources} sources) into "
                            f"{target.parent} (first use only, about a minute)...")
                else:
                    what = (f"keras-trees: compiling {sources} kernel sources against {framework} "
                            f"into {target.parent} (first import only, under a minute)...")
                print(what, file=sys.stderr, flush=True)
            _compile_all(jobs_list)
            tmp_lib = os.path.join(tmp, target.name)
            cmd = [cxx, "-shared", *objects, "-o", tmp_lib, *lflags]
            result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if result.returncode != 0:
                raise BuildError("linking failed:\n" + result.stdout.decode(errors="replace"))
            if framework == "tensorflow" and not cuda:
                # Kept for the CUDA build; in place before the library, which
                # marks the build as complete.
                kept = target.parent / _OBJECTS
                if kept.exists():
                    shutil.rmtree(kept)
                os.replace(object_dir, kept)
            os.replace(tmp_lib, target)
        if verbose:
            print(f"keras-trees: built {target}", file=sys.stderr, flush=True)
    return target
