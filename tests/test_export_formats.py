"""``model.export`` in every Keras format, for every layer family.

Each exported file is loaded in its own runtime (ONNX Runtime, the LiteRT
interpreter, ``tf.saved_model.load``) and compared with ``model.predict``;
NaN and Inf inputs behave as documented in :mod:`keras_trees.export`:

- ONNX and LiteRT (no custom ops, no assertions): every output of a row whose
  input holds a NaN or Inf is NaN, the other rows are unaffected;
- TF SavedModel (the custom ops, with their checks): the call fails with
  ``InvalidArgumentError``.

The models are the small trained models of ``tests/data/legacy_v0.1.0``
(one per family, written by ``tests/data/make_legacy_files.py``): loading
them costs about a second for all, training them again several, and the
grown trees route rows down real branches. Each (format, family) is
exported once per session and shared by its tests.
"""

import os

import keras
import numpy as np
import pytest

import keras_trees  # noqa: F401  (registers the classes and the export hooks)
from keras_trees import export as kt_export
from keras_trees.layers import TreeEnsembleLayer
from keras_trees.layers._xla import nan_rows
from keras_trees.ops import _library

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="ONNX (tf2onnx) and LiteRT (the TF converter) exports are tested on the TensorFlow backend")

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "legacy_v0.1.0")
FAMILIES = ("tree_ensemble", "end_to_end_tree", "end_to_end_forest", "convex_polytope_tree", "hinge_forest",
            "hinge_fern", "non_greedy_tree")
SUFFIX = {"onnx": ".onnx", "litert": ".tflite", "tf_saved_model": ""}


def _inputs():
    x = np.load(os.path.join(DATA, "x.npy"))[:16]
    bad = x.copy()
    bad[0, 1] = np.nan
    bad[1, 2] = np.inf
    bad[2, 0] = -np.inf
    return x, bad


def _onnx_runner(path):
    ort = pytest.importorskip("onnxruntime", reason="ONNX export tests need onnxruntime (keras-trees[export])")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x})[0]


