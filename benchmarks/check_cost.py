"""What the input checks cost: this checkout against an earlier revision, side by side.

The library checks its inputs on every path (NaN/Inf in inputs and weights,
index ranges, topologies, dtypes). The goal is that the checks make the
compiled paths at most 5% slower. This script measures that, for the path users run: one compiled
training step (``model.train_on_batch``) and one compiled inference call
(``model.predict_on_batch``) of every tree layer.

- It checks out the base revision (default: the commit before the checks,
  ``f907a53``) into a temporary git worktree.
- It runs the same timing child alternately against the base tree and this
  tree, ``--repeats`` times each, every run in a fresh process. The kernels
  are built once per tree.
- It prints, per layer and step, the median time of both and their ratio.

The same code and data run in both trees, so the ratio is only the cost of
what changed between them.

``--graph-checks`` measures in one process, with one build of the kernels,
what the checks issued into TensorFlow graphs cost (``tf.debugging.Assert``
and what they compute; the compiled kernels' own C++ checks stay in both): per
layer one model traced as users get it and one traced with those checks
switched off, called alternately. Nothing else differs, so this isolates that
part of the cost from the noise of comparing processes. The kernels' own
scans, in both columns, are then timed apart (the same scan over ``x`` and
every weight, an upper bound) and added for the total.

``--paired`` runs the two trees at the same time instead, each child pinned to
its own CPU with one TensorFlow thread, swapping CPUs at every repeat, and
times each call by the process's CPU time as well as the wall clock. Both
children then see the same load from the rest of the machine, and each
repeat gives one ratio; the script prints the median ratio of the repeats
and their spread. This needs at least two CPUs.

    python benchmarks/check_cost.py [--base REV] [--repeats 3] [--steps 50] [--paired | --graph-checks] [--json PATH]

``--smoke`` (CI): three of the layers, 2 calls per step, one repeat; without
``--graph-checks``, no worktree: this checkout stands in for the base, and the
timing runs go in this process (nothing pinned), so the ratios are about 1.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH, DIM, CLASSES = 256, 64, 10


SMOKE_CASES = ("TreeEnsembleLayer d6", "ConvexPolytopeTree d3", "NonGreedyTree d6")  # one per kind of build


def cases(smoke=False):
    """(name, make_layer, target kind) of every tree layer, at the benchmark
    sizes of the speed scripts (compiled kernels dominate); ``smoke``: those of
    ``SMOKE_CASES``."""
    return [case for case in _cases() if not smoke or case[0] in SMOKE_CASES]


def _cases():
    from keras_trees import layers

    return [
        ("TreeEnsembleLayer d6", lambda: layers.TreeEnsembleLayer(num_trees=10, max_depth=6, units=CLASSES), "logits"),
        ("HingeForest d8",
         lambda: layers.HingeForest(num_trees=50, max_depth=8, units=CLASSES, reduction="sum", seed=0),
         "logits"),
        ("HingeFern d8",
         lambda: layers.HingeFern(num_trees=50, max_depth=8, units=CLASSES, reduction="sum", seed=0),
         "logits"),
        ("EndToEndForest d6", lambda: layers.EndToEndForest(num_trees=4, max_depth=6, num_classes=CLASSES, seed=0),
         "probabilities"),
        ("ConvexPolytopeTree d3", lambda: layers.ConvexPolytopeTree(max_depth=3, num_classes=CLASSES, seed=0),
         "probabilities"),
        ("NonGreedyTree d6", lambda: layers.NonGreedyTree(max_depth=6, num_classes=CLASSES, seed=0), "model"),
    ]


def data(threads=None):
    """The benchmark batch ``(x, y)``; with ``threads``, TensorFlow's thread
    pools set to that many threads first."""
    if threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, DIM)).astype("float32")
    y = rng.integers(0, CLASSES, size=BATCH).astype("int32")
    return x, y


def build(name, make, kind, x, y):
    import keras

    keras.utils.set_random_seed(0)
    layer = make()
    if kind == "model":
        model = layer
        model.compile(keras.optimizers.SGD(0.01))
    else:
        model = keras.Sequential([keras.Input((DIM,)), layer])
        if name.startswith("ConvexPolytopeTree"):
            layer.fit_greedy(x, y, epochs=1, batch_size=BATCH)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=kind == "logits")
        model.compile(keras.optimizers.Adam(1e-3), loss)
    return model


@contextlib.contextmanager
def graph_checks_off():
    """While tracing: the checks that would go into a TensorFlow graph are
    dropped (eager checks of concrete values still run)."""
    from keras_trees.validation import batched, tensors

    require, require_all = tensors.require, batched.require_all

    def eager_only(ok, message, error=ValueError):
        if tensors._tf_graph(ok):
            return None
        return require(ok, message, error)

    def eager_only_all(checks, error=ValueError, output=None):
        if output is not None and tensors._tf_graph(output):
            return output
        return require_all(checks, error, output)

    tensors.require, batched.require_all = eager_only, eager_only_all
    try:
        yield
    finally:
        tensors.require, batched.require_all = require, require_all


def graph_checks_cost(steps, rounds, threads, smoke=False):
    """Per layer and step: median time of the model with graph checks and of
    the same model traced without, called alternately in this process."""
    x, y = data(threads)
    results = {}
    for name, make, kind in cases(smoke):
        models = {"checked": build(name, make, kind, x, y), "unchecked": build(name, make, kind, x, y)}
        for which, model in models.items():
            with graph_checks_off() if which == "unchecked" else contextlib.nullcontext():
                for _ in range(3):  # trace and warm up
                    model.train_on_batch(x, y)
                    model.predict_on_batch(x)
        entry = {}
        for step in ("train", "predict"):
            samples = {"checked": [], "unchecked": []}
            for r in range(rounds * steps):
                order = ("checked", "unchecked") if r % 2 == 0 else ("unchecked", "checked")
                for which in order:
                    model = models[which]
                    start = time.process_time()
                    model.train_on_batch(x, y) if step == "train" else model.predict_on_batch(x)
                    samples[which].append(time.process_time() - start)
            checked, unchecked = (statistics.median(samples[k]) for k in ("checked", "unchecked"))
            entry[step] = {"checked_s": checked, "unchecked_s": unchecked, "ratio": checked / unchecked}
        scan = scan_time(x, models["checked"], steps * rounds)
        for step in entry.values():  # the kernels' scans are in both columns: their upper bound on top
            step["scan_s"] = scan
            step["total_ratio"] = (step["checked_s"] + scan) / step["unchecked_s"]
        results[name] = entry
    return results


def scan_time(x, model, calls):
    """CPU time per call of the compiled kernels' finiteness scans, bounded
    above: the same scan (the library's check op, the kernels' ``AllFinite``)
    over ``x`` and every floating weight of the model, timed in a graph that
    repeats it, minus the same graph without tensors to scan."""
    import tensorflow as tf

    from keras_trees.ops import _tf_check

    import numpy as np

    # (weights that hold +-inf by design, e.g. "no gain yet" sentinels, are
    # left out: the kernels do not read them, and the scan would fail)
    tensors = [tf.constant(x)] + [tf.convert_to_tensor(w.value) for w in model.weights
                                  if w.dtype in ("float32", "float64") and np.isfinite(w.numpy()).all()]
    value = tf.constant([1.0])

    def repeated(scanned):
        @tf.function(autograph=False)
        def fn():
            out = value
            for _ in range(20):
                out = _tf_check.check(out, scanned, [], [], ["bad"] * len(scanned))
            return out

        return fn

    fns = {"scan": repeated(tensors), "empty": repeated([])}
    samples = {"scan": [], "empty": []}
    for fn in fns.values():
        fn()
    for _ in range(max(calls // 20, 5)):
        for key, fn in fns.items():
            start = time.process_time()
            fn()
            samples[key].append(time.process_time() - start)
    return max(0.0, statistics.median(samples["scan"]) - statistics.median(samples["empty"])) / 20


def report_graph_checks(args, results):
    print(f"Graph checks' cost, tensorflow backend, batch {BATCH} x {DIM} features, one process, "
          f"{args.repeats * args.steps} alternating calls each (CPU time, median)")
    print("kernel scans: an upper bound of the compiled kernels' own finiteness scans per call (x and every "
          "weight), in both columns; total = (with + scans) / without")
    print(f"{'layer':<24}{'step':<9}{'without':>12}{'with':>12}{'ratio':>8}{'scans':>11}{'total':>8}")
    worst = 0.0
    for name, entry in results.items():
        for step, e in entry.items():
            worst = max(worst, e["total_ratio"])
            print(f"{name:<24}{step:<9}{e['unchecked_s'] * 1e3:>9.3f} ms{e['checked_s'] * 1e3:>9.3f} ms"
                  f"{e['ratio']:>8.3f}{e['scan_s'] * 1e6:>8.1f} us{e['total_ratio']:>8.3f}")
    print(f"largest total ratio: {worst:.3f} (goal: at most 1.05)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": "graph-checks", "results": results}, f, indent=1)


def child(steps, out_path, threads=None, smoke=False):
    x, y = data(threads)
    results = {}
    for name, make, kind in cases(smoke):
        model = build(name, make, kind, x, y)
        for _ in range(3):  # trace and warm up
            model.train_on_batch(x, y)
            model.predict_on_batch(x)
        times = {}
        for step, fn in (("train", lambda: model.train_on_batch(x, y)), ("predict", lambda: model.predict_on_batch(x))):
            wall, cpu = [], []
            for _ in range(steps):
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                cpu.append(time.process_time() - start_cpu)
                wall.append(time.perf_counter() - start)
            times[step] = statistics.median(wall)
            times[step + " cpu"] = statistics.median(cpu)
        results[name] = times
    with open(out_path, "w") as f:
        json.dump(results, f)


def start_child(tree, steps, env, cpu=None):
    """Starts one timing child on ``tree``; with ``cpu``, pinned to that CPU
    with one TensorFlow thread. Returns ``(process, result path)``."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(env, PYTHONPATH=tree)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", out, "--steps", str(steps)]
    if cpu is not None:
        cmd += ["--threads", "1"]
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=pin)
    return proc, out, tree


