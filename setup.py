"""Package discovery (all other metadata lives in pyproject.toml).

The C++ sources in custom_ops/ (framework-free kernel cores in core/, TensorFlow
op registrations and adapter kernels in tensorflow/, and any further
framework folder) ship inside the package as keras_trees.custom_ops and are
compiled at first import against the installed TensorFlow, never in pip's
isolated build environment (see keras_trees/_build.py).
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["keras_trees", "keras_trees.*"]) + ["keras_trees.custom_ops"],
    package_dir={"keras_trees.custom_ops": "custom_ops"},
    package_data={"keras_trees.custom_ops": ["**/*.cc", "**/*.h", "**/*.cu", "**/*.cuh"]},
)
