"""Tests in tests/backends/ run under every Keras backend.

CI runs this folder three times, with KERAS_BACKEND=tensorflow, jax and torch
(see .ci/run); the rest of tests/ runs on TensorFlow only.
"""

import os
import textwrap

import keras
import pytest

from tests.conftest import add_xla_flags, run_python

BACKEND = keras.backend.backend()

# Prepended to code run by `run_replicated`: two CPU devices and a `replicated()`
# context that trains on both (MirroredStrategy on TensorFlow, DataParallel on JAX).
_PRELUDE = {
    "tensorflow": """
import tensorflow as tf
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import contextlib, keras
def replicated():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    return strategy.scope()
""",
    "jax": """
import contextlib, jax, keras
assert len(jax.devices()) == 2, jax.devices()
def replicated():
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
    return contextlib.nullcontext()
""",
}


def run_replicated(code, tmp_path, timeout=600):
    """Runs `code` in a fresh process on two CPU devices of the current backend.

    The code calls ``replicated()`` (a context manager) around model creation
    and training. Skips on PyTorch, which has no multi-device CPU training in
    Keras. Returns the child's stdout.
    """
    if BACKEND not in _PRELUDE:
        pytest.skip(f"no multi-device CPU training for the {BACKEND} backend")
    env = {"KERAS_BACKEND": BACKEND, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if BACKEND == "jax":
        env["XLA_FLAGS"] = add_xla_flags(os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2")
    return run_python(_PRELUDE[BACKEND] + textwrap.dedent(code), cwd=tmp_path, env=env, timeout=timeout)


def run_fresh(code, tmp_path, timeout=600):
    """Runs `code` in a fresh process on the current backend (for seeds and reloads)."""
    return run_python(code, cwd=tmp_path, env={"KERAS_BACKEND": BACKEND}, timeout=timeout)