def finish_child(started):
    proc, out, tree = started
    _, stderr = proc.communicate()
    if proc.returncode:
        sys.exit(f"the timing run in {tree} failed:\n{stderr[-3000:]}")
    with open(out) as f:
        data = json.load(f)
    os.unlink(out)
    return data


def run_child(tree, steps, env):
    return finish_child(start_child(tree, steps, env))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="f907a53", help="revision without the checks (default: f907a53)")
    parser.add_argument("--repeats", type=int, default=None, help="fresh processes per tree (default 3; --smoke 1)")
    parser.add_argument("--steps", type=int, default=None, help="timed calls per step kind (default 50; --smoke 2)")
    parser.add_argument("--paired", action="store_true",
                        help="run both trees at once, each on its own CPU with one thread (see above)")
    parser.add_argument("--graph-checks", action="store_true",
                        help="in one process: with and without the checks issued into graphs (see above)")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): three layers, 2 calls per step, one repeat, no worktree (this "
                             "checkout stands in for the base) and no fresh processes; its figures mean nothing")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (1 if args.smoke else 3)
    args.steps = args.steps or (2 if args.smoke else 50)
    if args.child:
        child(args.steps, args.child, args.threads)
        return
    if args.graph_checks:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        report_graph_checks(args, graph_checks_cost(args.steps, args.repeats, args.threads, args.smoke))
        return
    if args.paired and len(os.sched_getaffinity(0)) < 2:
        parser.error("--paired needs at least two CPUs")
    env = dict(os.environ)
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.smoke:
        args.base = "this checkout"
        runs = {"base": [], "head": []}
        for _ in range(args.repeats):
            for which in runs:
                runs[which].append(run_in_process(args.steps))
    else:
        runs = compare_trees(args, env)
    if args.paired:
        report_paired(args, env, runs)
        return
    report(args, env, runs)


