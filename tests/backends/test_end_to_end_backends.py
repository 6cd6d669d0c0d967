"""EndToEndTree / EndToEndForest and their callbacks on every Keras backend.

Gradient leaves (plain fit, scikit-learn), EM and growth, save/load, seeds,
sample/class weights, nested models, mixed precision and two-replica training.
"""

import keras
import numpy as np
import pytest

from keras_trees import topology
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
from keras_trees.callbacks._common import layer_input_fn
from keras_trees.layers import EndToEndForest, EndToEndTree
from tests.backends.conftest import BACKEND, run_replicated

LOG4 = float(np.log(4))


@pytest.fixture(scope="module", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """On JAX, a persistent compilation cache for this module: its many small,
    identical models then compile once (test speed only; restored afterwards)."""
    if BACKEND != "jax":
        yield
        return
    import jax

    try:
        from jax._src import compilation_cache
    except ImportError:  # private module moved: run uncached
        yield
        return
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    before = {name: getattr(jax.config, name) for name in names}
    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


def blobs(n=240, seed=0, noise_features=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2 + noise_features)).astype("float32")
    y = ((x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0.3)).astype("int32")
    return x, y


def compiled(model, lr=0.05):
    model.compile(keras.optimizers.Adam(lr), keras.losses.SparseCategoricalCrossentropy())
    return model


def sequential(layer, dim, lr=0.05):
    return compiled(keras.Sequential([keras.Input((dim,)), layer]), lr)


def predict(model, x, dtype="float32"):
    """Inference output(s) as NumPy (``dtype=None``: as computed). An eager call (no
    predict function to trace), except on JAX, where op-by-op execution compiles
    every operation for every new shape and one compiled predict function is
    much cheaper."""
    if BACKEND == "jax":
        out = model.predict(x, batch_size=len(x), verbose=0)
    else:
        out = keras.tree.map_structure(keras.ops.convert_to_numpy, model(x, training=False))
    return keras.tree.map_structure(lambda v: np.asarray(v, dtype), out)


def accuracy(model, x, y):
    return float(np.mean(np.argmax(predict(model, x), -1) == y))


def numpy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


