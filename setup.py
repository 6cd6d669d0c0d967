"""Package discovery (all other metadata lives in pyproject.toml).

The C++ sources in custom_ops/ (framework-free kernel cores in core/, and the
adapters of each binding: tensorflow/, xla/ for JAX, torch/, cuda/) ship inside
the package as keras_trees.custom_ops and are compiled at first import against
the backend installed then, never in pip's isolated build environment (see
keras_trees/_build.py); the wheel is pure Python plus these sources.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["keras_trees", "keras_trees.*"]) + ["keras_trees.custom_ops"],
    package_dir={"keras_trees.custom_ops": "custom_ops"},
    package_data={"keras_trees.custom_ops": ["**/*.cc", "**/*.h", "**/*.cu", "**/*.cuh"]},
)
