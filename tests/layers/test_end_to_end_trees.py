"""EndToEndTree / EndToEndForest: EM, growth, annealing, routing modes, errors."""

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.layers import EndToEndForest, EndToEndTree, per_split_features, split_cnn


def model_for(layer, dim, lr=0.01):
    model = keras.Sequential([keras.Input((dim,)), layer])
    model.compile(keras.optimizers.Adam(lr), keras.losses.SparseCategoricalCrossentropy())
    return model


def blobs(rng, n=400):
    x = rng.normal(size=(n, 2)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0.3)).astype("int32")
    return x, y


def test_em_update_equals_closed_form(rng):
    x, y = blobs(rng, 60)
    tree = EndToEndTree(max_depth=2, num_classes=4, seed=1)
    model = model_for(tree, 2)
    tree.set_leaf_values(rng.dirichlet(np.ones(4), size=(1, 7)).astype("float32"))
    tree.gamma.assign(np.array([[0.7, 1.3, 2.0]], "float32"))
    w, b = np.asarray(tree.effective_kernel())[0], np.asarray(tree.split_bias)[0]
    g, pi = np.asarray(tree.gamma)[0], np.asarray(tree.leaf_values)[0].astype(np.float64)
    s = 1 / (1 + np.exp(-g * (x @ w.T + b)))  # right probabilities, (n, 3)
    mu = np.stack([(1 - s[:, 0]) * (1 - s[:, 1]), (1 - s[:, 0]) * s[:, 1],
                   s[:, 0] * (1 - s[:, 2]), s[:, 0] * s[:, 2]], 1)  # leaves 3..6
    h = mu * pi[3:7, y].T
    h /= h.sum(1, keepdims=True)  # Eq. 10
    expected = np.stack([np.bincount(y, weights=h[:, l], minlength=4) for l in range(4)])
    expected /= expected.sum(1, keepdims=True)  # Eq. 13
    cb = EMLeafUpdate(x, y)
    cb.set_model(model)
    cb.update()
    np.testing.assert_allclose(np.asarray(tree.leaf_values)[0, 3:7], expected, rtol=1e-4, atol=1e-6)


def test_deterministic_model_equals_probabilistic_as_gamma_grows(rng):
    x, y = blobs(rng, 200)
    forest = EndToEndForest(num_trees=3, max_depth=3, num_classes=4, seed=2)
    model_for(forest, 2)
    forest.set_leaf_values(rng.dirichlet(np.ones(4), size=(3, 15)).astype("float32"))
    hard = np.asarray(forest(x, training=False))
    gaps = []
    for gamma in (1.0, 10.0, 1000.0):
        forest.gamma.assign(np.full((3, 7), gamma, "float32"))
        gaps.append(np.abs(np.asarray(forest.posterior(x)) - hard).mean())
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 2e-3, gaps


