"""Data larger than memory: every family trained from a streaming tf.data pipeline.

Generates once, on disk, a synthetic tabular classification set (32 float32
features; 4 classes from a fixed nonlinear teacher, ``argmax(tanh(x W1) W2 +
0.5 sin(2 x[:, :4]))``, with 5% of the labels replaced by a uniformly drawn
class, which caps the accuracy at about 96%) as sharded TFRecord files, and a
separate 10,000-row test shard. One record holds a block of 1024 rows as raw
float32 bytes (32 features and the label per row), parsed with
``tf.io.decode_raw``: no ``tf.train.Example`` per row. The set is generated
shard by shard (never all in memory) from a fixed seed; every block of 1024
rows depends only on the seed and its position, so a larger set extends a
smaller one with the same rows, and a
manifest written last (with the byte size of every shard) detects a
half-written cache, which is then completed. The cache lives in
``$KERAS_TREES_CACHE_DIR/scale-data`` (default ``~/.cache/keras_trees/scale-data``)
or ``--data-dir``; 1e7 rows take about 1.3 GB.

Each (family, N) then runs in a fresh process that trains on N rows streamed
from the first shards (``interleave`` of ``TFRecordDataset`` -> parse ->
``rebatch`` -> ``prefetch``; the data never sits in memory as a whole; the rows
are independent draws, so they are not shuffled) and reports:

* rows/s: training throughput of one epoch (greedy growth: of all its epochs,
  rows counted once per epoch). Graph tracing is excluded: a warm-up ``fit``
  on two batches (a full and a partial one, so the relaxed-shape trace exists
  too) runs first on the same model (so it trains on 1.5 batches more), and
  the clock starts after the first step of the timed ``fit``. Statistics passes of callbacks over the stream at the
  end of an epoch (leaf updates, growth) are inside the timed epoch.
* rows/CPU-s: the same rows over the CPU time of the process (all threads)
  in that interval: steadier than wall time when other jobs share the cores
  (on an idle machine with C cores, rows/s is up to C times this).
* peak RSS MB: the child's peak resident set size (``os.wait4`` rusage
  ``ru_maxrss`` of that one process, TensorFlow itself included).
* test accuracy on the fixed 10,000-row test shard.
* note: for the Tree Ensemble Layer, the mean number of reachable leaves per
  tree and test sample after training (its cost per row follows it: trees
  that train longer, i.e. on more rows, can reach more leaves and get slower
  per row for that reason, not because of N).

Then, per family, the ratios the scaling goals are about: rows/s at the
largest N over rows/s at the smallest (flat cost per row: about 1) and the
same for peak memory (flat: about 1), and whether the Tree Ensemble Layer at
depth 8 trains at least 100,000 rows/s. No time is asserted: figures vary with
the load of the machine.

Families (each trained by ``model.fit`` on the stream, Adam unless noted):

* ``TreeEnsembleLayer``: BatchNormalization(center=False, scale=False) ->
  TreeEnsembleLayer(10 trees, depth 8). The normalization only standardizes
  (the paper's "centered and bounded" inputs): a learned scale in front of
  the tree is redundant with the node weights, and Adam shrinks it for all
  splits at once, which widens every soft zone and makes the trees denser the
  longer they train (with it: 10.4 reachable leaves per tree after 1e6 rows,
  25.6 after 1e7); without it they stay near 2.
* ``HingeForest``: Dense(64) -> HingeBatchNormalization -> HingeForest(100 trees, depth 8, sum).
* ``EndToEndForest``: EndToEndForest(10 trees, depth 6, 8 features per split),
  gradient-trained leaves (no EM), deterministic routing at test time.
* ``ConvexPolytopeTree``: a perfect tree of depth 4 (4 experts per split)
  trained soft inside ``fit`` with ``PolytopeAnnealing`` and
  ``PolytopeLeafUpdate(train_dataset)`` (empirical leaves from the stream at
  the end of the epoch; the warm-up sets the first leaves from its rows);
  skipped, with the reason printed, where ``PolytopeLeafUpdate`` does not
  accept a dataset (it needs streaming statistics).
* ``NonGreedyTree``: NonGreedyTree(depth 6, nu=1) initialized from a CART tree
  (scikit-learn, depth 6, entropy) fitted on the first 10,000 rows of the
  stream (a fixed-size sample, so memory does not grow with N), then SGD with
  momentum on the whole stream.
* ``GreedyLevelGrowth``: an EndToEndTree of maximum depth 3 grown by
  ``GreedyLevelGrowth(train_dataset, epochs_per_level=1, finetune_epochs=0,
  max_attempts=1)`` (growth statistics from the stream; no warm-up, since
  growth changes the model, so tracing at each level is inside the clock);
  skipped, with the reason printed, where the callback does not accept a
  dataset (it needs a streaming GreedyLevelGrowth).

    python benchmarks/scale.py [--quick] [--families ...] [--sizes 1e4 1e5 ...]
        [--batch-size 1024] [--data-dir PATH] [--threads N] [--json PATH]

Without ``--quick`` N = 1e4, 1e5, 1e6, 1e7; ``--quick`` runs 1e4, 1e5, 1e6
(a few minutes on 2 cores, plus about 5 s to generate the 1e6-row cache once).
``--smoke`` (CI) runs every family at N = 2,048 (two batches) in this process,
one after the other, with TensorFlow's thread pools as they are.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import _data
import _speed
import numpy as np

FEATURES = 32
CLASSES = 4
LABEL_NOISE = 0.05
BLOCK_ROWS = 1024  # rows per TFRecord record
SHARD_BLOCKS = 256  # records per shard file (262,144 rows, 34.6 MB)
SHARD_ROWS = BLOCK_ROWS * SHARD_BLOCKS
TEST_ROWS = 10_000
SEED = 0
FORMAT = 1
SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (10_000, 100_000, 1_000_000)
SMOKE_SIZES = (2_048,)
CART_ROWS = 10_000  # NonGreedyTree's CART initialization sample
TEL_GOAL = 100_000  # rows/s, TreeEnsembleLayer depth 8 on 2 cores
FAMILIES = ("TreeEnsembleLayer", "HingeForest", "EndToEndForest", "ConvexPolytopeTree", "NonGreedyTree",
            "GreedyLevelGrowth")


# ------------------------------------------------------------------ data on disk
def default_data_dir():
    root = os.environ.get("KERAS_TREES_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                    "keras_trees")
    return os.path.join(root, "scale-data")


def _teacher():
    rng = np.random.default_rng([SEED, 0])
    w1 = rng.normal(size=(FEATURES, 64)) / np.sqrt(FEATURES)
    w2 = rng.normal(size=(64, CLASSES))
    return w1, w2


def _rows(stream, start_row, count, teacher):
    """`count` rows (float32, features then label) of a stream whose rows are
    drawn from generators keyed by (seed, stream, block), so any prefix of a
    shard is the same whatever the shard's length."""
    w1, w2 = teacher
    out = np.empty((count, FEATURES + 1), np.float32)
    for offset in range(0, count, BLOCK_ROWS):
        rows = min(BLOCK_ROWS, count - offset)
        block = (start_row + offset) // BLOCK_ROWS
        rng = np.random.default_rng([SEED, stream, block])
        x = rng.standard_normal((BLOCK_ROWS, FEATURES), dtype=np.float32)[:rows]
        logits = np.tanh(1.5 * (x @ w1)) @ w2 + 0.5 * np.sin(2.0 * x[:, :CLASSES])
        y = np.argmax(logits, axis=1)
        flip = rng.random(BLOCK_ROWS)[:rows] < LABEL_NOISE
        y = np.where(flip, rng.integers(0, CLASSES, BLOCK_ROWS)[:rows], y)
        out[offset:offset + rows, :FEATURES] = x
        out[offset:offset + rows, FEATURES] = y
    return out


