"""One JAX process of tests/distributed/test_jax_processes.py.

    python -m tests.distributed.jax_worker --out DIR [--process I --processes N --port P]

With ``--processes 2`` it joins a two-process ``jax.distributed`` run on CPU
(coordinator on ``localhost:P``, gloo collectives); without, it is the
single-process reference. It checks ``streaming.workers``, the process's
share of a ``tf.data.Dataset`` (arrays and a list of batches are the
process's own data, as ``fit`` takes them under JAX), ``streaming.all_reduce_sum``
of different per-process arrays, and one ``EMLeafUpdate`` M-step of an
``EndToEndTree`` with each process given its half of the training arrays (the
statistics are summed over processes). Then (see
``growth``) it trains an ``EndToEndTree`` grown best-first by
``GreedyLevelGrowth`` with ``EMLeafUpdate`` inside ``model.fit`` (with two
processes under a ``keras.distribution.DataParallel`` spanning both processes'
CPU devices) and grows a ``ConvexPolytopeTree`` by ``fit_greedy(data,
epochs=0)``. It writes the results to ``jax_<process>.npz``.
"""

import argparse
import os
import sys

import numpy as np


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", type=int, default=0)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    # Set here, not at import: pytest imports this module (doctests) too.
    os.environ["KERAS_BACKEND"] = "jax"
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
    import jax

    if args.processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"localhost:{args.port}", num_processes=args.processes,
                                   process_id=args.process, initialization_timeout=120,
                                   coordinator_bind_address=f"127.0.0.1:{args.port}")  # loopback only
    import keras

    from keras_trees import streaming
    from keras_trees.callbacks import EMLeafUpdate
    from keras_trees.layers import EndToEndTree

    num, index = streaming.workers()
    n = 23
    ids = np.arange(n, dtype=np.float64)
    x_ids = np.stack([ids, -ids], axis=1)
    shares = {}
    import tensorflow as tf

    batches = tf.data.Dataset.from_tensor_slices((x_ids, ids)).batch(4)
    for name, source in (("arrays", streaming.stream(x_ids, ids, batch_size=4)),
                         ("list", streaming.stream([(x_ids[i:i + 4], ids[i:i + 4]) for i in range(0, n, 4)])),
                         ("dataset", streaming.stream(batches))):
        counts = np.zeros(n)
        for xb, _, _ in source:
            np.add.at(counts, xb[:, 0].astype(int), 1)
        shares[name] = counts
    totals = streaming.all_reduce_sum([shares["arrays"], shares["list"], shares["dataset"]])
    sums = streaming.all_reduce_sum([(index + 1) * np.arange(6.0).reshape(2, 3) + 0.25,
                                     np.array([1e12 + index, (index + 1) / 3.0])])

    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 5)).astype("float32")
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype("int32") + (x[:, 3] > 1).astype("int32")
    keras.utils.set_random_seed(0)
    tree = EndToEndTree(max_depth=3, num_classes=3, seed=0)
    model = keras.Sequential([keras.Input((5,)), tree])
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    # Arrays are each process's own data under JAX (as fit takes them): every
    # process passes its half; the summed statistics are those of all the rows.
    em = EMLeafUpdate(x[index::num], y[index::num], batch_size=64)
    em.set_model(model)
    em.on_train_begin()
    em.update()
    grown = growth(num)
    np.savez(os.path.join(args.out, f"jax_{index}.npz"), workers=np.array([num, index]),
             arrays_local=shares["arrays"], list_local=shares["list"], dataset_local=shares["dataset"],
             arrays_total=totals[0], list_total=totals[1], dataset_total=totals[2], sum_a=sums[0], sum_b=sums[1], leaves=tree.leaves_numpy(),
             prediction=keras.ops.convert_to_numpy(model(x[:50], training=False)), **grown)
    print(f"process {index} of {num}: done", flush=True)


def growth(num_processes):
    """An ``EndToEndTree`` grown by ``GreedyLevelGrowth`` with ``EMLeafUpdate``
    leaves inside ``fit``. With several processes, under a
    ``keras.distribution.DataParallel`` over every process's CPU device: ``fit``
    gets the global ``tf.data`` pipeline and auto-shards it (each process
    feeds half of every global batch; the gradients are summed over the
    mesh), the callbacks get the same pipeline and read every
    ``num_processes``-th batch, summing their statistics over processes."""
    import keras
    import tensorflow as tf

    from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth
    from keras_trees.layers import ConvexPolytopeTree, EndToEndTree

    rng = np.random.default_rng(1)
    x = rng.normal(size=(512, 6)).astype("float32")
    score = np.stack([x[:, 0] + x[:, 1] * x[:, 2], np.sin(2 * x[:, 3]) - x[:, 4], 0.5 * x[:, 5] ** 2], axis=1)
    y = np.argmax(score + 0.3 * rng.normal(size=score.shape), axis=1).astype("int32")
    x_test = rng.normal(size=(100, 6)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    if num_processes > 1:
        devices = keras.distribution.list_devices("cpu")
        assert len(devices) == num_processes, devices
        distribution = keras.distribution.DataParallel(devices=devices)
        keras.distribution.set_distribution(distribution)
        fit_rows = sum(len(b[1]) for b in distribution.distribute_dataset(data).as_numpy_iterator())
    else:
        fit_rows = len(y)
    keras.utils.set_random_seed(0)
    tree = EndToEndTree(max_depth=3, num_classes=3, seed=0)
    model = keras.Sequential([keras.Input((6,)), tree])
    model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy())
    # Best-first: which leaf splits next depends on the summed gains.
    grow = GreedyLevelGrowth(data, epochs_per_level=1, finetune_epochs=2, best_first=True, max_leaves=5,
                             min_samples_split=40)
    history = model.fit(data, epochs=grow.max_epochs(3), callbacks=[grow, EMLeafUpdate(data)], verbose=0)
    print(f"tree grown in {len(history.history['loss'])} epochs, {tree.num_leaves()} leaves", flush=True)
    out = dict(fit_rows=fit_rows, growth_state=keras.ops.convert_to_numpy(tree.node_state),
               growth_leaves=tree.leaves_numpy(),
               growth_loss=np.asarray(history.history["loss"]),
               growth_prediction=keras.ops.convert_to_numpy(model(x_test, training=False)),
               **{f"growth_w{i}": w for i, w in enumerate(model.get_weights())})
    # A convex polytope tree's statistics-only greedy fit (histograms and
    # counts streamed from the process's batches and summed over processes).
    keras.utils.set_random_seed(0)
    polytope = ConvexPolytopeTree(max_depth=3, num_classes=3, seed=0)
    polytope.fit_greedy(data, epochs=0, verbose=0)
    out.update(polytope_state=keras.ops.convert_to_numpy(polytope.node_state),
               polytope_leaves=keras.ops.convert_to_numpy(polytope.leaf_values),
               polytope_prediction=keras.ops.convert_to_numpy(polytope(x_test)))
    return out


if __name__ == "__main__":
    sys.exit(main())
