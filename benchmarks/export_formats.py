"""Exported file size and single-row latency of every family in every format.

One small model per layer family (16 features, 3 outputs; the sizes below;
trained two epochs on synthetic data) is exported with the plain Keras call, ``model.export(path, format=...)``:

* ``tf_saved_model``: the compiled custom ops (``import keras_trees`` before
  ``tf.saved_model.load``), served by ``loaded.serve`` in TensorFlow;
* ``onnx``: the portable ``keras.ops`` path, converted by tf2onnx and served by
  ONNX Runtime (one intra-op and one inter-op thread);
* ``litert``: the portable path, converted by the TFLite converter and served
  by the LiteRT interpreter (``ai_edge_litert``, else ``tf.lite``; one thread).

For each it prints the size on disk (a SavedModel: its directory), the
median and 90th percentile of single-row calls (one row, float32, after
warm-up calls), the largest difference from ``model.predict`` over 64 rows,
and the export time. TensorFlow runs with one intra-op and one inter-op
thread, like the other runtimes.

    python benchmarks/export_formats.py [--families TreeEnsembleLayer HingeFern] [--calls 2000]
    python benchmarks/export_formats.py --json results/export_formats.json
    python benchmarks/export_formats.py --smoke   # CI: one family, a few calls
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402,F401  (puts the repository root on sys.path, quiets TF's logs)

import numpy as np  # noqa: E402

FEATURES, OUTPUTS = 16, 3
FORMATS = ("tf_saved_model", "onnx", "litert")
SUFFIX = {"tf_saved_model": "", "onnx": ".onnx", "litert": ".tflite"}
SMOKE_FAMILY = "HingeForest"


def _rows(rows=512, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES)).astype("float32")
    y = (np.argmax(x[:, :OUTPUTS] + 0.5 * x[:, OUTPUTS:2 * OUTPUTS], axis=1)).astype("int32")
    return x, y


def _sequential(layer):
    import keras

    return keras.Sequential([keras.Input((FEATURES,)), layer])


def build(family, seed=0):
    """``(model, description)``: the model of ``family``, trained for two
    epochs on synthetic data (the polytope tree grown first), so that its
    outputs are not those of an initialisation."""
    import keras

    keras.utils.set_random_seed(seed)
    model, description = _untrained(family, seed)
    x, y = _rows()
    if isinstance(model, keras.Sequential):
        probabilities = family in ("EndToEndTree", "ConvexPolytopeTree")
        model.compile(keras.optimizers.Adam(0.02), keras.losses.SparseCategoricalCrossentropy(
            from_logits=not probabilities))
    else:  # NonGreedyTree: its own loss
        model.compile(keras.optimizers.SGD(0.05))
    model.fit(x, y, batch_size=128, epochs=2, verbose=0)
    return model, description


def _untrained(family, seed):
    from keras_trees import layers as kt

    if family == "TreeEnsembleLayer":
        return _sequential(kt.TreeEnsembleLayer(num_trees=10, max_depth=4, units=OUTPUTS)), "10 trees, depth 4"
    if family == "EndToEndTree":
        return _sequential(kt.EndToEndTree(max_depth=6, num_classes=OUTPUTS, seed=seed)), "depth 6"
    if family == "EndToEndForest":
        layer = kt.EndToEndForest(num_trees=10, max_depth=5, units=OUTPUTS, seed=seed)
        return _sequential(layer), "10 trees, depth 5"
    if family == "ConvexPolytopeTree":
        layer = kt.ConvexPolytopeTree(max_depth=3, num_experts=4, num_classes=OUTPUTS, seed=seed)
        x, y = _rows()
        layer.fit_greedy(x, y, epochs=1, batch_size=128, verbose=0)  # grows the tree
        return _sequential(layer), "depth <= 3 (grown), 4 experts"
    if family == "HingeForest":
        layer = kt.HingeForest(num_trees=20, max_depth=6, units=OUTPUTS, reduction="sum", seed=seed)
        return _sequential(layer), "20 trees, depth 6"
    if family == "HingeFern":
        layer = kt.HingeFern(num_trees=20, max_depth=6, units=OUTPUTS, reduction="sum", seed=seed)
        return _sequential(layer), "20 ferns, depth 6"
    if family == "NonGreedyTree":
        return kt.NonGreedyTree(max_depth=6, num_classes=OUTPUTS, seed=seed), "depth 6"
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")


FAMILIES = ("TreeEnsembleLayer", "EndToEndTree", "EndToEndForest", "ConvexPolytopeTree", "HingeForest",
            "HingeFern", "NonGreedyTree")


def _size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def runner(format, path):
    """A function of one float32 batch returning the first output as NumPy."""
    if format == "tf_saved_model":
        import tensorflow as tf

        loaded = tf.saved_model.load(path)  # kept: its functions hold its variables only weakly
        return lambda x: loaded.serve(tf.constant(x)).numpy()
    if format == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})[0]
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    interpreter = Interpreter(model_path=path, num_threads=1)
    (inp,), out = interpreter.get_input_details(), interpreter.get_output_details()[0]
    shape = [None]

    def run(x):
        if shape[0] != x.shape:
            interpreter.resize_tensor_input(inp["index"], x.shape)
            interpreter.allocate_tensors()
            shape[0] = x.shape
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        return interpreter.get_tensor(out["index"])

    return run


def latency_us(run, row, calls, warmup):
    for _ in range(warmup):
        run(row)
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        run(row)
        times[i] = time.perf_counter() - start
    return float(np.median(times) * 1e6), float(np.percentile(times, 90) * 1e6)


def bench(family, formats, calls, warmup, directory):
    model, description = build(family)
    x, _ = _rows(64, seed=1)
    expected = model.predict(x, verbose=0)
    rows = []
    for format in formats:
        path = os.path.join(directory, f"{family}{SUFFIX[format]}")
        start = time.perf_counter()
        model.export(path, format=format, verbose=False)
        export_s = time.perf_counter() - start
        run = runner(format, path)
        diff = float(np.max(np.abs(run(x) - expected)))
        median, p90 = latency_us(run, x[:1], calls, warmup)
        rows.append({"family": family, "model": description, "format": format, "bytes": _size(path),
                     "median_us": median, "p90_us": p90, "max_abs_diff": diff, "export_s": export_s})
        print(f"{family:<19} {description:<30} {format:<15} {_size(path) / 1024:>8.1f} "
              f"{median:>9.1f} {p90:>9.1f} {diff:>9.1e} {export_s:>8.1f}", flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=None)
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--calls", type=int, default=None, help="timed single-row calls (default 2000; --smoke 5)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 200; --smoke 2)")
    parser.add_argument("--json", default=None, help="write the rows to this JSON file")
    parser.add_argument("--smoke", action="store_true", help=f"CI: {SMOKE_FAMILY} only, a few calls")
    args = parser.parse_args(argv)
    families = args.families or ([SMOKE_FAMILY] if args.smoke else list(FAMILIES))
    calls = args.calls or (5 if args.smoke else 2000)
    warmup = args.warmup if args.warmup is not None else (2 if args.smoke else 200)

    import tensorflow as tf

    try:  # one thread, like the other runtimes (possible only before TensorFlow starts)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass
    import keras

    import keras_trees

    print(f"keras-trees {keras_trees.__version__}, Keras {keras.__version__}, TensorFlow {tf.__version__}, "
          f"backend {keras.backend.backend()}, {os.cpu_count()} CPUs; single-row latency over {calls} calls")
    print(f"{'family':<19} {'model':<30} {'format':<15} {'size KB':>8} {'median us':>9} {'p90 us':>9} "
          f"{'max|diff|':>9} {'export s':>8}")
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for family in families:
            rows.extend(bench(family, args.formats, calls, warmup, directory))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump({"benchmark": "export_formats", "smoke": args.smoke, "calls": calls, "rows": rows},
                      handle, indent=1)
        print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
