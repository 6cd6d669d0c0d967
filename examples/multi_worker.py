"""Training on several workers with MultiWorkerMirroredStrategy: TF_CONFIG processes or Ray Train.

    python examples/multi_worker.py --launch local [--workers 2]
        spawns the workers itself on this machine (localhost ports), each one
        a copy of this script with its TF_CONFIG;
    TF_CONFIG='{"cluster": {"worker": ["host0:2222", "host1:2222"]},
                "task": {"type": "worker", "index": 0}}' python examples/multi_worker.py
        runs one worker of a cluster you launch yourself (start the same
        command on every host, each with its own task index);
    python examples/multi_worker.py --launch ray [--workers 2]
        Ray Train's TensorflowTrainer starts the workers and sets their
        TF_CONFIG (here on one machine; ``pip install "keras-trees[ray]"``);
    python examples/multi_worker.py --launch local --smoke
        the smoke test (CI): one epoch on 512 rows.

Every worker builds the same model inside ``strategy.scope()`` and calls
``fit`` on the same global ``tf.data`` pipeline, which ``fit`` shards: each
worker reads its part of every global batch and the gradients are summed
across workers, so the result equals one process training on all the data
with the same global batch (up to float rounding). Statistics the library
computes over data (EM leaves, greedy growth) read the worker's share through
``keras_trees.streaming`` and sum it over workers with
``streaming.all_reduce_sum``; this script uses the same two functions to
evaluate the trained model on sharded test data.

Fault tolerance: ``keras.callbacks.BackupAndRestore`` saves the weights,
optimizer state and epoch after every epoch, one directory per worker (Keras
writes the files as given, so workers must not share one). When a worker
fails, the others fail too (their all-reduces are aborted); start all of them
again with the same ``--backup-dir`` and training resumes from the last
finished epoch. Ray Train does the restart itself with
``RunConfig(failure_config=FailureConfig(max_failures=...))``.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch", choices=["none", "local", "ray"], default="none",
                        help="none: run as one worker (TF_CONFIG from the environment); local: spawn --workers "
                             "processes on localhost; ray: Ray Train's TensorflowTrainer")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=None, help="default 5 (--smoke: 1)")
    parser.add_argument("--rows", type=int, default=None, help="training rows (synthetic data; default 8192, "
                        "--smoke: 512)")
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--backup-dir", default=None, help="BackupAndRestore root (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow CPU threads per worker")
    parser.add_argument("--verbose", action="store_true", help="with --launch ray: show the workers' logs")
    parser.add_argument("--smoke", action="store_true", help="smoke test (CI): one epoch on 512 rows")
    args = parser.parse_args(argv)
    args.epochs = args.epochs or (1 if args.smoke else 5)
    args.rows = args.rows or (512 if args.smoke else 8192)
    return args


# ------------------------------------------------------------------ the training every worker runs
def make_data(rows, seed=0):
    """Synthetic 3-class data (the same on every worker: fit shards it)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 6)).astype("float32")
    score = np.stack([x[:, 0] + x[:, 1] * x[:, 2], np.sin(2 * x[:, 3]) - x[:, 4], 0.5 * x[:, 5] ** 2], axis=1)
    y = np.argmax(score + 0.3 * rng.normal(size=score.shape), axis=1).astype("int32")
    return x, y


