"""The packages install and work as the editable install does.

``python -m build`` (no isolation: CI's environment has setuptools and
``build``, extra ``dev``) writes an sdist of a copy of the sources and a wheel
built from that sdist, so the wheel proves the sdist complete. The wheel is
installed with ``--no-deps`` into a fresh virtual environment that sees CI's
installed packages (Keras, TensorFlow, ...) through a ``.pth`` line, but not
the editable keras-trees (a ``.pth`` line adds a folder without running the
``.pth`` files in it). There, under ``KERAS_BACKEND=jax`` with TensorFlow made
unimportable and an empty kernel cache, ``import keras_trees`` compiles the
kernels from the sources the wheel ships, loads them and runs a layer on them.
"""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ["pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "keras_trees", "custom_ops"]

pytestmark = pytest.mark.slow


def project_version():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]["version"]


def test_version_is_one_number():
    import keras_trees

    assert keras_trees.__version__ == project_version()
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as handle:
        assert f"## {project_version()}\n" in handle.read(), "CHANGELOG.md has no section for this version"


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.o"))
        else:
            shutil.copy(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"python -m build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    [wheel] = glob.glob(str(out / "*.whl"))
    [sdist] = glob.glob(str(out / "*.tar.gz"))
    return wheel, sdist


def test_wheel_and_sdist_hold_the_sources(dist):
    wheel, sdist = dist
    version = project_version()
    assert os.path.basename(wheel).startswith(f"keras_trees-{version}-py3-none-any")
    names = zipfile.ZipFile(wheel).namelist()
    sources = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "custom_ops", "**", "*.*"),
                                                                   recursive=True)
                     if p.endswith((".cc", ".h", ".cu", ".cuh")))
    assert sources and all("keras_trees/" + s.replace("custom_ops/", "custom_ops/", 1) in names for s in sources), (
        "the wheel lacks kernel sources")
    assert "keras_trees/__init__.py" in names and not any(n.endswith((".so", ".o")) for n in names)
    assert not any(n.startswith("tests/") for n in names)
    metadata = zipfile.ZipFile(wheel).read(f"keras_trees-{version}.dist-info/METADATA").decode()
    assert "Requires-Dist: tensorflow>=2.16; extra == \"tensorflow\"" in metadata, "TensorFlow is an extra"
    assert not any(line.startswith("Requires-Dist: tensorflow") and "extra" not in line
                   for line in metadata.splitlines())
    members = tarfile.open(sdist).getnames()
    for required in ("pyproject.toml", "setup.py", "README.md", "custom_ops/core/common.h"):
        assert f"keras_trees-{version}/{required}" in members, f"the sdist lacks {required}"


def test_installed_wheel_compiles_its_kernels_at_first_import(dist, tmp_path):
    wheel, _ = dist
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    result = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
                             "--quiet", wheel], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "ci_packages.pth"), "w") as handle:  # CI's packages, after the venv's own
        handle.write(sysconfig.get_paths()["purelib"] + "\n")
    check = f"""
import glob, importlib.abc, importlib.metadata, os, sys

class NoTensorFlow(importlib.abc.MetaPathFinder):  # the JAX backend must not need TensorFlow
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ImportError("TensorFlow is not installed here")

sys.meta_path.insert(0, NoTensorFlow())
import numpy as np
import keras_trees
from keras_trees import ops
from keras_trees.layers import TreeEnsembleLayer
assert keras_trees.__file__.startswith({str(venv)!r}), keras_trees.__file__
assert importlib.metadata.version("keras-trees") == keras_trees.__version__ == {project_version()!r}
assert glob.glob(os.path.join(os.environ["KERAS_TREES_CACHE_DIR"], "*", "*.so")), "no kernel library was built"
summary = ops.execution_report()["summary"]
assert summary.endswith("kernels"), summary
y = TreeEnsembleLayer(num_trees=2, max_depth=3, units=2)(np.ones((4, 5), "float32"))
assert tuple(y.shape) == (4, 2)
assert "tensorflow" not in sys.modules
print("ok", summary)
"""
    # JAX: its kernels compile against header-only XLA FFI, several times faster than
    # against TensorFlow's headers; the build and load path is the same for every backend.
    env = dict(os.environ, KERAS_BACKEND="jax", KERAS_TREES_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYTHONPATH", None)
    result = subprocess.run([python, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, f"the installed wheel failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
    assert "compiling" in result.stderr, "the kernels were not compiled at first import"
    assert "ok " in result.stdout