def _write_shard(path, stream, start_row, count, teacher):
    import tensorflow as tf

    data = _rows(stream, start_row, count, teacher)
    tmp = path + ".tmp"
    with tf.io.TFRecordWriter(tmp) as writer:
        for offset in range(0, count, BLOCK_ROWS):
            writer.write(data[offset:offset + BLOCK_ROWS].tobytes())
    os.replace(tmp, path)  # a shard file exists only once complete


def _shard_layout(rows):
    """[(file name, stream, first row, row count)] of a cache holding `rows` training rows."""
    layout = [("test.tfrecord", 1, 0, TEST_ROWS)]
    for i, start in enumerate(range(0, rows, SHARD_ROWS)):
        layout.append((f"train-{i:05d}.tfrecord", 0, start, min(SHARD_ROWS, rows - start)))
    return layout


def _record_bytes(count):
    """Size of a TFRecord file of `count` rows (12 bytes of header + 4 of CRC per record)."""
    full, last = divmod(count, BLOCK_ROWS)
    sizes = [BLOCK_ROWS] * full + ([last] if last else [])
    return sum(16 + r * (FEATURES + 1) * 4 for r in sizes)


def _params():
    return {"format": FORMAT, "seed": SEED, "features": FEATURES, "classes": CLASSES, "label_noise": LABEL_NOISE,
            "block_rows": BLOCK_ROWS, "shard_rows": SHARD_ROWS, "test_rows": TEST_ROWS}


