"""Under ``jax.jit`` (the JAX run of this folder), the jitted fit and predict
steps of a forest and a polytope tree reject NaN in x, a NaN kernel and a
node_state outside the enum (XLA runtime errors carrying the message), and a
sound model predicts. The eager and ``tf.function`` paths of the same checks
are tests/layers/test_heap_layer_inputs.py's."""

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.layers import ConvexPolytopeTree, EndToEndForest
from tests.backends.conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="the jax.jit path: the JAX run of tests/backends")

FAMILIES = {
    "EndToEndForest": lambda: EndToEndForest(2, max_depth=2, num_classes=3, prune_threshold=0.0, seed=0),
    "ConvexPolytopeTree": lambda: ConvexPolytopeTree(max_depth=2, num_experts=2, num_classes=3,
                                                     prune_threshold=0.0, seed=0),
}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checks_hold_inside_jax_jit(family):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.integers(0, 3, 16)
    bad = x.copy()
    bad[2, 1] = np.nan
    layer = FAMILIES[family]()
    model = keras.Sequential([keras.Input((4,)), layer])
    if isinstance(layer, ConvexPolytopeTree):
        # Grown, so the outputs read x: under jax.jit a check guards what reads
        # the checked value (a root-leaf tree's output does not depend on x).
        layer.node_state.assign(topology.perfect(1, layer.max_depth))
    model.compile("adam", "sparse_categorical_crossentropy")

    def fit(data):
        # JAX dispatches asynchronously: a failed check surfaces when the
        # step's results are read (here the loss), as any XLA runtime error does.
        return float(model.fit(data, y, epochs=1, verbose=0).history["loss"][-1])

    # One model: its jitted train and predict steps compile once and every
    # check below runs inside them. A valid fit first builds the optimizer;
    # every variable is restored after each failed step (a failed JAX fit
    # leaves the variables without their values).
    assert np.isfinite(fit(x))
    state = model.trainable_variables + model.non_trainable_variables + model.optimizer.variables
    saved = [np.array(v.numpy()) for v in state]

    def restore():
        for v, value in zip(state, saved):
            v.assign(value)

    import jax

    with pytest.raises(jax.errors.JaxRuntimeError, match="x contains NaN or Inf"):
        fit(bad)
    restore()
    kernel = layer.weights[0]
    k = np.array(kernel.numpy())
    k.reshape(-1)[0] = np.nan
    kernel.assign(k)
    with pytest.raises(jax.errors.JaxRuntimeError, match="variable " + kernel.name + " contains NaN or Inf"):
        fit(x)
    restore()
    s = np.array(layer.node_state.numpy())
    s[0, 0] = 7
    layer.node_state.assign(s)
    with pytest.raises(jax.errors.JaxRuntimeError, match="node_state is not a valid topology"):
        model.predict(x, verbose=0)
    restore()
    assert model.predict(x, verbose=0).shape == (16, 3)
    assert np.asarray(layer(x.reshape(2, 8, 4), training=True)).shape == (2, 8, 3)