def litert_interpreter(path):
    """The LiteRT interpreter of ``ai_edge_litert`` (TensorFlow's own
    ``tf.lite.Interpreter`` where it is not installed)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    return Interpreter(model_path=path, num_threads=1)


def _litert_runner(path):
    runner = litert_interpreter(path).get_signature_runner()
    (name,) = runner.get_input_details()

    def run(x):
        (out,) = runner(**{name: x}).values()
        return out

    return run


def _saved_model_runner(path):
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    return lambda x: loaded.serve(x).numpy()


RUNNERS = {"onnx": _onnx_runner, "litert": _litert_runner, "tf_saved_model": _saved_model_runner}


def _load(family):
    model = keras.saving.load_model(os.path.join(DATA, f"{family}.keras"))
    model.predict(_inputs()[0][:2], verbose=0)  # Keras exports only a model that was called
    return model


class _Exports:
    """(format, family) -> (model, exported path), each exported once."""

    def __init__(self, directory):
        self.directory = directory
        self.models = {}
        self.paths = {}

    def model(self, family):
        if family not in self.models:
            self.models[family] = _load(family)
        return self.models[family]

    def get(self, format, family):
        if format == "onnx":
            pytest.importorskip("tf2onnx", reason="ONNX export needs tf2onnx (keras-trees[export])")
        key = (format, family)
        if key not in self.paths:
            path = str(self.directory / f"{family}{SUFFIX[format]}")
            self.model(family).export(path, format=format, verbose=False)  # the plain Keras call
            self.paths[key] = path
        return self.model(family), self.paths[key]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    return _Exports(tmp_path_factory.mktemp("exports"))


def _contains_custom_ops(path):
    if os.path.isdir(path):
        path = os.path.join(path, "saved_model.pb")
    with open(path, "rb") as f:
        return b"KerasTrees>" in f.read()


def test_keras_exporters_are_wrapped():
    # Model.export dispatches to these attributes; a Keras that moves them
    # must fail here, not write files ONNX Runtime refuses.
    import keras.src.export as keras_export

    for name, format in kt_export.PORTABLE_EXPORTERS.items():
        assert getattr(getattr(keras_export, name), "keras_trees_format", None) == format, name
    assert kt_export.install_keras_hooks() == ("onnx", "litert", "openvino")  # idempotent
    assert not hasattr(keras_export.export_onnx.__wrapped__, "keras_trees_format")


@pytest.mark.slow
@pytest.mark.parametrize("format", ["onnx", "litert", "tf_saved_model"])
@pytest.mark.parametrize("family", FAMILIES)
def test_export_matches_predict(exports, format, family):
    model, path = exports.get(format, family)
    x, _ = _inputs()
    expected = model.predict(x, verbose=0)
    got = RUNNERS[format](path)(x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"{format} {family}")
    # ONNX and LiteRT: the portable path; the SavedModel keeps the fast custom ops.
    assert _contains_custom_ops(path) == (format == "tf_saved_model" and _library.custom_ops_available())


@pytest.mark.slow
@pytest.mark.parametrize("format", ["onnx", "litert"])
@pytest.mark.parametrize("family", FAMILIES)
def test_nan_and_inf_rows_give_nan_rows(exports, format, family):
    model, path = exports.get(format, family)
    x, bad = _inputs()
    run = RUNNERS[format](path)
    got = run(bad)
    assert np.isnan(got[:3]).all(), f"{format} {family}: rows with NaN, +Inf, -Inf gave {got[:3]}"
    np.testing.assert_allclose(got[3:], model.predict(x[3:], verbose=0), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["end_to_end_tree", "hinge_fern"])
def test_saved_model_rejects_nan_and_inf(exports, family):
    import tensorflow as tf

    _, path = exports.get("tf_saved_model", family)
    run = RUNNERS["tf_saved_model"](path)
    _, bad = _inputs()
    for row in range(3):
        with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or Inf"):
            run(bad[row:row + 1])


def _tiny_model():
    model = keras.Sequential([keras.Input((3,)), TreeEnsembleLayer(num_trees=2, max_depth=2, units=1)])
    model.predict(np.zeros((2, 3), "float32"), verbose=0)
    return model


@pytest.mark.parametrize("format", ["onnx", "litert"])
def test_nan_weights_are_refused_before_writing(tmp_path, format):
    model = _tiny_model()
    weight = model.layers[0].trainable_weights[0]
    weight.assign(np.full(weight.shape, np.nan, "float32"))
    path = tmp_path / f"m{SUFFIX[format]}"
    with pytest.raises(ValueError, match="contains NaN or Inf"):
        model.export(str(path), format=format, verbose=False)
    assert not path.exists()


def test_a_file_naming_custom_ops_is_removed_with_an_error(tmp_path):
    # What an exporter that bypassed the portable path would write: tf2onnx
    # keeps an op it cannot convert as a node of its TensorFlow name.
    def exporter(model, filepath, verbose=None, **kwargs):
        with open(filepath, "wb") as f:
            f.write(b"\x08\x07graph\x12\x1bKerasTrees>HardRouting\x00node")

    path = tmp_path / "m.onnx"
    wrapped = kt_export._portable_exporter(exporter, "onnx")
    with pytest.raises(RuntimeError, match=r"KerasTrees>HardRouting.*reference_only"):
        wrapped(_tiny_model(), str(path))
    assert not path.exists()


@pytest.mark.slow
def test_unwrapped_exporter_output_is_detected(tmp_path):
    # Keras' own ONNX exporter without the hook writes a file ONNX Runtime
    # refuses; the check that follows every wrapped export recognises it.
    pytest.importorskip("tf2onnx", reason="ONNX export needs tf2onnx (keras-trees[export])")
    import keras.src.export as keras_export

    if not _library.custom_ops_available():
        pytest.skip("the compiled kernels are not loaded: nothing to bypass")
    model = _load("hinge_forest")
    path = str(tmp_path / "m.onnx")
    keras_export.export_onnx.__wrapped__(model, path, verbose=False)
    with pytest.raises(RuntimeError, match="KerasTrees>HingeForest"):
        kt_export.check_no_custom_ops(path, "onnx")
    assert not os.path.exists(path)


def test_models_without_tree_layers_are_left_to_keras(monkeypatch):
    calls = []
    wrapped = kt_export._portable_exporter(lambda *a, **k: calls.append(_library.exporting_portable()), "onnx")
    dense = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    wrapped(dense, "unused.onnx")
    wrapped(_tiny_model(), "unused.onnx")
    assert calls == [None, "onnx"]


def test_nan_rows_masks_rows_of_the_leading_axes():
    x = np.ones((2, 3, 4), "float32")
    x[0, 1, 2] = np.nan
    x[1, 0, 0] = -np.inf
    y = np.arange(2 * 3 * 5, dtype="float32").reshape(2, 3, 5)
    out = keras.ops.convert_to_numpy(nan_rows(x, y))
    bad = np.zeros((2, 3), bool)
    bad[0, 1] = bad[1, 0] = True
    assert np.isnan(out[bad]).all()
    np.testing.assert_array_equal(out[~bad], y[~bad])
    # An output without the leading axes (a pooled output): rows of the batch axis.
    pooled = keras.ops.convert_to_numpy(nan_rows(x, y[:, 0]))
    assert np.isnan(pooled).all()
    x[1, 0, 0] = 1.0
    pooled = keras.ops.convert_to_numpy(nan_rows(x, y[:, 0]))
    assert np.isnan(pooled[0]).all() and np.array_equal(pooled[1], y[1, 0])
    # Integer outputs (leaf ids) pass through.
    ids = keras.ops.convert_to_numpy(nan_rows(x, np.ones((2, 3, 1), "int32")))
    assert ids.dtype == np.int32 and (ids == 1).all()
