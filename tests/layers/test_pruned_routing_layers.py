"""prune_threshold of the end-to-end trees and forests and of convex polytope
trees: the layers' probabilistic paths (compiled kernel, dense reference,
sparse deep-heap path) against the NumPy oracle of the pruning rule; 0 is the
dense path; EM statistics, gradients and the configuration."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_trees import topology
from keras_trees.callbacks import EMLeafUpdate
from keras_trees.layers import ConvexPolytopeTree, EndToEndForest, EndToEndTree
from keras_trees.layers import _polytope_training
from keras_trees.ops import _library, path_probabilities, pruned_routing
from tests.ops.pruned_oracle import pruned_outputs, pruned_walk, split_probabilities
from tests.test_topology import random_tree

kernels = pytest.mark.skipif(not _library.custom_ops_available(), reason="custom ops not loaded")


def forest_for(rng, threshold, trees=3, depth=4, classes=3, dim=3, n=40):
    x = rng.normal(size=(n, dim)).astype("float32")
    y = rng.integers(0, classes, n).astype("int32")
    layer = EndToEndForest(trees, max_depth=depth, num_classes=classes, prune_threshold=threshold, seed=0)
    model = keras.Sequential([keras.Input((dim,)), layer])
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    state = random_tree(rng, depth, num_trees=trees)
    layer.node_state.assign(state)
    layer.gamma.assign(rng.uniform(0.5, 4.0, size=layer.gamma.shape).astype("float32"))
    layer.set_leaf_values(rng.dirichlet(np.ones(classes), size=(trees, layer.num_positions)))
    return layer, model, x, y


def oracle_posterior(layer, x):
    out, _, _, _ = pruned_outputs(
        x, np.asarray(layer.effective_kernel()), np.asarray(layer.split_bias), np.asarray(layer.gamma),
        np.asarray(layer.is_split()), layer.leaves_numpy(), layer.prune_threshold)
    return out.mean(1)


@pytest.mark.parametrize("threshold", [0.0, 0.05])
def test_forest_posterior_matches_the_oracle_on_every_path(rng, threshold):
    layer, _, x, _ = forest_for(rng, threshold)
    expected = oracle_posterior(layer, x)
    results = {"default": layer.posterior(x)}
    with _library.reference_only():
        results["reference"] = layer.posterior(x)
    layer.DENSE_POSITIONS = 0  # the sparse path of deep heaps
    assert not layer._dense_soft
    results["sparse"] = layer.posterior(x)
    with _library.reference_only():
        results["sparse reference"] = layer.posterior(x)
    for name, value in results.items():
        np.testing.assert_allclose(np.asarray(value), expected, rtol=2e-5, atol=2e-6, err_msg=name)
    if threshold > 0:  # something was dropped, and the outputs moved by less than the dropped mass
        exact, _, _, dropped = pruned_outputs(
            x, np.asarray(layer.effective_kernel()), np.asarray(layer.split_bias), np.asarray(layer.gamma),
            np.asarray(layer.is_split()), layer.leaves_numpy(), 0.0)
        _, _, _, dropped = pruned_outputs(
            x, np.asarray(layer.effective_kernel()), np.asarray(layer.split_bias), np.asarray(layer.gamma),
            np.asarray(layer.is_split()), layer.leaves_numpy(), layer.prune_threshold)
        gap = np.abs(expected - exact.mean(1))
        assert gap.max() > 1e-4 and (gap <= dropped.mean(1, keepdims=True) + 1e-6).all()


def test_threshold_zero_is_the_dense_path_bit_for_bit(rng):
    layer, _, x, _ = forest_for(rng, 0.0)
    mu = path_probabilities.heap_leaf_probabilities(
        x, layer.effective_kernel(), layer.split_bias, layer.gamma, layer.node_state)
    dense = tf.einsum("btn,tnk->bk", mu, tf.cast(layer.leaf_values, mu.dtype)) / layer.num_trees
    np.testing.assert_array_equal(np.asarray(layer.posterior(x)), np.asarray(dense))


@pytest.mark.parametrize("threshold", [0.0, 0.05])
def test_em_statistics_equal_the_closed_form_over_the_kept_leaves(rng, threshold):
    layer, model, x, y = forest_for(rng, threshold, trees=2)
    right, fav = split_probabilities(x, np.asarray(layer.effective_kernel()), np.asarray(layer.split_bias),
                                     np.asarray(layer.gamma))
    mu, _, _, _ = pruned_walk(right, fav, np.asarray(layer.is_split()), layer.prune_threshold)
    pi = layer.leaves_numpy()
    h = mu * np.transpose(pi[:, :, y], (2, 0, 1))  # (n, T, N): mu_l pi_l[y]
    h /= h.sum((1, 2), keepdims=True)  # Eq. 10 over the forest's leaves
    counts = np.einsum("btn,bk->tnk", h, np.eye(3)[y])
    got = np.asarray(layer.em_statistics(x, y, branch="soft")).reshape(counts.shape)
    np.testing.assert_allclose(got, counts, rtol=2e-4, atol=1e-6)
    cb = EMLeafUpdate(x, y)  # the compiled E-step gives the same M-step
    cb.set_model(model)
    cb.update()
    leaf = np.asarray(layer.node_state) == topology.LEAF
    reached = counts.sum(-1) > 0
    np.testing.assert_allclose(layer.leaves_numpy()[leaf & reached],
                               (counts / np.maximum(counts.sum(-1, keepdims=True), 1e-30))[leaf & reached],
                               rtol=1e-3, atol=1e-5)


@kernels
def test_training_gradients_of_the_kernel_match_the_reference(rng):
    layer, model, x, y = forest_for(rng, 0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    grads = []
    for reference in (False, True):
        with tf.GradientTape() as tape, _library.reference_only(reference):
            loss = loss_fn(y, model(x, training=True))
        grads.append(tape.gradient(loss, model.trainable_variables))
    for v, g, r in zip(model.trainable_variables, *grads):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-6, err_msg=v.path)
        assert np.abs(np.asarray(g)).max() > 0


@pytest.mark.parametrize("cls", [EndToEndTree, EndToEndForest, ConvexPolytopeTree])
def test_prune_threshold_is_configured_and_checked(cls):
    kwargs = {"num_classes": 2} | ({"num_trees": 2} if cls is EndToEndForest else {})
    layer = cls(prune_threshold=0.002, **kwargs)
    config = layer.get_config()
    assert config["prune_threshold"] == pytest.approx(0.002)
    assert cls.from_config(config).prune_threshold == layer.prune_threshold
    assert cls(**kwargs).prune_threshold == pytest.approx(pruned_routing.DEFAULT_PRUNE_THRESHOLD)
    for bad in (-1e-3, 1.0, float("inf")):
        with pytest.raises(ValueError, match="prune_threshold must be in"):
            cls(prune_threshold=bad, **kwargs)
    with pytest.raises(TypeError, match="prune_threshold"):
        cls(prune_threshold="small", **kwargs)


def polytope_for(rng, threshold, depth=3, experts=3, n=60):
    x = rng.uniform(-1, 1, size=(n, 2)).astype("float32")
    y = (np.linalg.norm(x, axis=1) < 0.6).astype("int32")
    tree = ConvexPolytopeTree(max_depth=depth, num_experts=experts, num_classes=2, prune_threshold=threshold,
                              seed=0)
    tree.build((None, 2))
    tree.node_state.assign(random_tree(rng, depth))
    tree.p0_logit.assign(rng.normal(size=tree.p0_logit.shape).astype("float32"))
    tree.steepness.assign(rng.uniform(1, 4, size=tree.steepness.shape).astype("float32"))
    tree.leaf_values.assign(rng.dirichlet(np.ones(2), size=(1, tree.num_positions)).astype("float32"))
    return tree, x, y


@pytest.mark.parametrize("annealing", [True, False])
def test_polytope_paths_match_the_oracle(rng, annealing):
    tree, x, y = polytope_for(rng, 0.05)
    tree.annealing = annealing
    expected, _, _, _ = pruned_outputs(
        x, np.asarray(tree.expert_kernel), np.asarray(tree.expert_bias), np.asarray(tree.steepness),
        np.asarray(tree.node_state)[:, : tree.num_internal] == topology.SPLIT, np.asarray(tree.leaf_values),
        tree.prune_threshold, expert_weights=np.asarray(tree.expert_weights()), rate0=np.asarray(tree.rate0()),
        annealed=annealing)
    outputs = {"default": tree(x, training=True)}
    with _library.reference_only():
        outputs["reference"] = tree(x, training=True)
    for name, value in outputs.items():
        np.testing.assert_allclose(np.asarray(value), expected[:, 0], rtol=2e-5, atol=2e-6, err_msg=name)
    # The refinement objective (soft class counts) and its gradients: kernel vs reference.
    w = np.ones(len(x), "float32")
    values, grads = [], []
    for reference in (False, True):
        with tf.GradientTape() as tape, _library.reference_only(reference):
            value = _polytope_training._tree_objective(tree, x, y, w, np.float32(1.0 / len(x)))
        values.append(float(value))
        grads.append(tape.gradient(value, tree.trainable_variables))
    assert values[0] == pytest.approx(values[1], rel=1e-5)
    for v, g, r in zip(tree.trainable_variables, *grads):
        r = np.zeros(v.shape) if r is None else np.asarray(r)  # p0 is unused without annealing
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-3, atol=1e-6, err_msg=v.path)
