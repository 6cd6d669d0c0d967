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
  ``jax.ffi.register_ffi_target`` under the JAX backend.

Neither build needs the other framework installed. Each library goes into a
cache directory keyed by the framework and its version, the compile flags, the
Python ABI and a hash of the sources it is made of, so an upgrade or a source
change triggers a rebuild and two versions can never be mixed.

* Cache directory: ``$KERAS_TREES_CACHE_DIR`` or ``~/.cache/keras_trees``.
* ``python -m keras_trees.build`` builds ahead of time for the active Keras
  backend (``--framework`` picks another, ``--force`` rebuilds).
* ``KERAS_TREES_PORTABLE_BUILD=1`` compiles without the AVX2/FMA flags that are
  otherwise used when the CPU has them.
* ``KERAS_TREES_DISABLE_CUSTOM_OPS=1`` skips building and loading; the library
  then runs on its ``keras.ops`` reference path.
"""

import contextlib
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

# Every file with these endings under the compiled folders is part of the cache key.
_SOURCE_SUFFIXES = (".cc", ".h", ".cu")
# framework -> (folders of custom_ops/ it is compiled from, library file name)
FRAMEWORKS = {
    "tensorflow": (("core", "tensorflow"), "_keras_trees_ops.so"),
    "jax": (("core", "xla"), "_keras_trees_xla.so"),
}


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
    ``custom_ops/`` with its ``core/``, ``tensorflow/`` and ``xla/`` subfolders.
    It is also the include root: sources include ``"core/common.h"`` and so on."""
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


def _sources(framework="tensorflow"):
    """The source files of a framework's library (cores and adapters), recursively,
    in a stable order."""
    src = source_dir()
    dirs, _ = FRAMEWORKS[framework]
    return sorted(
        (p for p in src.rglob("*")
         if p.is_file() and p.suffix in _SOURCE_SUFFIXES and p.relative_to(src).parts[0] in dirs),
        key=lambda p: p.relative_to(src).as_posix(),
    )


def _units(framework="tensorflow"):
    """The translation units of a framework's library."""
    return [p for p in _sources(framework) if p.suffix == ".cc"]


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
    import jax
    import jax.ffi

    # The XLA FFI API is header-only: nothing of jaxlib is linked.
    return jax.__version__, common + _cpu_flags() + ["-isystem", str(jax.ffi.include_dir())], []


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


def cache_dir():
    root = os.environ.get("KERAS_TREES_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "keras_trees"
    )
    return pathlib.Path(root)


def library_path(framework=None):
    """Path of the shared library for the installed framework (by default the
    active Keras backend's) and the current sources."""
    framework = _check_framework(framework)
    version, cflags, lflags = _flags(framework)
    digest = hashlib.sha256()
    src = source_dir()
    for path in _sources(framework):
        digest.update(path.relative_to(src).as_posix().encode())
        digest.update(path.read_bytes())
    digest.update(" ".join(cflags + lflags).encode())
    digest.update((sysconfig.get_config_var("SOABI") or "").encode())
    prefix = {"tensorflow": "tf", "jax": "jax"}[framework]
    key = f"{prefix}{version}-{digest.hexdigest()[:16]}"
    return cache_dir() / key / FRAMEWORKS[framework][1]


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


def build(force=False, verbose=True, framework=None):
    """Compiles a framework's library (by default the active Keras backend's)
    if needed and returns its path."""
    framework = _check_framework(framework)
    target = library_path(framework)
    if target.exists() and not force:
        return target
    with _file_lock(target.parent / ".lock"):
        if target.exists() and not force:
            return target
        _, cflags, lflags = _flags(framework)
        cxx = _compiler()
        src = source_dir()
        units = _units(framework)
        if verbose:
            print(
                f"keras-trees: compiling {len(units)} kernel sources against "
                f"{framework} into {target.parent} (first import only, about a minute)...",
                file=sys.stderr,
                flush=True,
            )
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            objects, procs = [], []
            jobs = max(1, min(len(units), os.cpu_count() or 1))
            pending = list(units)
            while pending or procs:
                while pending and len(procs) < jobs:
                    unit = pending.pop(0)
                    rel = unit.relative_to(src)
                    obj = os.path.join(tmp, "__".join(rel.with_suffix(".o").parts))
                    # custom_ops/ first: its "core/..." headers before the framework's.
                    cmd = [cxx, "-I", str(src), *cflags, "-c", str(unit), "-o", obj]
                    procs.append(
                        (unit, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                    )
                    objects.append(obj)
                unit, proc = procs.pop(0)
                out, _ = proc.communicate()
                if proc.returncode != 0:
                    for _, other in procs:
                        other.kill()
                    raise BuildError(
                        f"compiling {unit.relative_to(src)} failed:\n{out.decode(errors='replace')}"
                    )
            tmp_lib = os.path.join(tmp, target.name)
            cmd = [cxx, "-shared", *objects, "-o", tmp_lib, *lflags]
            result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if result.returncode != 0:
                raise BuildError("linking failed:\n" + result.stdout.decode(errors="replace"))
            os.replace(tmp_lib, target)
        if verbose:
            print(f"keras-trees: built {target}", file=sys.stderr, flush=True)
    return target