# ---------------------------------------------------------------- leaf learning
@pytest.mark.slow
def test_leaves_learn_by_gradient_in_plain_fit_and_by_em_with_the_callback(tmp_path):
    x, y = blobs()
    tree = EndToEndTree(max_depth=2, num_classes=4, seed=0)
    model = sequential(tree, 2)
    history = model.fit(x, y, batch_size=60, epochs=12, verbose=0)
    assert history.history["loss"][-1] < 0.4 * LOG4, history.history["loss"]
    assert accuracy(model, x, y) > 0.9
    assert int(numpy(tree.leaf_mode)) == 1  # the trainable logits are in use
    np.testing.assert_allclose(numpy(tree.leaf_values).sum(-1), 1.0, rtol=1e-5)
    path = str(tmp_path / "gradient.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(predict(loaded, x), predict(model, x))
    np.testing.assert_array_equal(numpy(loaded.layers[-1].leaf_values), numpy(tree.leaf_values))
    assert loaded.layers[-1].get_config()["leaf_learning"] == "auto"

    # The same model with EMLeafUpdate: the EM table takes over the learnt
    # leaves and the model reads it, exactly, during that fit ...
    gradient_leaves = numpy(tree.leaf_values)
    seen = []

    def on_train_begin(logs):
        seen.append(int(numpy(tree.leaf_mode)))
        np.testing.assert_allclose(numpy(tree.leaf_table), gradient_leaves, rtol=1e-6)

    def on_epoch_end(epoch, logs):
        seen.append(int(numpy(tree.leaf_mode)))
        np.testing.assert_array_equal(numpy(tree.leaf_values), numpy(tree.leaf_table))

    watch = keras.callbacks.LambdaCallback(on_train_begin=on_train_begin, on_epoch_end=on_epoch_end)
    model.fit(x, y, batch_size=60, epochs=3, verbose=0, callbacks=[EMLeafUpdate(x, y), watch])
    assert seen == [0, 0, 0, 0]
    # ... and hands the final EM leaves to the logits when it ends.
    assert int(numpy(tree.leaf_mode)) == 1
    em = numpy(tree.leaf_table)
    np.testing.assert_allclose(numpy(tree.leaf_values), em, rtol=1e-5, atol=1e-7)
    em_accuracy = accuracy(model, x, y)
    assert em_accuracy > 0.9
    # A later plain fit goes on from them, by gradient.
    model.fit(x, y, batch_size=60, epochs=1, verbose=0)
    np.testing.assert_array_equal(numpy(tree.leaf_table), em)
    assert not np.allclose(numpy(tree.leaf_logits), np.log(np.maximum(em, 1e-30)), atol=1e-2)  # trained
    assert accuracy(model, x, y) >= em_accuracy - 0.05

    # leaf_learning="em" keeps the paper's setting: only EMLeafUpdate changes
    # the leaves (the optimizer has no leaf variable to train).
    em_only = EndToEndTree(max_depth=2, num_classes=4, seed=0, leaf_learning="em")
    model = sequential(em_only, 2)
    assert int(numpy(em_only.leaf_mode)) == 0
    assert [v.name for v in model.trainable_variables] == ["split_kernel", "split_bias"]
    np.testing.assert_allclose(predict(model, x), 0.25, rtol=1e-6)

    gradient_only = EndToEndTree(max_depth=2, num_classes=4, seed=0, leaf_learning="gradient")
    model = sequential(gradient_only, 2)
    with pytest.raises(ValueError, match="leaf_learning='gradient'"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[EMLeafUpdate(x, y)])
    with pytest.raises(ValueError, match="leaf_learning must be one of"):
        EndToEndTree(max_depth=2, num_classes=4, leaf_learning="closed_form")
    with pytest.raises(ValueError, match="needs a classification layer"):
        EndToEndTree(max_depth=2, units=1, leaf_learning="em")


@pytest.mark.slow
def test_classifier_inside_sklearn_grid_search():
    pytest.importorskip("sklearn")
    from sklearn.model_selection import GridSearchCV, ShuffleSplit

    keras.utils.set_random_seed(0)
    x, _ = blobs(200)
    y = np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.6, 0.6]).astype("int32")  # 3 ordered classes

    def build(X, y, max_depth=1):
        tree = EndToEndTree(max_depth=max_depth, num_classes=3, seed=0)
        model = keras.Sequential([keras.Input((X.shape[1],)), tree])
        model.compile(keras.optimizers.Adam(0.1), "categorical_crossentropy")  # the wrapper one-hot encodes
        return model

    clf = keras.wrappers.SKLearnClassifier(model=build)
    split = ShuffleSplit(n_splits=1, test_size=0.5, random_state=0)
    search = GridSearchCV(clf, {"model_kwargs": [{"max_depth": 1}, {"max_depth": 2}]}, cv=split, refit=False)
    # (fit arguments go to search.fit: Keras 3.15's SKLearnClassifier.__sklearn_clone__
    # drops fit_kwargs, so GridSearchCV's clones would train with fit's defaults)
    search.fit(x, y, epochs=10, batch_size=10, verbose=0)
    scores = search.cv_results_["mean_test_score"]
    # Predicting one class would score at most 0.41 here; depth 1 has 2 leaves for 3 classes.
    assert scores[1] > 0.85 and 0.5 < scores[0] < scores[1], scores
    assert search.best_params_ == {"model_kwargs": {"max_depth": 2}}


