"""Training an end-to-end tree builds a graph that TensorFlow's type inference accepts.

The training-time model of an end-to-end tree is one of two computations
chosen by the ``growing`` variable (the greedy-growth model or the
probabilistic posterior). TensorFlow prints "Type inference failed. This
indicates an invalid graph that escaped type checking" (with a proto dump)
when the gradient of a conditional pairs the intermediates of two branches of
different dtypes. The message comes from TensorFlow's C++ runtime, so it is
read from the stderr of a fresh process.
"""

import os
import subprocess
import sys
import textwrap

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("tensorflow")

CODE = """
import numpy as np, keras
from keras_trees.layers import EndToEndTree

rng = np.random.default_rng(0)
x = rng.normal(size=(128, 3)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
model = keras.Sequential([keras.Input((3,)), EndToEndTree(max_depth=2, num_classes=2, seed=0)])
model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
model.fit(x, y, batch_size=64, epochs=1, verbose=0)  # one graph holds both training-time models
print("trained")
"""


@pytest.mark.slow
def test_training_an_end_to_end_tree_on_tensorflow_prints_no_type_inference_failure(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="tensorflow",
               PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the message is a warning: it must not be filtered out here
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CODE)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trained" in proc.stdout
    assert "Type inference failed" not in proc.stderr, proc.stderr[-3000:]
