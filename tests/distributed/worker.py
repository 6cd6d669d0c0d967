"""One worker of the multi-worker test (tests/distributed/test_multi_worker.py).

    python -m tests.distributed.worker --out DIR [--die-at-epoch K] [--growth]

With ``TF_CONFIG`` set it runs as one worker of a
``tf.distribute.MultiWorkerMirroredStrategy`` cluster; without it, as the
single-process reference on all the data. In order:

1. ``streaming`` checks: ``workers()``, the worker's share of arrays, of a
   ``tf.data.Dataset`` (auto-sharded and with sharding ``OFF``), of a list of
   batches and of a function returning batches, and ``all_reduce_sum`` of
   different per-worker arrays (written to ``streaming_<worker>.json``);
2. a ``TreeEnsembleLayer`` model trained by ``fit`` on a ``tf.data`` pipeline
   (the same global dataset on every worker, sharded by ``fit``) with
   ``BackupAndRestore``; with ``--die-at-epoch K`` the last worker exits
   (``os._exit(DIED)``) when epoch ``K`` begins, unless the run resumed from a
   backup (``tel_<worker>.npz``: predictions and weights);
3. with ``--growth``, an ``EndToEndTree`` grown by ``GreedyLevelGrowth`` with
   ``EMLeafUpdate`` leaves, both reading the same sharded dataset as ``fit``
   (``growth_<worker>.npz``: node_state, leaves, predictions), then a convex
   polytope tree's ``fit_greedy`` and a non-greedy tree's ``refit_leaves`` on
   that dataset (``statistics_<worker>.npz``).

Every process uses one CPU thread (TensorFlow intra- and inter-op threads 1).
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

from keras_trees import streaming  # noqa: E402
from keras_trees.distribute import multi_worker_strategy  # noqa: E402

DIED = 17  # exit status of the worker killed on purpose
ROWS, FEATURES, CLASSES = 1024, 6, 3
GLOBAL_BATCH = 64
TEL_EPOCHS = 6


def data():
    """The global training set (already shuffled: the pipelines do not shuffle,
    so every worker and the reference see the same batches in every epoch)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    score = np.stack([x[:, 0] + x[:, 1] * x[:, 2], np.sin(2 * x[:, 3]) - x[:, 4], 0.5 * x[:, 5] ** 2], axis=1)
    y = np.argmax(score + 0.3 * rng.normal(size=score.shape), axis=1).astype("int32")
    x_test = rng.normal(size=(200, FEATURES)).astype("float32")
    return x, y, x_test


def dataset(x, y):
    # fit shards it by data (AUTO falls back to DATA for in-memory sources):
    # each global batch of 64 is split into one half per worker.
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)


def strategy():
    if "TF_CONFIG" in os.environ:
        return multi_worker_strategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING
            )
        )
    return tf.distribute.get_strategy()


def seen_rows(batches, n):
    """How many times this worker read each row id (column 0 of x holds the id)."""
    counts = np.zeros(n)
    for x, y, _ in batches:
        ids = np.asarray(x)[:, 0].astype(int)
        assert np.array_equal(ids, np.asarray(y)), "x and y of a batch come from different rows"
        np.add.at(counts, ids, 1)
    return counts


def streaming_checks(model, num_workers, index, out):
    n = 23
    ids = np.arange(n)
    x = np.stack([ids, -ids], axis=1).astype("float64")
    y = ids.copy()
    result = {"workers_model": list(streaming.workers(model))}
    with model.distribute_strategy.scope():
        result["workers_scope"] = list(streaming.workers())
    sources = {
        "arrays": streaming.stream(x, y, batch_size=4, model=model),
        "dataset": streaming.stream(tf.data.Dataset.from_tensor_slices((x, y)).batch(4), model=model),
        "list": streaming.stream([(x[i:i + 4], y[i:i + 4]) for i in range(0, n, 4)], model=model),
        "callable": streaming.stream(lambda: ((x[i:i + 5], y[i:i + 5]) for i in range(0, n, 5)), model=model),
    }
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    own = tf.data.Dataset.from_tensor_slices((x, y)).shard(num_workers, index).batch(4).with_options(options)
    sources["dataset_shard_off"] = streaming.stream(own, model=model)
    local, names = [], sorted(sources)
    for name in names:
        counts = seen_rows(sources[name], n)
        result[f"{name}_local"] = counts.tolist()
        result[f"{name}_batches"] = [sources[name].num_workers, sources[name].worker_index]
        local.append(counts)
    # The rows every worker read, summed over workers: each row exactly once.
    summed = streaming.all_reduce_sum(local, model=model)
    for name, total in zip(names, summed):
        result[f"{name}_total"] = total.tolist()
    # Different arrays per worker, with float64 values that float32 would round.
    a = (index + 1) * np.arange(6, dtype=np.float64).reshape(2, 3) + 0.25
    b = np.array([1e12 + index, 1.0 / 3.0 * (index + 1)])
    c = np.array(7.0 * (index + 1))
    sums = streaming.all_reduce_sum([a, b, c], model=model)
    result["all_reduce"] = [s.tolist() for s in sums]
    result["all_reduce_shapes"] = [list(s.shape) for s in sums]
    result["all_reduce_dtypes"] = [str(s.dtype) for s in sums]
    with open(os.path.join(out, f"streaming_{index}.json"), "w") as f:
        json.dump(result, f)