# ------------------------------------------------ growth, progress, save, seeds
@pytest.mark.slow
def test_growth_logs_progress_round_trips_and_follows_set_random_seed(tmp_path, capsys):
    x, y = blobs(200, noise_features=2)

    def run(seed, fit=True):
        keras.utils.set_random_seed(seed)
        inputs = keras.Input((4,))
        # seed=None: the random splits and feature subsets follow set_random_seed.
        tree = EndToEndTree(max_depth=3, num_classes=4, name="tree")
        forest = EndToEndForest(2, max_depth=2, num_classes=4, features_per_split=2,
                                leaf_learning="gradient", name="forest")
        model = compiled(keras.Model(inputs, keras.layers.Average()([tree(inputs), forest(inputs)])))
        initial = [numpy(v) for v in model.weights]
        history = None
        if fit:  # growth redraws splits and feature subsets for every new stump
            growth = GreedyLevelGrowth(x, y, epochs_per_level=3, finetune_epochs=2, verbose=1)
            csv = keras.callbacks.CSVLogger(str(tmp_path / f"log{seed}.csv"))
            history = model.fit(x, y, batch_size=50, epochs=growth.max_epochs(3), verbose=0,
                                callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(0.1), csv])
            assert len(history.history["loss"]) < growth.max_epochs(3)  # stopped by the callback
        return model, history, initial

    model, history, initial = run(7)
    tree, forest = model.get_layer("tree"), model.get_layer("forest")
    epochs = len(history.history["loss"])
    for layer in (tree, forest):
        phases = history.history[f"{layer.name}/growth_phase"]
        leaves = history.history[f"{layer.name}/num_leaves"]
        assert len(phases) == len(leaves) == epochs
        assert phases[0] == 1 and phases[-1] == 3 and 2 in phases
        assert leaves == sorted(leaves) and leaves[-1] == float(np.sum(layer.num_leaves()))
    assert tree.num_leaves() >= 4 and accuracy(model, x, y) > 0.8
    header = (tmp_path / "log7.csv").read_text().splitlines()[0].split(",")
    assert {"tree/growth_phase", "tree/num_leaves", "forest/num_leaves"} <= set(header), header
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("GreedyLevelGrowth")]
    assert any("tree, depth 1," in line and "loss" in line for line in lines), lines
    assert any("finetuning done" in line for line in lines), lines

    path = str(tmp_path / "grown.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(predict(loaded, x), predict(model, x))
    for name in ("tree", "forest"):
        np.testing.assert_array_equal(numpy(loaded.get_layer(name).node_state),
                                      numpy(model.get_layer(name).node_state))
    np.testing.assert_allclose(numpy(loaded.get_layer("tree").posterior(x)), numpy(tree.posterior(x)), rtol=1e-6)

    # The same seed again: bit-identical initial and trained weights and predictions.
    again, _, again_initial = run(7)
    for a, b in zip(initial + [numpy(v) for v in model.weights],
                    again_initial + [numpy(v) for v in again.weights]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(predict(again, x), predict(model, x))
    _, _, other = run(8, fit=False)
    assert not all(np.array_equal(a, b) for a, b in zip(initial, other))  # the seed matters


@pytest.mark.slow
def test_split_screening_grows_sparse_splits_that_round_trip(tmp_path):
    """split_screening: the root stump reads only the column that separates
    its rows (on every backend); the masked tree saves and loads exactly."""
    x, y = blobs(240, noise_features=3)
    y = (x[:, 0] > 0).astype("int32")  # one informative column of five
    keras.utils.set_random_seed(0)
    tree = EndToEndTree(max_depth=2, num_classes=2, seed=0, split_screening=0.5)
    model = compiled(keras.Sequential([keras.Input((5,)), tree]))
    growth = GreedyLevelGrowth(x, y, epochs_per_level=3, finetune_epochs=0)
    model.fit(x, y, batch_size=60, epochs=growth.max_epochs(2), verbose=0,
              callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    np.testing.assert_array_equal(numpy(tree.feature_mask)[0, 0], [1, 0, 0, 0, 0])
    assert np.count_nonzero(numpy(tree.effective_kernel())[0, 0]) == 1 and accuracy(model, x, y) > 0.95
    path = str(tmp_path / "screened.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.layers[-1].split_screening == 0.5
    np.testing.assert_array_equal(numpy(loaded.layers[-1].feature_mask), numpy(tree.feature_mask))
    np.testing.assert_array_equal(predict(loaded, x), predict(model, x))


def test_classifiers_saved_before_the_leaf_logits_load():
    # A classifier saved before the logits existed: 13 variables, EM leaves.
    old = EndToEndTree(max_depth=2, num_classes=3, seed=0)
    keras.Sequential([keras.Input((2,)), old])
    leaves = np.random.default_rng(0).dirichlet(np.ones(3), size=(1, 7)).astype("float32")
    old_vars = [old.split_kernel, old.split_bias, old.feature_mask, old.gamma, old.node_state, old.candidate,
                old.node_epochs, old.attempts, old.candidate_gain, old.growing, old.growth_phase,
                old.phase_epoch]
    store = {str(i): numpy(v) for i, v in enumerate(old_vars)} | {"12": leaves}
    new = EndToEndTree(max_depth=2, num_classes=3, seed=5)
    keras.Sequential([keras.Input((2,)), new])
    assert len(new.weights) == 15
    new.load_own_variables(store)
    np.testing.assert_allclose(numpy(new.leaf_values), leaves, rtol=1e-5)
    np.testing.assert_array_equal(numpy(new.split_kernel), numpy(old.split_kernel))
    regression = EndToEndTree(max_depth=2, units=1)
    keras.Sequential([keras.Input((2,)), regression])
    assert len(regression.weights) == 13  # unchanged: no leaf logits or leaf mode


# -------------------------------------------------------------------- weights
def _tree_model(seed=3, max_depth=2):
    tree = EndToEndTree(max_depth=max_depth, num_classes=4, seed=seed)
    model = sequential(tree, 2)
    rng = np.random.default_rng(seed)
    tree.set_leaf_values(rng.dirichlet(np.ones(4), size=(1, 2 ** (max_depth + 1) - 1)))
    return model, tree


def _em(x, y, **weights):
    model, tree = _tree_model()
    cb = EMLeafUpdate(x, y, **weights)
    cb.set_model(model)
    cb.update()
    return numpy(tree.leaf_values)


@pytest.mark.slow_on("jax")
def test_sample_and_class_weights_reach_em_leaves():
    x, y = blobs(60)
    w = np.random.default_rng(1).integers(0, 4, size=60)
    duplicated = _em(np.repeat(x, w, axis=0), np.repeat(y, w))
    weighted = _em(x, y, sample_weight=w)
    np.testing.assert_allclose(weighted, duplicated, rtol=1e-4, atol=1e-6)
    assert not np.allclose(weighted, _em(x, y), atol=1e-3)
    class_weight = {0: 2.0, 1: 0.5, 3: 3.0}  # class 2 weighs 1, as in Keras
    by_class = _em(x, y, class_weight=class_weight)
    as_samples = _em(x, y, sample_weight=np.array([class_weight.get(int(c), 1.0) for c in y]))
    np.testing.assert_allclose(by_class, as_samples, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="not both"):
        EMLeafUpdate(x, y, sample_weight=w, class_weight=class_weight)
    with pytest.raises(ValueError, match="shape"):
        EMLeafUpdate(x, y, sample_weight=w[:-1])
    assert EMLeafUpdate(x, y, class_weight=class_weight).get_config()["class_weight"] == {"0": 2.0, "1": 0.5, "3": 3.0}


@pytest.mark.slow
def test_sample_and_class_weights_reach_growth_statistics():
    x, y = blobs(80)
    w = np.random.default_rng(2).integers(0, 4, size=80)

    def grow_one_level(x, y, **weights):
        model, tree = _tree_model(seed=4, max_depth=3)
        growth = GreedyLevelGrowth(x, y, epochs_per_level=1, max_leaves=3, best_first=True, **weights)
        em = EMLeafUpdate(x, y, **weights)
        for cb in (growth, em):
            cb.set_model(model)
        growth.on_train_begin()  # root stump: weighted root distribution and data center
        root = (numpy(tree.leaf_values).copy(), numpy(tree.split_bias).copy())
        em.update()  # the stump's leaves
        growth.on_epoch_end(0, {})  # end of level: weighted counts, gains, commits, new stumps
        state = [numpy(v) for v in (tree.node_state, tree.candidate, tree.candidate_gain, tree.split_bias)]
        return root, state + [numpy(tree.leaf_values)]

    dup_root, dup = grow_one_level(np.repeat(x, w, axis=0), np.repeat(y, w))
    root, weighted = grow_one_level(x, y, sample_weight=w)
    for a, b in zip(root + tuple(weighted), dup_root + tuple(dup)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    plain_root, _ = grow_one_level(x, y)
    assert not np.allclose(plain_root[0][0, 0], root[0][0, 0], atol=1e-3)
    assert weighted[0][0, 0] == topology.SPLIT and weighted[1].sum() == 2  # root committed, two new stumps
    class_weight = {0: 3.0, 2: 0.0}
    by_class = grow_one_level(x, y, class_weight=class_weight)
    as_samples = grow_one_level(x, y, sample_weight=np.array([class_weight.get(int(c), 1.0) for c in y]))
    for a, b in zip(by_class[0] + tuple(by_class[1]), as_samples[0] + tuple(as_samples[1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert by_class[0][0][0, 0, 2] < 1e-3  # class 2 has no weight at the root

    # Regression: weighted target sums, variances and centers.
    target = (x[:, :1] * 2.0 + (x[:, 1:] > 0)).astype("float32")

    def grow_regression(x, target, **weights):
        tree = EndToEndTree(max_depth=2, units=1, seed=4)
        model = keras.Sequential([keras.Input((2,)), tree])
        growth = GreedyLevelGrowth(x, target, epochs_per_level=1, **weights)
        growth.set_model(model)
        growth.on_train_begin()
        growth.on_epoch_end(0, {})
        return [numpy(v) for v in (tree.node_state, tree.candidate, tree.split_bias, tree.leaf_values)]

    for a, b in zip(grow_regression(x, target, sample_weight=w),
                    grow_regression(np.repeat(x, w, axis=0), np.repeat(target, w, axis=0))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="class_weight needs a classification layer"):
        grow_regression(x, target, class_weight={0: 1.0})


# -------------------------------------------------------------------- nesting
def _dense():
    return keras.layers.Dense(3, kernel_initializer="identity")


def _nested_graphs(trees):
    """Trees in a Sequential inside a Sequential, and in a Functional sub-model.
    Returns the model and, per tree, the Dense layers on its input path."""
    outer, inner = _dense(), _dense()
    nested_sequential = keras.Sequential([keras.Input((3,)), outer, keras.Sequential([inner, trees[0]])])
    before, within = _dense(), _dense()
    i = keras.Input((3,))
    sub = keras.Model(i, trees[1](within(i)))
    j = keras.Input((3,))
    model = keras.Model(j, keras.layers.Average()([nested_sequential(j), sub(before(j))]))
    return model, [[outer, inner], [before, within]]


class Subclassed(keras.Model):
    """No symbolic graph; on TensorFlow not even built before the first step."""

    def __init__(self, trees, **kwargs):
        super().__init__(**kwargs)
        self.dense = _dense()
        self.tree = trees[0]

    def call(self, x, training=None):
        return self.tree(self.dense(x))


def _subclassed(trees):
    model = Subclassed(trees)
    return model, [[model.dense]]


@pytest.mark.slow
@pytest.mark.parametrize("build, num_trees", [(_nested_graphs, 2), (_subclassed, 1)])
def test_callbacks_reach_trees_in_nested_models(build, num_trees):
    x, y = blobs(160, noise_features=1)
    trees = [EndToEndTree(max_depth=2, num_classes=4, seed=i) for i in range(num_trees)]
    model, paths = build(trees)
    compiled(model)
    growth = GreedyLevelGrowth(x, y, epochs_per_level=2, finetune_epochs=1)
    history = model.fit(x, y, batch_size=40, epochs=growth.max_epochs(2), verbose=0,
                        callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(0.5)])
    assert accuracy(model, x, y) > 0.6
    prefixes = [""] if num_trees == 1 else [f"{tree.name}/" for tree in trees]
    for prefix in prefixes:
        assert history.history[prefix + "growth_phase"][-1] == 3.0
        assert history.history[prefix + "num_leaves"][-1] >= 3.0
    for tree, path in zip(trees, paths):
        assert int(numpy(tree.growth_phase)) == 3 and np.atleast_1d(tree.num_leaves())[0] >= 3
        assert numpy(tree.gamma).max() > 1.0  # annealed
        assert numpy(tree.leaf_values).max() > 0.5  # EM leaves (uniform: 0.25)
        expected = x  # the tree's inputs, computed by the Dense layers on its path
        for layer in path:
            expected = numpy(layer(expected))
        np.testing.assert_allclose(numpy(layer_input_fn(model, tree)(x)), expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ mixed precision
def _mixed_run(policy):
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        x, y = blobs()
        inputs = keras.Input((2,))
        h = keras.layers.Dense(4)(inputs)  # compute-dtype features into the trees
        tree = EndToEndTree(max_depth=2, num_classes=4, seed=0)  # EM leaves
        forest = EndToEndForest(2, max_depth=2, num_classes=4, seed=1)  # gradient leaves
        outputs = [tree(h), forest(h)]
        model = compiled(keras.Model(inputs, keras.layers.Average()(outputs)))
        growth = GreedyLevelGrowth(x, y, epochs_per_level=3, finetune_epochs=1)
        history = model.fit(x, y, batch_size=60, epochs=growth.max_epochs(2), verbose=0,
                            callbacks=[growth, EMLeafUpdate(x, y, layers=tree.name), SteepnessAnnealing(0.1)])
        probe = keras.Model(inputs, [model.output] + outputs)
        predictions = predict(probe, x, dtype=None)
        accuracies = [float(np.mean(np.argmax(np.asarray(p, "float32"), -1) == y)) for p in predictions]
        dtype = str(predictions[1].dtype)  # what the tree layer returns
        phases = [int(numpy(layer.growth_phase)) for layer in (tree, forest)]
        return history.history["loss"], accuracies, dtype, phases
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


@pytest.fixture(scope="module")
def float32_run():
    return _mixed_run("float32")


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_like_float32(policy, float32_run):
    loss, accuracies, dtype, phases = _mixed_run(policy)
    assert keras.mixed_precision.dtype_policy().name == "float32"
    assert np.all(np.isfinite(loss)), loss
    assert phases == [3, 3] and float32_run[3] == [3, 3]  # both grown and finetuned
    assert dtype == policy.split("_")[1] and float32_run[2] == "float32"  # outputs in the compute dtype
    for acc, reference in zip(accuracies, float32_run[1]):  # model, tree (EM), forest (gradient)
        assert acc >= reference - 0.05 and acc > 0.7, (accuracies, float32_run[1])


# ------------------------------------------------------------------- replicas
@pytest.mark.slow
def test_em_gradient_leaves_and_growth_train_on_two_replicas(tmp_path):
    # The tree learns its leaves by EM, the forest by gradient (leaf_learning
    # "auto" without EM for it); both grow.
    out = run_replicated(
        """
        import time
        import numpy as np, keras
        from keras_trees.layers import EndToEndForest, EndToEndTree
        from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
        rng = np.random.default_rng(0)
        x = rng.normal(size=(160, 2)).astype("float32")
        y = ((x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0.3)).astype("int32")

        def train():
            keras.utils.set_random_seed(0)
            inputs = keras.Input((2,))
            tree = EndToEndTree(max_depth=2, num_classes=4, seed=0, name="tree")
            forest = EndToEndForest(2, max_depth=2, num_classes=4, seed=1, name="forest")
            outputs = [tree(inputs), forest(inputs)]
            model = keras.Model(inputs, keras.layers.Average()(outputs))
            model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
            growth = GreedyLevelGrowth(x, y, epochs_per_level=2, finetune_epochs=1)
            model.fit(x, y, batch_size=80, epochs=growth.max_epochs(2), verbose=0,
                      callbacks=[growth, EMLeafUpdate(x, y, layers="tree"), SteepnessAnnealing(0.1)])
            phases = [int(keras.ops.convert_to_numpy(layer.growth_phase)) for layer in (tree, forest)]
            probe = keras.Model(inputs, [model.output] + outputs)  # model, tree, forest
            accuracies = [float(np.mean(np.argmax(p, -1) == y)) for p in probe.predict(x, verbose=0)]
            return accuracies, tree.num_leaves(), phases

        start = time.time()
        single = train()
        middle = time.time()
        with replicated():
            double = train()
        print("RESULT", single, double, "seconds", round(middle - start, 1), round(time.time() - middle, 1))
        assert double[2] == [3, 3] and double[1] >= 3, double
        for a, b in zip(single[0], double[0]):  # model, tree (EM), forest (gradient leaves)
            assert b >= a - 0.05 and b > 0.7, (single, double)
        """,
        tmp_path,
    )
    assert "RESULT" in out, out


# ---------------------------------------------------------------- pruned routing
@pytest.mark.slow
def test_pruned_soft_routing_matches_the_numpy_oracle_and_trains():
    from tests.ops.pruned_oracle import pruned_outputs
    from tests.test_topology import random_tree

    rng = np.random.default_rng(0)
    x, y = blobs(120)
    forest = EndToEndForest(num_trees=3, max_depth=3, num_classes=4, prune_threshold=0.05, seed=0)
    model = sequential(forest, 2)
    forest.node_state.assign(random_tree(rng, 3, num_trees=3))
    forest.gamma.assign(rng.uniform(0.5, 4.0, size=(3, 7)).astype("float32"))
    forest.set_leaf_values(rng.dirichlet(np.ones(4), size=(3, 15)))
    is_split = numpy(forest.node_state)[:, :7] == topology.SPLIT
    expected, _, _, dropped = pruned_outputs(x, numpy(forest.effective_kernel()), numpy(forest.split_bias),
                                             numpy(forest.gamma), is_split, forest.leaves_numpy(), 0.05)
    assert dropped.max() > 0  # the threshold prunes here
    np.testing.assert_allclose(numpy(forest.posterior(x)), expected.mean(1), rtol=2e-5, atol=2e-6)
    model.fit(x, y, batch_size=60, epochs=2, verbose=0, callbacks=[EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    assert np.isfinite(numpy(forest.split_kernel)).all() and accuracy(model, x, y) > 0.5
