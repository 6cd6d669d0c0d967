"""Files saved by earlier releases load, silently, to identical predictions.

``tests/data/legacy_v*/`` holds one small trained model per layer family saved
by a release (written by ``tests/data/make_legacy_files.py`` with that
release's code) and the predictions it made on fixed inputs.
"""

import glob
import os
import warnings

import keras
import numpy as np
import pytest

import keras_trees  # noqa: F401  (registers the serializable classes)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
RELEASES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(DATA, "legacy_v*")))
FAMILIES = ("tree_ensemble", "tree_ensemble_regression", "end_to_end_tree", "end_to_end_forest",
            "convex_polytope_tree", "hinge_forest", "hinge_fern", "non_greedy_tree")


def _assert_same(actual, expected, **kwargs):
    """The predictions recorded when the files were written, to float32 rounding.

    Bit-identity with the recording is not a promise a library can keep: the
    files were written on another machine, and TensorFlow's CPU kernels (Eigen,
    oneDNN) pick their vector width and summation order from the CPU they run
    on (AVX-512 against AVX2 moves the last bit of a matmul or an exp). On
    TensorFlow, the backend that wrote them, a few ulps; other backends compute
    in another order, so to a looser float32 rounding there. Bit-identity where
    it is promised (the same model saved and loaded again, on one machine) is
    checked by ``test_legacy_file_saved_again_round_trips``.
    """
    if keras.backend.backend() == "tensorflow":
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6, **kwargs)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, **kwargs)


def _cases():
    for release in RELEASES:
        for family in FAMILIES:
            yield pytest.param(release, family, id=f"{release}-{family}")


def test_every_release_has_every_family():
    assert RELEASES, "no legacy files found"
    for release in RELEASES:
        expected = np.load(os.path.join(DATA, release, "expected.npz"))
        assert set(FAMILIES) <= set(expected.files)
        for family in FAMILIES:
            assert os.path.exists(os.path.join(DATA, release, f"{family}.keras"))


def _load(release, family):
    return _load_path(os.path.join(DATA, release, f"{family}.keras"))


def _load_path(path):
    """The loaded model and the warnings keras-trees raised while loading it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras.saving.load_model(path)
    ours = [w for w in caught if "keras_trees" in str(w.filename) or "deprecat" in str(w.message).lower()]
    return model, ours


@pytest.mark.parametrize("release,family", list(_cases()))
def test_legacy_file_loads_to_identical_predictions(release, family):
    folder = os.path.join(DATA, release)
    x = np.load(os.path.join(folder, "x.npy"))
    expected = np.load(os.path.join(folder, "expected.npz"))
    model, caught = _load(release, family)
    # Old files are not the user's fault: loading them does not warn.
    assert not caught, [str(w.message) for w in caught]
    _assert_same(model.predict(x, verbose=0), expected[family])
    soft = f"{family}/soft"
    if soft in expected.files:
        _assert_same(keras.ops.convert_to_numpy(model.layers[-1].posterior(x, routing="soft")), expected[soft])


@pytest.mark.parametrize("release", RELEASES)
def test_legacy_file_saved_again_round_trips(release, tmp_path):
    """A legacy model saved with the current code reloads to the same predictions."""
    folder = os.path.join(DATA, release)
    x = np.load(os.path.join(folder, "x.npy"))
    expected = np.load(os.path.join(folder, "expected.npz"))
    for family in FAMILIES:
        model, _ = _load(release, family)
        path = os.path.join(tmp_path, f"{family}.keras")
        model.save(path)
        again, caught = _load_path(path)
        assert not caught, [str(w.message) for w in caught]
        predicted = again.predict(x, verbose=0)
        np.testing.assert_array_equal(predicted, model.predict(x, verbose=0), err_msg=family)
        _assert_same(predicted, expected[family], err_msg=family)