def train_worker(config):
    """One worker: trains a Tree Ensemble Layer under MultiWorkerMirroredStrategy
    (``TF_CONFIG`` must be set) and returns its metrics."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(config["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(config["threads"])
    from keras_trees.distribute import multi_worker_strategy

    # keras_trees.distribute: the strategy with a workaround for Keras' fit
    # under several workers (keras-team/keras#20585).
    strategy = multi_worker_strategy()

    import keras

    from keras_trees import streaming
    from keras_trees.layers import TreeEnsembleLayer

    x, y = make_data(config["rows"])
    x_test, y_test = make_data(2048, seed=1)
    # No shuffle here (or a seeded one): every worker must see the same global order.
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(config["global_batch"])

    with strategy.scope():
        keras.utils.set_random_seed(0)  # the same initial weights everywhere
        model = keras.Sequential([
            keras.Input((x.shape[1],)),
            TreeEnsembleLayer(num_trees=8, max_depth=4, units=3, transition_width=1.0),
        ])
        model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    num_workers, index = streaming.workers(model)
    backup = keras.callbacks.BackupAndRestore(os.path.join(config["backup_dir"], f"worker{index}"))
    history = model.fit(train, epochs=config["epochs"], callbacks=[backup], verbose=0)

    # Evaluation on sharded data: each worker scores its share of the test
    # batches; all_reduce_sum adds the counts of all workers.
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(256)
    correct = seen = 0.0
    for xb, yb, _ in streaming.stream(test, model=model):
        predicted = np.argmax(keras.ops.convert_to_numpy(model(xb, training=False)), axis=1)
        correct += float(np.sum(predicted == yb))
        seen += len(yb)
    # The workers hold the same weights: their checksums sum to num_workers x their own.
    checksum = float(sum(np.sum(w, dtype=np.float64) for w in model.get_weights()))
    correct, seen, checksums = streaming.all_reduce_sum([np.array(correct), np.array(seen), np.array(checksum)],
                                                        model=model)
    return {
        "worker": index, "num_workers": num_workers, "epochs_run": len(history.history["loss"]),
        "final_loss": float(history.history["loss"][-1]), "test_accuracy": float(correct / seen),
        "test_rows": int(seen), "same_weights": bool(np.isclose(checksums, num_workers * checksum, rtol=1e-12)),
    }


def report(metrics):
    print(f"worker {metrics['worker']} of {metrics['num_workers']}: {metrics['epochs_run']} epochs, "
          f"loss {metrics['final_loss']:.4f}, test accuracy {metrics['test_accuracy']:.4f} "
          f"on {metrics['test_rows']} rows (all workers), same weights on all workers = {metrics['same_weights']}",
          flush=True)


def config_of(args, backup_dir):
    return {"epochs": args.epochs, "rows": args.rows, "global_batch": args.global_batch,
            "backup_dir": backup_dir, "threads": args.threads}


# ------------------------------------------------------------------ launchers
def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def launch_local(args, backup_dir):
    """Starts ``--workers`` copies of this script on localhost, each with its TF_CONFIG."""
    hosts = [f"localhost:{port}" for port in free_ports(args.workers)]
    procs = []
    try:
        for index in range(args.workers):
            env = dict(os.environ, TF_CONFIG=json.dumps(
                {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}))
            env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
            cmd = [sys.executable, os.path.abspath(__file__), "--epochs", str(args.epochs), "--rows",
                   str(args.rows), "--global-batch", str(args.global_batch), "--backup-dir", backup_dir,
                   "--threads", str(args.threads)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        outputs = [p.communicate(timeout=1800)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    for i, out in enumerate(outputs):
        lines = [line for line in out.splitlines() if line.startswith("worker ")]
        print("\n".join(lines) if i not in failed else f"--- worker {i} failed:\n{out[-4000:]}")
    if failed:
        sys.exit(f"workers {failed} failed")


def launch_ray(args, backup_dir):
    try:
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.tensorflow import TensorflowTrainer
    except ImportError as error:
        sys.exit(f"--launch ray needs Ray Train: pip install 'keras-trees[ray]' (or 'ray[train]'); {error}")

    # The workers are new processes: give them this checkout and the same backend.
    env_vars = {"PYTHONPATH": REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    for name in ("KERAS_TREES_CACHE_DIR",):
        if name in os.environ:
            env_vars[name] = os.environ[name]
    # A local Ray instance (``ray.init(address="auto")`` joins a running cluster
    # instead). TensorflowTrainer writes TF_CONFIG with the node's IP address.
    ray.init(num_cpus=args.workers + 1, include_dashboard=False, runtime_env={"env_vars": env_vars},
             log_to_driver=args.verbose)
    try:
        trainer = TensorflowTrainer(
            train_loop_per_worker=ray_worker,
            train_loop_config=config_of(args, backup_dir),
            scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False,
                                         resources_per_worker={"CPU": 1}),
            run_config=RunConfig(name="keras_trees_multi_worker", storage_path=os.path.join(backup_dir, "ray")),
        )
        result = trainer.fit()
    finally:
        ray.shutdown()
    # Ray Train 2.x keeps what the first worker's loop returned (older
    # versions: the metrics it reported last).
    metrics = getattr(result, "return_value", None) or result.metrics
    print("Ray Train finished; the first worker's metrics:")
    report(metrics)


def ray_worker(config):
    """Ray Train's loop on every worker: TensorflowTrainer has set TF_CONFIG."""
    import ray.train

    metrics = train_worker(config)
    ray.train.report(metrics)
    return metrics


def main(argv=None):
    args = parse_args(argv)
    if args.workers < 1:
        sys.exit("--workers must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        backup_dir = args.backup_dir or os.path.join(tmp, "backup")
        if args.launch == "local":
            launch_local(args, backup_dir)
        elif args.launch == "ray":
            launch_ray(args, backup_dir)
        else:
            if "TF_CONFIG" not in os.environ:
                sys.exit("set TF_CONFIG (see the module documentation), or pass --launch local or --launch ray")
            report(train_worker(config_of(args, backup_dir)))


if __name__ == "__main__":
    main()