@pytest.mark.slow
def test_end_to_end_training_learns_and_routes_hard(rng):
    x, y = blobs(rng)
    tree = EndToEndTree(max_depth=2, num_classes=4, seed=0)
    model = model_for(tree, 2, lr=0.05)
    model.fit(x, y, batch_size=100, epochs=15, verbose=0,
              callbacks=[EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    acc = (np.argmax(model.predict(x, verbose=0), 1) == y).mean()
    assert acc > 0.9
    np.testing.assert_allclose(np.asarray(tree.gamma), 2.4, rtol=1e-6)  # 1.0 + 0.1 * 14 in epoch 15
    assert tree.split_evaluations(x) == 2.0


@pytest.mark.slow
def test_growth_stops_when_one_split_makes_both_sides_pure(rng):
    keras.utils.set_random_seed(0)  # fit() shuffles batches
    x = rng.normal(size=(400, 2)).astype("float32")
    x = x[np.abs(x[:, 0]) > 0.5]  # a margin: one split can separate the classes
    y = (x[:, 0] > 0).astype("int32")
    tree = EndToEndTree(max_depth=4, num_classes=2, seed=0)
    model = model_for(tree, 2, lr=0.05)
    g = GreedyLevelGrowth(x, y, epochs_per_level=8, finetune_epochs=0)
    h = model.fit(x, y, batch_size=50, epochs=g.max_epochs(4), verbose=0,
                  callbacks=[g, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    # One round: the root stump separates the classes, both children are pure
    # and stay leaves, nothing is left to grow and fit() stops by itself.
    assert len(h.history["loss"]) == g.epochs_per_level
    assert int(np.asarray(tree.growth_phase)) == 3  # done
    np.testing.assert_array_equal(np.asarray(tree.node_state), topology.stump(1, 4))
    assert (np.argmax(model.predict(x, verbose=0), 1) == y).mean() == 1.0


@pytest.mark.slow
def test_growth_makes_pure_nodes_leaves(rng):
    keras.utils.set_random_seed(0)
    x = rng.normal(size=(300, 2)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")  # no margin: boundary samples make deeper nodes impure
    tree = EndToEndTree(max_depth=4, num_classes=2, seed=0)
    model = model_for(tree, 2, lr=0.05)
    g = GreedyLevelGrowth(x, y, epochs_per_level=8, finetune_epochs=0, max_attempts=3)
    h = model.fit(x, y, batch_size=50, epochs=g.max_epochs(4), verbose=0,
                  callbacks=[g, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    state = np.asarray(tree.node_state)[0]
    assert int(np.asarray(tree.growth_phase)) == 3  # done, before fit's epoch limit
    assert len(h.history["loss"]) < g.max_epochs(4)
    assert (state == topology.SPLIT).sum() >= 2
    node = np.asarray(tree.route(x))[:, 0]
    # Nodes only split impure data with enough samples: a pure node became a leaf.
    for split in topology.splits(state[None], 0):
        labels = y[reaches(node, split)]
        assert len(np.unique(labels)) == 2 and len(labels) >= g.min_samples_split, split
    # Every impure leaf has a reason: last level, too few samples, or its stump
    # failed max_attempts times.
    impure = 0
    for leaf in np.unique(node):
        labels = y[node == leaf]
        if len(np.unique(labels)) > 1:
            impure += 1
            assert leaf >= tree.num_internal or len(labels) < 2 or attempts_exhausted(tree, g, leaf), leaf
    assert impure >= 1  # (this seed; else the check above would be vacuous)
    assert (np.argmax(model.predict(x, verbose=0), 1) == y).mean() > 0.95


def reaches(node, position):
    """Samples (by the leaf they stop at) whose path passes through ``position``."""
    node = np.asarray(node, dtype=np.int64)
    depth = topology.position_depth(node)
    d = int(topology.position_depth(position))
    return (depth >= d) & (((node + 1) >> np.maximum(depth - d, 0)) - 1 == position)


def attempts_exhausted(tree, growth, leaf):
    """``leaf`` held a stump that failed ``growth.max_attempts`` times in a row.

    The layer's ``attempts`` counter is only written by GreedyLevelGrowth: check
    that it is consistent (a node whose attempts are used up is a leaf; a split
    never used them all) so this reason cannot excuse a leaf by accident.
    """
    attempts = np.asarray(tree.attempts)[0]
    state = np.asarray(tree.node_state)[0, : tree.num_internal]
    assert attempts.max() <= growth.max_attempts
    assert (state[attempts == growth.max_attempts] == topology.LEAF).all()
    return leaf < tree.num_internal and int(attempts[leaf]) == growth.max_attempts


@pytest.mark.slow
def test_finetuning_after_growth_trains_every_split_on_the_sparse_path():
    # Axis-aligned splits over 2 informative and 2 constant features: a stump
    # that draws a constant feature sends all its samples one way and fails, so
    # retries on several levels of one path add up (here 9 rounds; the old
    # max_epochs bound allowed max_depth + max_attempts = 8, fit() stopped while
    # the tree was still growing and the "finetuning" only trained stumps).
    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    x = np.zeros((240, 4), "float32")
    x[:, :2] = rng.normal(size=(240, 2))
    y = ((x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0)).astype("int32")
    tree = EndToEndTree(max_depth=3, num_classes=4, split_type="axis_aligned", seed=1)
    tree.DENSE_POSITIONS = 0  # exercise the sparse (present nodes only) path of deep trees
    assert not tree._dense_soft
    model = model_for(tree, 4, lr=0.05)
    g = GreedyLevelGrowth(x, y, epochs_per_level=1, finetune_epochs=0)
    h = model.fit(x, y, batch_size=80, epochs=g.max_epochs(3), verbose=0,
                  callbacks=[g, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    assert len(h.history["loss"]) > 3 + g.max_attempts
    assert int(np.asarray(tree.growth_phase)) == 3 and int(np.asarray(tree.growing)) == 0
    splits = np.asarray(tree.node_state)[0, : tree.num_internal] == topology.SPLIT
    assert splits.sum() >= 2
    loss = keras.losses.SparseCategoricalCrossentropy()
    soft_loss = lambda: float(loss(y, tree.posterior(x, routing="soft")))  # noqa: E731
    before_loss, before_bias = soft_loss(), np.asarray(tree.split_bias)[0].copy()
    before_kernel = np.asarray(tree.effective_kernel())[0].copy()
    model.compile(keras.optimizers.Adam(0.05), loss)
    model.fit(x, y, batch_size=80, epochs=4, verbose=0, callbacks=[EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    moved = (np.abs(np.asarray(tree.effective_kernel())[0] - before_kernel).max(-1) > 1e-3) | (
        np.abs(np.asarray(tree.split_bias)[0] - before_bias) > 1e-3)
    np.testing.assert_array_equal(moved, splits)  # every split trains, nothing else
    assert soft_loss() < before_loss - 0.05, (soft_loss(), before_loss)


@pytest.mark.slow
def test_growth_retries_a_failed_split_then_makes_a_leaf(rng):
    x = np.ones((40, 3), "float32")  # identical inputs, mixed labels: every split fails
    y = np.arange(40) % 2
    tree = EndToEndTree(max_depth=3, num_classes=2, seed=0)
    model = model_for(tree, 3)
    g = GreedyLevelGrowth(x, y, epochs_per_level=1, finetune_epochs=1, max_attempts=3)
    h = model.fit(x, y, batch_size=40, epochs=20, verbose=0, callbacks=[g])
    assert int(np.asarray(tree.attempts)[0, 0]) == 3
    assert topology.num_leaves(np.asarray(tree.node_state)).tolist() == [1]
    assert len(h.history["loss"]) == 3 + 1  # three attempts, one finetune epoch


@pytest.mark.slow
def test_best_first_growth_respects_max_leaves(rng):
    x, y = blobs(rng, 300)
    tree = EndToEndTree(max_depth=4, num_classes=4, seed=0)
    model = model_for(tree, 2, lr=0.05)
    g = GreedyLevelGrowth(x, y, epochs_per_level=4, finetune_epochs=0, max_leaves=3, best_first=True)
    model.fit(x, y, batch_size=100, epochs=g.max_epochs(4), verbose=0, callbacks=[g, EMLeafUpdate(x, y)])
    assert tree.num_leaves() == 3


@pytest.mark.slow
def test_best_first_commits_the_split_with_the_largest_information_gain(rng):
    # Left of x0 = 0 the label is decided by x1 (one bit of gain); right of it
    # labels are coin flips (near zero gain). With a budget of 3 leaves the
    # second split must go to the left child.
    x = rng.uniform(-1, 1, size=(600, 2)).astype("float32")
    y = np.where(x[:, 0] < 0, (x[:, 1] > 0).astype(int), 2 + rng.integers(0, 2, 600)).astype("int32")
    tree = EndToEndTree(max_depth=3, num_classes=4, seed=0)
    model = model_for(tree, 2, lr=0.05)
    g = GreedyLevelGrowth(x, y, epochs_per_level=8, finetune_epochs=0, max_leaves=3, best_first=True)
    model.fit(x, y, batch_size=100, epochs=g.max_epochs(3), verbose=0,
              callbacks=[g, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    state = np.asarray(tree.node_state)[0]
    w, b = np.asarray(tree.effective_kernel())[0, 0], np.asarray(tree.split_bias)[0, 0]
    informative_goes_right = float(w @ np.array([-0.5, 0.0]) + b) > 0  # where x0 < 0 is sent
    informative, noisy = (2, 1) if informative_goes_right else (1, 2)
    assert state[0] == topology.SPLIT and tree.num_leaves() == 3
    assert state[informative] == topology.SPLIT and state[noisy] == topology.LEAF, state[:7]


def test_forest_feature_subsets_and_patches(rng):
    forest = EndToEndForest(num_trees=4, max_depth=3, num_classes=3, features_per_split=2, seed=0)
    model_for(forest, 6)
    mask = np.asarray(forest.feature_mask)
    assert (mask.sum(-1) == 2).all()
    img = EndToEndForest(num_trees=2, max_depth=2, num_classes=3, patch_size=3, seed=0)
    keras.Sequential([keras.Input((8, 8)), img])
    m = np.asarray(img.feature_mask).reshape(2, 3, 8, 8)
    for patch in m.reshape(-1, 8, 8):
        rows, cols = np.nonzero(patch)
        assert patch.sum() == 9 and np.ptp(rows) == 2 and np.ptp(cols) == 2


@pytest.mark.slow
def test_regression_leaves_and_axis_aligned_splits(rng):
    x = rng.normal(size=(300, 3)).astype("float32")
    y = np.where(x[:, 1] > 0, 2.0, -1.0).astype("float32")[:, None]
    tree = EndToEndTree(max_depth=2, units=1, split_type="axis_aligned", seed=3)
    model = keras.Sequential([keras.Input((3,)), tree])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    assert (np.asarray(tree.feature_mask).sum(-1) == 1).all()
    model.fit(x, y, batch_size=50, epochs=20, verbose=0, callbacks=[SteepnessAnnealing(0.5)])
    assert model.predict(x, verbose=0).shape == (300, 1)
    assert float(np.mean((model.predict(x, verbose=0) - y) ** 2)) < np.var(y)


@pytest.mark.slow
def test_split_feature_extractor_is_trained(rng):
    x = rng.normal(size=(200, 6)).astype("float32")
    y = (x[:, 0] * x[:, 1] > 0).astype("int32")
    extractor = keras.Sequential([keras.layers.Dense(8, activation="relu")])
    tree = EndToEndTree(max_depth=2, num_classes=2, split_features=extractor, seed=0)
    model = model_for(tree, 6)
    before = np.asarray(extractor.weights[0]).copy()
    model.fit(x, y, batch_size=50, epochs=2, verbose=0, callbacks=[EMLeafUpdate(x, y)])
    assert tree.feature_dim == 8
    assert not np.allclose(before, np.asarray(extractor.weights[0]))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(max_depth=3), ValueError, "exactly one of num_classes"),
        (dict(max_depth=0, num_classes=2), ValueError, "max_depth"),
        (dict(max_depth=25, num_classes=2), ValueError, "max_depth"),
        (dict(max_depth=3, num_classes=2, steepness=-1.0), ValueError, "steepness"),
        (dict(max_depth=3, num_classes=2, steepness=float("nan")), ValueError, "steepness"),
        (dict(max_depth=3, num_classes=1), ValueError, "num_classes"),
        (dict(max_depth=3, num_classes=2, split_type="conic"), ValueError, "split_type"),
        (dict(max_depth=3, num_classes=2, inference_routing="maybe"), ValueError, "inference_routing"),
        (dict(max_depth=3, num_classes=2, split_features="cnn"), TypeError, "split_features"),
        (dict(max_depth=3, num_classes=2, split_screening=0.0), ValueError, "split_screening"),
        (dict(max_depth=3, num_classes=2, split_screening=1.5), ValueError, "split_screening"),
        (dict(max_depth=3, num_classes=2, split_screening=True), ValueError, "split_screening"),
        (dict(max_depth=3, num_classes=2, split_screening="half"), ValueError, "split_screening"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        EndToEndTree(**kwargs)


def test_bad_data_gives_clear_errors(rng):
    x, y = blobs(rng, 50)
    tree = EndToEndTree(max_depth=2, num_classes=4)
    model = model_for(tree, 2)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[EMLeafUpdate(x, y + 3)])
    with pytest.raises(ValueError, match="50 samples but y has 49"):
        EMLeafUpdate(x, y[:-1])
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(Exception, match="NaN or Inf"):
        model.predict(bad, verbose=0)
    with pytest.raises(ValueError):
        model.predict(np.zeros((3, 5), "float32"), verbose=0)
    with pytest.raises(ValueError, match="would need about"):
        keras.Sequential([keras.Input((4096,)), EndToEndTree(max_depth=24, num_classes=2)])
    with pytest.raises(ValueError, match="features_per_split"):
        keras.Sequential([keras.Input((3,)), EndToEndForest(2, 2, num_classes=2, features_per_split=5)])
    with pytest.raises(ValueError, match="increment"):
        SteepnessAnnealing(-0.1)


def dense_bank(dim, max_depth, num_trees=1):
    return per_split_features((dim,), max_depth, num_trees, split_model=lambda i: keras.layers.Dense(1))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_split_features_give_every_split_its_own_model(rng, tmp_path, seed):
    keras.utils.set_random_seed(seed)
    x = rng.normal(size=(300, 6)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + 2 * (x[:, 3] > 0)).astype("int32")
    bank = dense_bank(6, max_depth=2)
    tree = EndToEndTree(max_depth=2, num_classes=4, split_type="per_split", split_features=bank, seed=0)
    model = model_for(tree, 6, lr=0.05)
    np.testing.assert_array_equal(np.asarray(tree.feature_mask)[0], np.eye(3, dtype="float32"))
    before = [np.asarray(w).copy() for w in bank.weights]
    growth = GreedyLevelGrowth(x, y, epochs_per_level=10)
    model.fit(x, y, batch_size=50, epochs=growth.max_epochs(2), verbose=0,
              callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(0.5)])
    # Growth redraws split directions but never the per-split wiring.
    np.testing.assert_array_equal(np.asarray(tree.feature_mask)[0], np.eye(3, dtype="float32"))
    assert tree.num_splits() == 3
    changed = [not np.allclose(b, np.asarray(w)) for b, w in zip(before, bank.weights)]
    assert all(changed)  # every split's own model was trained
    assert float(np.mean(model.predict(x, verbose=0).argmax(-1) == y)) > 0.85  # 4 classes
    path = str(tmp_path / "per_split.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_per_split_forest_reads_its_own_block(rng):
    forest = EndToEndForest(num_trees=2, max_depth=2, num_classes=2, split_type="per_split",
                            split_features=dense_bank(4, max_depth=2, num_trees=2), seed=0)
    model_for(forest, 4)
    mask = np.asarray(forest.feature_mask)
    np.testing.assert_array_equal(mask.reshape(6, 6), np.eye(6, dtype="float32"))


def test_per_split_errors(rng):
    with pytest.raises(ValueError, match="per_split.*split_features"):
        EndToEndTree(max_depth=2, num_classes=2, split_type="per_split")
    tree = EndToEndTree(max_depth=3, num_classes=2, split_type="per_split", split_features=dense_bank(4, 2))
    with pytest.raises(ValueError, match="7 outputs .one per split., got 3"):
        model_for(tree, 4)
    with pytest.raises(ValueError, match=r"split_model\(0\) must output shape \(batch, 1\)"):
        per_split_features((4,), 1, split_model=lambda i: keras.layers.Dense(2))
    with pytest.raises(ValueError, match="image inputs"):
        split_cnn((16,))


def test_split_cnn_is_the_papers_architecture():
    cnn = split_cnn((28, 28))
    assert cnn.output_shape == (None, 1)
    dense = [layer for layer in cnn.layers if isinstance(layer, keras.layers.Dense)]
    assert [tuple(d.kernel.shape) for d in dense] == [(96, 50), (50, 1)]  # "96 x 50", "50 x 1"
    assert split_cnn((8, 8), kernel_size=3, padding="same").output_shape == (None, 1)


def _brute_force_gains(x, y, w, num_classes):
    """Best-threshold gain per feature by trying every cut between distinct values."""
    def impurity(idx):
        if num_classes is not None:
            counts = np.bincount(y[idx], weights=w[idx], minlength=num_classes)
            p = counts / counts.sum()
            return -(counts * np.log(np.where(p > 0, p, 1.0))).sum()
        mean = np.average(y[idx], weights=w[idx])
        return (w[idx] * (y[idx] - mean) ** 2).sum()
    every = np.arange(len(x))
    gains = []
    for j in range(x.shape[1]):
        values = np.unique(x[:, j])
        cuts = [impurity(every) - impurity(np.flatnonzero(x[:, j] <= v)) - impurity(np.flatnonzero(x[:, j] > v))
                for v in values[:-1]]
        gains.append(max(cuts, default=0.0))
    return np.asarray(gains)


@pytest.mark.parametrize("num_classes", [3, None])
def test_screening_gains_equal_the_exhaustive_threshold_search(rng, num_classes):
    from keras_trees.layers._screening import best_split_gains

    x = np.round(rng.normal(size=(60, 4)), 1)  # ties inside features
    x[:, 3] = 1.0  # constant: no cut, gain 0
    y = rng.integers(0, 3, 60) if num_classes else x[:, 0] + rng.normal(size=60)
    w = rng.uniform(0.5, 2.0, 60)
    expected = _brute_force_gains(x, y, w, num_classes) / w.sum()  # per unit of weight
    np.testing.assert_allclose(best_split_gains(x, y, w, num_classes), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_split_screening_masks_the_features_that_do_not_separate_a_node(rng):
    keras.utils.set_random_seed(0)
    x = rng.normal(size=(400, 6)).astype("float32")
    y = (x[:, 2] > 0).astype("int32")  # the signal is in one column
    tree = EndToEndTree(max_depth=2, num_classes=2, seed=0, split_screening=0.5)
    model = model_for(tree, 6, lr=0.05)
    g = GreedyLevelGrowth(x, y, epochs_per_level=4, finetune_epochs=0)
    model.fit(x, y, batch_size=100, epochs=g.max_epochs(2), verbose=0,
              callbacks=[g, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    mask = keras.ops.convert_to_numpy(tree.feature_mask)[0]
    np.testing.assert_array_equal(mask[0], [0, 0, 1, 0, 0, 0])  # the root reads column 2 alone
    kernel = keras.ops.convert_to_numpy(tree.effective_kernel())[0, 0]
    assert np.count_nonzero(kernel) == 1 and (np.argmax(model.predict(x, verbose=0), 1) == y).mean() > 0.97
    assert EndToEndTree.from_config(tree.get_config()).split_screening == 0.5
    # Without screening every split reads every column (the paper's oblique split).
    plain = EndToEndTree(max_depth=2, num_classes=2, seed=0)
    model_for(plain, 6)(x[:2])
    assert plain.split_screening is None and keras.ops.convert_to_numpy(plain.feature_mask).min() == 1
