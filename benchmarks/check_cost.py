"""What the input checks cost: this checkout against an earlier revision, side by side.

Issue #16 added checks on every path (NaN/Inf in inputs and weights, index
ranges, topologies, dtypes). The goal is that the compiled paths get at most 5%
slower. This script measures that, for the path users run: one compiled
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

    python benchmarks/check_cost.py [--base REV] [--repeats 3] [--steps 50] [--json PATH]
"""

import argparse
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


def cases():
    """(name, make_layer, target kind, setup) of every tree layer, at the
    benchmark sizes of the speed scripts (compiled kernels dominate)."""
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


def child(steps, out_path):
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, DIM)).astype("float32")
    y = rng.integers(0, CLASSES, size=BATCH).astype("int32")
    results = {}
    for name, make, kind in cases():
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
        for _ in range(3):  # trace and warm up
            model.train_on_batch(x, y)
            model.predict_on_batch(x)
        times = {}
        for step, fn in (("train", lambda: model.train_on_batch(x, y)), ("predict", lambda: model.predict_on_batch(x))):
            samples = []
            for _ in range(steps):
                start = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - start)
            times[step] = statistics.median(samples)
        results[name] = times
    with open(out_path, "w") as f:
        json.dump(results, f)


def run_child(tree, steps, env):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(env, PYTHONPATH=tree)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", out, "--steps", str(steps)],
                          cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"the timing run in {tree} failed:\n{proc.stderr[-3000:]}")
    with open(out) as f:
        data = json.load(f)
    os.unlink(out)
    return data


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="f907a53", help="revision without the checks (default: f907a53)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per tree (default 3)")
    parser.add_argument("--steps", type=int, default=50, help="timed calls per step kind (default 50)")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.child)
        return
    env = dict(os.environ)
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    base_tree = tempfile.mkdtemp(prefix="keras-trees-base-")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", base_tree, args.base], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The benchmark itself comes from this checkout; the library from each tree.
        runs = {"base": [], "head": []}
        for r in range(args.repeats):
            for which, tree in (("base", base_tree), ("head", ROOT)):
                runs[which].append(run_child(tree, args.steps, env))
                print(f"  run {r + 1}/{args.repeats} {which} done", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base_tree], check=False)
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


if __name__ == "__main__":
    main()
