"""Statistics over a stream of batches on every Keras backend: EMLeafUpdate
from a list of batches sets the same leaves as from arrays."""

import keras
import numpy as np
import pytest

from keras_trees.callbacks import EMLeafUpdate
from keras_trees.layers import EndToEndTree


def em_leaves(cb):
    keras.utils.set_random_seed(0)
    tree = EndToEndTree(max_depth=2, num_classes=3, seed=0)
    model = keras.Sequential([keras.Input((3,)), tree])
    cb.set_model(model)
    cb.on_train_begin()
    cb.update()
    return tree.leaves_numpy()


@pytest.mark.slow
def test_em_leaf_update_from_a_list_of_batches_equals_arrays():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(150, 3)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3)).astype("int32")
    w = rng.uniform(0.2, 3.0, size=150)
    expected = em_leaves(EMLeafUpdate(x, y, sample_weight=w, batch_size=40))
    assert not np.allclose(expected, expected[:, :1])
    batches = [(x[i:i + 32], y[i:i + 32], w[i:i + 32]) for i in range(0, 150, 32)]
    np.testing.assert_allclose(em_leaves(EMLeafUpdate(batches)), expected, rtol=1e-5, atol=1e-7)
    # Without weights in the batches, with class weights.
    expected = em_leaves(EMLeafUpdate(x, y, class_weight={0: 3.0}))
    batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 150, 32)]
    np.testing.assert_allclose(em_leaves(EMLeafUpdate(batches, class_weight={0: 3.0})), expected,
                               rtol=1e-5, atol=1e-7)
