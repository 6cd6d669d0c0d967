"""One JAX process of tests/distributed/test_jax_processes.py.

    python -m tests.distributed.jax_worker --out DIR [--process I --processes N --port P]

With ``--processes 2`` it joins a two-process ``jax.distributed`` run on CPU
(coordinator on ``localhost:P``, gloo collectives); without, it is the
single-process reference. It checks ``streaming.workers``, the process's
share of arrays and of a list of batches, ``streaming.all_reduce_sum`` of
different per-process arrays, and one ``EMLeafUpdate`` M-step of an
``EndToEndTree`` over the training data (every process is given all of it, as
``fit`` would be; the statistics are summed over processes), and writes the
results to ``jax_<process>.npz``.
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
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
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
    for name, source in (("arrays", streaming.stream(x_ids, ids, batch_size=4)),
                         ("list", streaming.stream([(x_ids[i:i + 4], ids[i:i + 4]) for i in range(0, n, 4)]))):
        counts = np.zeros(n)
        for xb, yb, _ in source:
            np.add.at(counts, xb[:, 0].astype(int), 1)
        shares[name] = counts
    totals = streaming.all_reduce_sum([shares["arrays"], shares["list"]])
    sums = streaming.all_reduce_sum([(index + 1) * np.arange(6.0).reshape(2, 3) + 0.25,
                                     np.array([1e12 + index, (index + 1) / 3.0])])

    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 5)).astype("float32")
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype("int32") + (x[:, 3] > 1).astype("int32")
    keras.utils.set_random_seed(0)
    tree = EndToEndTree(max_depth=3, num_classes=3, seed=0)
    model = keras.Sequential([keras.Input((5,)), tree])
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    em = EMLeafUpdate(x, y, batch_size=64)
    em.set_model(model)
    em.on_train_begin()
    em.update()
    np.savez(os.path.join(args.out, f"jax_{index}.npz"), workers=np.array([num, index]),
             arrays_local=shares["arrays"], list_local=shares["list"], arrays_total=totals[0],
             list_total=totals[1], sum_a=sums[0], sum_b=sums[1], leaves=tree.leaves_numpy(),
             prediction=keras.ops.convert_to_numpy(model(x[:50], training=False)))
    print(f"process {index} of {num}: done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
