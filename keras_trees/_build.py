"""Builds and loads the keras-trees custom op library.

The C++ sources in ``custom_ops/`` are compiled against the TensorFlow that is
installed *when the library is first imported*, never against the copy that a
PEP 517 build environment might hold. The library is made of the
framework-free kernel cores (``custom_ops/core/``) and the TensorFlow op
registrations and adapter kernels over them (``custom_ops/tensorflow/``);
other folders there (kernels for other frameworks) are not compiled here.

The shared library goes into a cache directory keyed by the TensorFlow
version, its compile flags, the Python ABI and a hash of every source under
``custom_ops/``, so a TensorFlow upgrade or a source change triggers a rebuild
and two versions can never be mixed.

* Cache directory: ``$KERAS_TREES_CACHE_DIR`` or ``~/.cache/keras_trees``.
* ``python -m keras_trees.build`` builds ahead of time (``--force`` rebuilds).
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

_LIB_NAME = "_keras_trees_ops.so"
# Every file with these endings under custom_ops/ is part of the cache key.
_SOURCE_SUFFIXES = (".cc", ".h", ".cu")
# The folders of custom_ops/ whose .cc files make up the TensorFlow library.
_COMPILED_DIRS = ("core", "tensorflow")


class BuildError(RuntimeError):
    """The custom op library could not be compiled."""


def source_dir():
    """Returns the folder holding the C++ sources (checkout or installed wheel):
    ``custom_ops/`` with its ``core/`` and ``tensorflow/`` subfolders. It is also
    the include root: sources include ``"core/common.h"`` and so on."""
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here.parent / "custom_ops", here / "custom_ops"):
        if all(any((candidate / sub).glob("*.cc")) for sub in _COMPILED_DIRS):
            return candidate
    raise BuildError(
        f"keras-trees C++ sources not found next to {here} "
        "(expected custom_ops/core/*.cc and custom_ops/tensorflow/*.cc); reinstall the package."
    )


def _sources():
    """Every source file under custom_ops/, recursively, in a stable order."""
    src = source_dir()
    return sorted(
        (p for p in src.rglob("*") if p.is_file() and p.suffix in _SOURCE_SUFFIXES),
        key=lambda p: p.relative_to(src).as_posix(),
    )


def _units():
    """The translation units of the TensorFlow library."""
    src = source_dir()
    return [p for p in _sources() if p.suffix == ".cc" and p.relative_to(src).parts[0] in _COMPILED_DIRS]


def _compiler():
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise BuildError("no C++ compiler found (install g++ or set $CXX)")
    return cxx


def _flags():
    import tensorflow as tf

    compile_flags = list(tf.sysconfig.get_compile_flags())
    link_flags = list(tf.sysconfig.get_link_flags())
    common = ["-std=c++17", "-O3", "-fPIC", "-DNDEBUG", "-fvisibility=hidden", "-fopenmp-simd"]
    return tf.__version__, common + _cpu_flags() + compile_flags, link_flags


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


def library_path():
    """Path of the shared library for the current TensorFlow and sources."""
    tf_version, cflags, lflags = _flags()
    digest = hashlib.sha256()
    src = source_dir()
    for path in _sources():
        digest.update(path.relative_to(src).as_posix().encode())
        digest.update(path.read_bytes())
    digest.update(" ".join(cflags + lflags).encode())
    digest.update((sysconfig.get_config_var("SOABI") or "").encode())
    key = f"tf{tf_version}-{digest.hexdigest()[:16]}"
    return cache_dir() / key / _LIB_NAME


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


def build(force=False, verbose=True):
    """Compiles the op library if needed and returns its path."""
    target = library_path()
    if target.exists() and not force:
        return target
    with _file_lock(target.parent / ".lock"):
        if target.exists() and not force:
            return target
        _, cflags, lflags = _flags()
        cxx = _compiler()
        src = source_dir()
        units = _units()
        if verbose:
            print(
                f"keras-trees: compiling {len(units)} custom op sources against "
                f"TensorFlow into {target.parent} (first import only, about a minute)...",
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
                    # custom_ops/ first: its "core/..." headers before any of TensorFlow's.
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
            tmp_lib = os.path.join(tmp, _LIB_NAME)
            cmd = [cxx, "-shared", *objects, "-o", tmp_lib, *lflags]
            result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if result.returncode != 0:
                raise BuildError("linking failed:\n" + result.stdout.decode(errors="replace"))
            os.replace(tmp_lib, target)
        if verbose:
            print(f"keras-trees: built {target}", file=sys.stderr, flush=True)
    return target