class DieAt(keras.callbacks.Callback):
    """Exits the process at the start of epoch ``epoch`` (only in a run that
    started at epoch 0: a run resumed by BackupAndRestore goes on)."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch
        self.first = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.first is None:
            self.first = epoch
        if epoch == self.epoch and self.first == 0:
            print(f"worker exits at the start of epoch {epoch}", flush=True)
            os._exit(DIED)


def tree_ensemble(strat, x, y, x_test, index, num_workers, args):
    from keras_trees.layers import TreeEnsembleLayer

    with strat.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([
            keras.Input((FEATURES,)),
            TreeEnsembleLayer(num_trees=4, max_depth=3, units=CLASSES, transition_width=1.0),
        ])
        model.compile(keras.optimizers.Adam(0.02), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # Keras' BackupAndRestore writes its files as given: one directory per
    # worker (the workers hold the same weights, each restores its own copy).
    callbacks = [keras.callbacks.BackupAndRestore(os.path.join(args.backup, f"worker{index}"))]
    if args.die_at_epoch is not None and index == num_workers - 1:
        callbacks.append(DieAt(args.die_at_epoch))
    history = model.fit(dataset(x, y), epochs=TEL_EPOCHS, callbacks=callbacks, verbose=0)
    print(f"worker {index}: TEL trained epochs {len(history.history['loss'])}, loss {history.history['loss']}",
          flush=True)
    prediction = keras.ops.convert_to_numpy(model(x_test, training=False))
    np.savez(os.path.join(args.out, f"tel_{index}.npz"), prediction=prediction,
             epochs_run=len(history.history["loss"]), loss=np.asarray(history.history["loss"]),
             **{f"w{i}": w for i, w in enumerate(model.get_weights())})


def growth(strat, x, y, x_test, index, args):
    from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth
    from keras_trees.layers import EndToEndTree

    with strat.scope():
        keras.utils.set_random_seed(0)
        tree = EndToEndTree(max_depth=3, num_classes=CLASSES, seed=0)
        model = keras.Sequential([keras.Input((FEATURES,)), tree])
        model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
    data = dataset(x, y)
    grow = GreedyLevelGrowth(data, epochs_per_level=2, finetune_epochs=2)
    history = model.fit(data, epochs=grow.max_epochs(3), callbacks=[grow, EMLeafUpdate(data)], verbose=0)
    print(f"worker {index}: tree grown in {len(history.history['loss'])} epochs, {tree.num_leaves()} leaves",
          flush=True)
    np.savez(os.path.join(args.out, f"growth_{index}.npz"),
             node_state=keras.ops.convert_to_numpy(tree.node_state), leaves=tree.leaves_numpy(),
             num_leaves=tree.num_leaves(),
             prediction=keras.ops.convert_to_numpy(model(x_test, training=False)))


def leaf_statistics(strat, x, y, x_test, index, args):
    """The other families' statistics over data, read from the same sharded
    dataset by every worker inside the strategy's scope: a convex polytope tree
    grown by ``fit_greedy`` without stump training (``epochs=0``: its topology,
    thresholds and leaves come from streamed, all-reduced histograms and
    counts only), then one epoch of stump training (the workers step together:
    they must agree with each other), and a non-greedy tree's
    ``refit_leaves``."""
    from sklearn.tree import DecisionTreeClassifier

    from keras_trees.interop import from_sklearn
    from keras_trees.layers import ConvexPolytopeTree, NonGreedyTree

    data = dataset(x, y)
    out = {}
    with strat.scope():
        for epochs in (0, 1):
            keras.utils.set_random_seed(0)
            tree = ConvexPolytopeTree(max_depth=3, num_classes=CLASSES, seed=0)
            tree.fit_greedy(data, epochs=epochs, batch_size=GLOBAL_BATCH, verbose=0)
            out[f"polytope{epochs}_state"] = keras.ops.convert_to_numpy(tree.node_state)
            out[f"polytope{epochs}_leaves"] = keras.ops.convert_to_numpy(tree.leaf_values)
            out[f"polytope{epochs}_prediction"] = keras.ops.convert_to_numpy(tree(x_test))
        keras.utils.set_random_seed(0)
        ngt = NonGreedyTree(max_depth=3, num_classes=CLASSES, seed=0)
        ngt.build((None, FEATURES))
        ngt.initialize_from(from_sklearn(DecisionTreeClassifier(max_depth=3, random_state=0).fit(x[:256], y[:256])))
        out["refitted"] = np.asarray(ngt.refit_leaves(data))
        out["nongreedy_leaves"] = keras.ops.convert_to_numpy(ngt.leaf_values)
    print(f"worker {index}: polytope and non-greedy statistics done", flush=True)
    np.savez(os.path.join(args.out, f"statistics_{index}.npz"), **out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--backup", required=True, help="BackupAndRestore root (one subfolder per worker)")
    parser.add_argument("--die-at-epoch", type=int, default=None)
    parser.add_argument("--growth", action="store_true")
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.config.disable_traceback_filtering()  # whole tracebacks in the logs

    strat = strategy()
    x, y, x_test = data()
    # A model only to give the streaming checks its distribute_strategy.
    with strat.scope():
        probe = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    num_workers, index = streaming.workers(probe)
    print(f"worker {index} of {num_workers} started", flush=True)
    streaming_checks(probe, num_workers, index, args.out)
    tree_ensemble(strat, x, y, x_test, index, num_workers, args)
    if args.growth:
        growth(strat, x, y, x_test, index, args)
        leaf_statistics(strat, x, y, x_test, index, args)
    print(f"worker {index}: done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