def run_in_process(steps):
    """One timing run of this checkout, in this process (``--smoke``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        child(steps, out, smoke=True)
        with open(out) as f:
            return json.load(f)


def compare_trees(args, env):
    """The timing runs of the base revision (in a temporary worktree) and of
    this checkout, ``--repeats`` fresh processes each: ``{"base": [...], "head": [...]}``."""
    base_tree = tempfile.mkdtemp(prefix="keras-trees-base-")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", base_tree, args.base], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The benchmark itself comes from this checkout; the library from each tree.
        runs = {"base": [], "head": []}
        cpus = sorted(os.sched_getaffinity(0))[:2]
        for r in range(args.repeats):
            if args.paired:
                first, second = cpus if r % 2 == 0 else cpus[::-1]
                started = [start_child(base_tree, args.steps, env, first), start_child(ROOT, args.steps, env, second)]
                runs["base"].append(finish_child(started[0]))
                runs["head"].append(finish_child(started[1]))
                print(f"  run {r + 1}/{args.repeats} (base on CPU {first}, this tree on CPU {second}) done",
                      file=sys.stderr, flush=True)
                continue
            for which, tree in (("base", base_tree), ("head", ROOT)):
                runs[which].append(run_child(tree, args.steps, env))
                print(f"  run {r + 1}/{args.repeats} {which} done", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base_tree], check=False)
    return runs


def report(args, env, runs):
    """Median per layer and step of both trees, and their ratio (and writes ``--json``)."""
    print(f"Input-check cost, {env['KERAS_BACKEND']} backend, batch {BATCH} x {DIM} features, "
          f"median of {args.steps} calls, median over {args.repeats} fresh processes per tree")
    print(f"{'layer':<24}{'step':<9}{'base (' + args.base + ')':>18}{'this tree':>14}{'ratio':>8}")
    table = {}
    worst = 0.0
    for name in runs["head"][0]:
        for step in ("train", "predict"):
            base = statistics.median(run[name][step] for run in runs["base"])
            head = statistics.median(run[name][step] for run in runs["head"])
            ratio = head / base
            worst = max(worst, ratio)
            table[f"{name} {step}"] = {"base_s": base, "head_s": head, "ratio": ratio}
            print(f"{name:<24}{step:<9}{base * 1e3:>15.2f} ms{head * 1e3:>11.2f} ms{ratio:>8.3f}")
    print(f"largest ratio: {worst:.3f} (goal: at most 1.05)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"base": args.base, "backend": env["KERAS_BACKEND"], "results": table}, f, indent=1)


def report_paired(args, env, runs):
    """One ratio per repeat (the two trees ran at the same time), by CPU time
    and by wall clock; their median and range."""
    print(f"Input-check cost, {env['KERAS_BACKEND']} backend, batch {BATCH} x {DIM} features, both trees at once "
          f"(one CPU and one thread each), median of {args.steps} calls, {args.repeats} paired runs")
    print(f"{'layer':<24}{'step':<9}{'base cpu':>11}{'this cpu':>11}{'ratio cpu (min-max)':>24}"
          f"{'ratio wall (min-max)':>24}")
    table = {}
    worst = 0.0
    for name in runs["head"][0]:
        for step in ("train", "predict"):
            entry = {}
            cells = []
            for clock in ("cpu", "wall"):
                key = step + " cpu" if clock == "cpu" else step
                ratios = sorted(h[name][key] / b[name][key] for b, h in zip(runs["base"], runs["head"]))
                entry[clock] = {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1],
                                "base_s": statistics.median(b[name][key] for b in runs["base"]),
                                "head_s": statistics.median(h[name][key] for h in runs["head"])}
                cells.append(f"{entry[clock]['median']:.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f})")
            worst = max(worst, entry["cpu"]["median"])
            table[f"{name} {step}"] = entry
            print(f"{name:<24}{step:<9}{entry['cpu']['base_s'] * 1e3:>8.2f} ms{entry['cpu']['head_s'] * 1e3:>8.2f} ms"
                  f"{cells[0]:>24}{cells[1]:>24}")
    print(f"largest median ratio (CPU time): {worst:.3f} (goal: at most 1.05)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"base": args.base, "backend": env["KERAS_BACKEND"], "paired": True, "results": table}, f,
                      indent=1)


if __name__ == "__main__":
    main()