def read_manifest(data_dir):
    try:
        with open(os.path.join(data_dir, "manifest.json")) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    if manifest.get("params") != _params():
        return None
    for name, size in manifest["files"].items():
        path = os.path.join(data_dir, name)
        if not os.path.isfile(path) or os.path.getsize(path) != size:
            return None
    return manifest


def ensure_data(data_dir, rows, verbose=True):
    """The cache of at least `rows` training rows (and the test shard); generated
    (or completed) where missing. Returns (manifest, seconds spent generating)."""
    rows = -(-int(rows) // BLOCK_ROWS) * BLOCK_ROWS
    manifest = read_manifest(data_dir)
    if manifest is not None and manifest["rows"] >= rows:
        if verbose:
            print(f"data: {manifest['rows']:,} training rows + {TEST_ROWS:,} test rows cached in {data_dir}",
                  flush=True)
        return manifest, 0.0
    os.makedirs(data_dir, exist_ok=True)
    manifest_path = os.path.join(data_dir, "manifest.json")
    if os.path.exists(manifest_path):
        os.remove(manifest_path)  # stale until every shard below is complete
    teacher = _teacher()
    start = time.time()
    files = {}
    layout = _shard_layout(rows)
    written = 0
    for name, stream, first, count in layout:
        path = os.path.join(data_dir, name)
        size = _record_bytes(count)
        if not (os.path.isfile(path) and os.path.getsize(path) == size):
            _write_shard(path, stream, first, count, teacher)
            written += count
        files[name] = size
    manifest = {"params": _params(), "rows": rows, "files": files}
    with open(manifest_path + ".tmp", "w") as handle:
        json.dump(manifest, handle, indent=1)
    os.replace(manifest_path + ".tmp", manifest_path)
    seconds = time.time() - start
    if verbose:
        gb = sum(files.values()) / 1e9
        print(f"data: {rows:,} training rows + {TEST_ROWS:,} test rows in {data_dir} ({gb:.2f} GB); "
              f"generated {written:,} rows in {seconds:.1f} s", flush=True)
    return manifest, seconds


def dataset(data_dir, rows, batch_size, test=False):
    """Batches (x float32 (b, 32), y int32 (b,)) of the first `rows` rows, streamed from the shards."""
    import tensorflow as tf

    if test:
        names, rows = ["test.tfrecord"], TEST_ROWS
    else:
        names = [name for name, stream, _, _ in _shard_layout(rows) if stream == 0]
    files = [os.path.join(data_dir, name) for name in names]
    blocks = -(-rows // BLOCK_ROWS)
    last = rows - (blocks - 1) * BLOCK_ROWS

    def parse(record):
        return tf.reshape(tf.io.decode_raw(record, tf.float32), (-1, FEATURES + 1))

    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset, cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    ds = ds.take(blocks).map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if last != BLOCK_ROWS:
        ds = ds.enumerate().map(lambda i, b: b[: tf.where(i == blocks - 1, last, BLOCK_ROWS)])
    ds = ds.rebatch(batch_size)
    ds = ds.map(lambda b: (b[:, :FEATURES], tf.cast(b[:, FEATURES], tf.int32)))
    # interleave hides the length; Keras and the callbacks can know the steps per epoch.
    ds = ds.apply(tf.data.experimental.assert_cardinality(-(-rows // batch_size)))
    return ds.prefetch(tf.data.AUTOTUNE)


# ------------------------------------------------------------------ one run (child process)
class Skip(Exception):
    """The family cannot run on this installation; the message says why."""


def make_clock():
    """A Keras callback recording the wall time of the end of the first step and
    of training, and the number of epochs run."""
    import keras

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.begin = self.first = self.end = None
            self.cpu_first = self.cpu_end = None
            self.epochs = 0

        def on_train_begin(self, logs=None):
            self.begin = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if self.first is None:
                self.first, self.cpu_first = time.perf_counter(), time.process_time()

        def on_epoch_end(self, epoch, logs=None):
            self.epochs += 1

        def on_train_end(self, logs=None):
            self.end, self.cpu_end = time.perf_counter(), time.process_time()

    return Clock()


def _build(family, args, n, data_dir):
    """(model, callbacks of the timed fit, warm-up callbacks or None for no warm-up, epochs of the timed fit)."""
    import keras

    from keras_trees import topology
    from keras_trees.callbacks import GreedyLevelGrowth, PolytopeAnnealing, PolytopeLeafUpdate
    from keras_trees.layers import (
        ConvexPolytopeTree, EndToEndForest, EndToEndTree, HingeBatchNormalization, HingeForest, NonGreedyTree,
        TreeEnsembleLayer,
    )

    keras.utils.set_random_seed(0)
    inputs = keras.Input((FEATURES,))
    train = dataset(data_dir, n, args.batch_size)
    if family == "TreeEnsembleLayer":
        model = keras.Sequential([inputs, keras.layers.BatchNormalization(center=False, scale=False),
                                  TreeEnsembleLayer(num_trees=10, max_depth=8, units=CLASSES)])
        model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model, [], [], 1
    if family == "HingeForest":
        model = keras.Sequential([inputs, keras.layers.Dense(64, use_bias=False), HingeBatchNormalization(),
                                  HingeForest(num_trees=100, max_depth=8, units=CLASSES, reduction="sum")])
        model.compile(keras.optimizers.Adam(5e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model, [], [], 1
    if family == "EndToEndForest":
        model = keras.Sequential([inputs, EndToEndForest(num_trees=10, max_depth=6, num_classes=CLASSES,
                                                         features_per_split=8, seed=0)])
        model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy())
        return model, [], [], 1
    if family == "ConvexPolytopeTree":
        depth = 4
        tree = ConvexPolytopeTree(max_depth=depth, num_experts=4, num_classes=CLASSES, seed=0)
        model = keras.Sequential([inputs, tree])
        tree.node_state.assign(topology.perfect(1, depth).astype("int32"))
        model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy())
        warm = dataset(data_dir, min(n, 2 * args.batch_size), args.batch_size)
        try:
            # Streamed empirical leaves: the warm-up sets first leaves from its two batches.
            warm_leaves, leaves = PolytopeLeafUpdate(warm), PolytopeLeafUpdate(train)
        except (TypeError, ValueError) as error:
            raise Skip(f"needs the streaming PolytopeLeafUpdate (it refused a tf.data.Dataset: {error})") from error
        return model, [PolytopeAnnealing(0.5), leaves], [warm_leaves], 1
    if family == "NonGreedyTree":
        from sklearn.tree import DecisionTreeClassifier

        from keras_trees.interop.sklearn import from_sklearn

        # The paper's initialization, CART, on a fixed-size sample (the first
        # CART_ROWS rows of the stream: memory independent of N), outside the clock.
        sample = [(np.asarray(x), np.asarray(y)) for x, y in dataset(data_dir, min(n, CART_ROWS), 4096)]
        cart = DecisionTreeClassifier(max_depth=6, criterion="entropy", random_state=0).fit(
            np.concatenate([x for x, _ in sample]), np.concatenate([y for _, y in sample]))
        model = NonGreedyTree(max_depth=6, num_classes=CLASSES, nu=1.0, seed=0)
        model.initialize_from(from_sklearn(cart))
        model.compile(keras.optimizers.SGD(5e-3, momentum=0.9))
        return model, [], [], 1
    if family == "GreedyLevelGrowth":
        depth = 3
        model = keras.Sequential([inputs, EndToEndTree(max_depth=depth, num_classes=CLASSES, seed=0)])
        model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy())
        try:
            # Streaming statistics: the callback reads the training stream itself.
            growth = GreedyLevelGrowth(train, epochs_per_level=1, finetune_epochs=0, max_attempts=1)
        except (TypeError, ValueError) as error:
            raise Skip(f"needs the streaming GreedyLevelGrowth (it refused a tf.data.Dataset: {error})") from error
        return model, [growth], None, growth.max_epochs(depth)  # growth stops the fit when done
    raise ValueError(f"unknown family {family!r}")


def run_one(args):
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    family, n, data_dir = args.child[0], int(float(args.child[1])), args.data_dir
    result = {"family": family, "n": n}
    try:
        model, callbacks, warm_callbacks, epochs = _build(family, args, n, data_dir)
    except Skip as reason:
        result["skipped"] = str(reason)
        return result
    if warm_callbacks is not None:
        # Traces the train step on a full and a partial batch, outside the clock.
        warm_rows = min(n, args.batch_size + max(1, args.batch_size // 2))
        model.fit(dataset(data_dir, warm_rows, args.batch_size), epochs=1, verbose=0, shuffle=False,
                  callbacks=warm_callbacks)
    clock = make_clock()
    cpu_begin = time.process_time()
    train = dataset(data_dir, n, args.batch_size)
    model.fit(train, epochs=epochs, verbose=0, shuffle=False, callbacks=[*callbacks, clock])
    rows = clock.epochs * n
    first_rows = min(args.batch_size, n)
    if rows > first_rows and clock.end > clock.first:
        seconds, timed_rows = clock.end - clock.first, rows - first_rows
        cpu_seconds = clock.cpu_end - clock.cpu_first
    else:  # a single step: the whole fit
        seconds, timed_rows = clock.end - clock.begin, rows
        cpu_seconds = clock.cpu_end - cpu_begin
    correct = total = 0
    for x, y in dataset(data_dir, TEST_ROWS, 4096, test=True):
        pred = np.asarray(model.predict_on_batch(x))
        correct += int((pred.argmax(-1) == y.numpy()).sum())
        total += len(y)
    if family == "TreeEnsembleLayer":
        x = next(iter(dataset(data_dir, TEST_ROWS, 4096, test=True)))[0]
        leaves = model.layers[-1].mean_reachable_leaves(model.layers[0](x, training=False))
        result["note"] = f"reachable leaves {float(np.asarray(leaves)):.1f}"
    result.update(rows_per_s=timed_rows / seconds, rows_per_cpu_s=timed_rows / max(cpu_seconds, 1e-9),
                  epochs=clock.epochs, fit_s=clock.end - clock.begin, accuracy=correct / total,
                  peak_rss_mb=_speed.peak_rss_gb() * 1024)  # this process's own (see _speed.peak_rss_gb)
    return result


# ------------------------------------------------------------------ driver
def run_in_process(args, family, n):
    """Runs one (family, n) in this process (``--smoke``); the peak RSS is the process's so far."""
    return run_one(argparse.Namespace(**{**vars(args), "child": [family, str(n)]}))


def run_child(args, family, n):
    """Runs one (family, n) in a fresh process; returns its result with its own peak RSS
    (measured by the child: the rusage the parent gets also counts the parent's memory)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        log = os.path.join(tmp, "log.txt")
        argv = [sys.executable, os.path.abspath(__file__), "--child", family, str(n), "--result", out,
                "--data-dir", args.data_dir, "--batch-size", str(args.batch_size), "--threads", str(args.threads)]
        with open(log, "w") as handle:
            proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            with open(log) as handle:
                tail = handle.read()[-3000:]
            return {"family": family, "n": n, "failed": f"exit {proc.returncode}:\n{tail}"}
        with open(out) as handle:
            result = json.load(handle)
    if "peak_rss_mb" not in result:  # a skipped run: ru_maxrss (KiB on Linux, bytes on macOS)
        scale = 1 if sys.platform == "darwin" else 1024
        result["peak_rss_mb"] = usage.ru_maxrss * scale / 2**20
    return result


def fmt_n(n):
    exponent = int(np.log10(n)) if n > 0 else 0
    return f"1e{exponent}" if n == 10**exponent else f"{n:,}"


HEADER = (f"{'family':<20} {'N':>10} {'rows/s':>10} {'rows/CPU-s':>10} {'epochs':>6} {'fit s':>8} "
          f"{'peak RSS MB':>11} {'test acc':>8}  note")


def row(r):
    head = f"{r['family']:<20} {fmt_n(r['n']):>10}"
    if "skipped" in r:
        return f"{head}  skipped: {r['skipped']}"
    if "failed" in r:
        return f"{head}  FAILED: {r['failed'].strip().splitlines()[-1]}"
    return (f"{head} {r['rows_per_s']:>10,.0f} {r['rows_per_cpu_s']:>10,.0f} {r['epochs']:>6} {r['fit_s']:>8.1f} "
            f"{r['peak_rss_mb']:>11.0f} {100 * r['accuracy']:>7.2f}%  {r.get('note', '')}").rstrip()


def print_table(results):
    print("\n" + HEADER)
    for r in results:
        print(row(r))


def print_ratios(results):
    print("\nratios, largest N / smallest N (flat = about 1):")
    summary = {}
    for family in dict.fromkeys(r["family"] for r in results):
        runs = [r for r in results if r["family"] == family and "rows_per_s" in r]
        if len(runs) < 2:
            continue
        small, large = min(runs, key=lambda r: r["n"]), max(runs, key=lambda r: r["n"])
        speed = large["rows_per_s"] / small["rows_per_s"]
        cpu = large["rows_per_cpu_s"] / small["rows_per_cpu_s"]
        memory = large["peak_rss_mb"] / small["peak_rss_mb"]
        summary[family] = {"rows_per_s_ratio": speed, "rows_per_cpu_s_ratio": cpu, "peak_rss_ratio": memory}
        print(f"  {family:<20} N {fmt_n(small['n'])} -> {fmt_n(large['n'])}: rows/s x{speed:.2f}, "
              f"rows/CPU-s x{cpu:.2f}, "
              f"peak RSS x{memory:.2f} ({small['peak_rss_mb']:.0f} -> {large['peak_rss_mb']:.0f} MB)")
    tel = [r for r in results if r["family"] == "TreeEnsembleLayer" and "rows_per_s" in r]
    if tel:
        best = max(tel, key=lambda r: r["n"])
        met = best["rows_per_s"] >= TEL_GOAL
        print(f"TreeEnsembleLayer depth 8 at N={fmt_n(best['n'])}: {best['rows_per_s']:,.0f} rows/s; "
              f"goal {TEL_GOAL:,} rows/s {'met' if met else 'NOT met'}")
        summary["tel_goal_met"] = met
    return summary


def main(argv=None):
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--sizes", nargs="+", type=lambda s: int(float(s)), default=None,
                        help="training rows N per run (default 1e4 1e5 1e6 1e7; --quick: 1e4 1e5 1e6)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--data-dir", default=None, help="cache folder of the TFRecord shards "
                        "(default $KERAS_TREES_CACHE_DIR/scale-data or ~/.cache/keras_trees/scale-data)")
    parser.add_argument("--threads", type=int, default=None,
                        help="TensorFlow intra- and inter-op threads per run (default: all cores; "
                             "--smoke: 0, TensorFlow's default)")
    parser.add_argument("--generate-only", action="store_true", help="build the cache for the sizes and stop")
    parser.add_argument("--child", nargs=2, metavar=("FAMILY", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads is None:
        args.threads = 0 if args.smoke else os.cpu_count()
    if args.batch_size < 1:
        parser.error("--batch-size must be a positive integer")
    if args.threads is not None and args.threads < 0:
        parser.error("--threads must be >= 0 (0: TensorFlow's default)")
    args.data_dir = os.path.abspath(args.data_dir or default_data_dir())
    if args.child:
        result = run_one(args)
        with open(args.result, "w") as handle:
            json.dump(result, handle)
        return None
    sizes = args.sizes or list(SMOKE_SIZES if args.smoke else QUICK_SIZES if args.quick else SIZES)
    if min(sizes) < 1:
        parser.error("--sizes must be positive")
    print(f"{len(args.families)} families x N = {', '.join(fmt_n(n) for n in sizes)}; batch {args.batch_size}, "
          f"{args.threads} threads, {'all runs in this process' if args.smoke else 'one process per run'}",
          flush=True)
    _, gen_seconds = ensure_data(args.data_dir, max(sizes))
    if args.generate_only:
        return None
    results = []
    print(HEADER, flush=True)
    for family in args.families:
        for n in sizes:
            result = (run_in_process if args.smoke else run_child)(args, family, n)
            results.append(result)
            if "failed" in result:
                print(result["failed"], file=sys.stderr, flush=True)
            print(row(result), flush=True)
            if "skipped" in result:
                break  # the same reason holds for every N
    print_table(results)
    summary = print_ratios(results)
    _data.write_json(args.json, {"sizes": sizes, "batch_size": args.batch_size, "threads": args.threads,
                                 "generation_s": gen_seconds, "results": results,
                                 "summary": summary})
    return results


if __name__ == "__main__":
    main()
