"""Trains a tree model on the default device and on the CPU, and compares test accuracy.

The model of the hinge-forest tutorial on scikit-learn's 8x8 digits (1,797
images, 10 classes, bundled with scikit-learn): ``Dense(64)`` learned
features, ``HingeBatchNormalization``, ``HingeForest(100 trees, depth 6, 10
units, summed)``, Adam 0.005, batch 32, on a stratified 80/20 split with
standardized features. ``--model tel``: ``TreeEnsembleLayer(20 trees, depth
4, 10 units, transition_width 1)`` on the standardized pixels instead (the
conditional forward and backward passes), Adam 0.01. The probabilistic
trees, each on the standardized pixels (``--epochs`` is their epoch
count as described; ``--smoke``: tiny sizes, for CI):

- ``--model e2e``: ``EndToEndForest(10 trees, depth <= 4, 8 features per
  split)`` grown by ``GreedyLevelGrowth(epochs per level = --epochs,
  finetune_epochs = --epochs)`` with ``EMLeafUpdate`` and
  ``SteepnessAnnealing(0.1)``, Adam 0.01, batch 128 (pruned routing: forward,
  backward, the fused EM E-step);
- ``--model polytope``: ``ConvexPolytopeTree(depth 3, 4 experts)`` via
  ``fit_greedy(epochs = --epochs per level, batch 128, learning rate 0.05)``
  (pruned routing with noisy-OR splits);
- ``--model nongreedy``: ``NonGreedyTree(depth 6, nu 1)`` initialized from a
  scikit-learn CART tree of depth 6, then ``--epochs`` epochs of SGD 0.05
  with momentum 0.9, batch 64 (loss-augmented inference, fast).

The same seed trains once on ``jax.devices()[0]`` (the GPU on the lent
machine, through the CUDA kernels) and once, at the same time, in a child
process with ``JAX_PLATFORMS=cpu`` (the CPU kernels); both print their test
accuracy, training time (each slowed a little by the other) and whether the
kernels ran.

    KERAS_BACKEND=jax python tests/gpu/gpu_train.py [--model hinge|tel|e2e|polytope|nongreedy] [--epochs 20]
        [--min-accuracy 0.9] [--max-gap 0.03] [--smoke] [--expect-gpu]

Exits non-zero when the default device's accuracy is below ``--min-accuracy``,
when it is more than ``--max-gap`` below the CPU run's, or the CPU run fails;
with ``--expect-gpu`` also when the default device is not a GPU running the
model's kernels.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

RESULT = "RESULT "


def data(seed=0, smoke=False):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    if smoke:  # CI: 400 rows (still every class)
        x, y = x[:400], y[:400]
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float32), y.astype(np.int32), test_size=0.2, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(x_train)
    return scaler.transform(x_train).astype(np.float32), y_train, scaler.transform(x_test).astype(np.float32), y_test


# The op family each model's layer runs.
FAMILY = {"hinge": "hinge", "tel": "soft_tree", "e2e": "pruned_routing", "polytope": "pruned_routing",
          "nongreedy": "loss_augmented"}

# What each model is (with --smoke the sizes are tiny: see sizes()).
DESCRIBED = {
    "hinge": "Dense(64) + HingeBatchNormalization + HingeForest(100 trees, depth 6), Adam 0.005, batch 32",
    "tel": "TreeEnsembleLayer(20 trees, depth 4), Adam 0.01, batch 32",
    "e2e": ("EndToEndForest({trees} trees, depth <= {depth}, 8 features/split) grown by GreedyLevelGrowth "
            "({epochs} epochs/level + {epochs} finetune) with EMLeafUpdate, SteepnessAnnealing(0.1), Adam 0.01, "
            "batch 128"),
    "polytope": "ConvexPolytopeTree(depth {depth}, {experts} experts).fit_greedy({epochs} epochs/level, batch 128, "
                "learning rate 0.05)",
    "nongreedy": "NonGreedyTree(depth {depth}, nu 1) from CART, SGD 0.05 momentum 0.9, batch 64",
}


def sizes(model_name, smoke):
    """The model's size: tiny with ``smoke`` (CI), else the check's."""
    return {"e2e": {"trees": 2, "depth": 2} if smoke else {"trees": 10, "depth": 4},
            "polytope": {"depth": 1, "experts": 2} if smoke else {"depth": 3, "experts": 4},
            "nongreedy": {"depth": 2} if smoke else {"depth": 6}}.get(model_name, {})


def build(model, seed, features):
    import keras

    from keras_trees.layers import HingeBatchNormalization, HingeForest, TreeEnsembleLayer

    if model == "tel":
        return keras.Sequential([
            keras.Input((features,)),
            TreeEnsembleLayer(num_trees=20, max_depth=4, units=10, transition_width=1.0),
        ]), 0.01
    return keras.Sequential([
        keras.Input((features,)),
        keras.layers.Dense(64, use_bias=False),
        HingeBatchNormalization(),
        HingeForest(num_trees=100, max_depth=6, units=10, reduction="sum", seed=seed),
    ]), 0.005


def fit(model_name, x, y, epochs, seed, smoke=False):
    """Trains the model on (x, y); returns a function of inputs giving class scores (NumPy)."""
    import keras
    import numpy as np

    size = sizes(model_name, smoke)
    classes = int(np.max(y)) + 1
    if model_name in ("hinge", "tel"):
        model, rate = build(model_name, seed, x.shape[1])
        model.compile(keras.optimizers.Adam(rate), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, epochs=epochs, batch_size=32, verbose=0)
        return lambda v: model.predict(v, verbose=0)
    if model_name == "e2e":
        from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
        from keras_trees.layers import EndToEndForest

        forest = EndToEndForest(size["trees"], max_depth=size["depth"], num_classes=classes, features_per_split=8,
                                seed=seed)
        model = keras.Sequential([keras.Input((x.shape[1],)), forest])
        model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
        growth = GreedyLevelGrowth(x, y, epochs_per_level=epochs, finetune_epochs=epochs)
        model.fit(x, y, batch_size=128, epochs=growth.max_epochs(size["depth"]), verbose=0,
                  callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(0.1)])
        return lambda v: model.predict(v, batch_size=len(v), verbose=0)
    if model_name == "polytope":
        from keras_trees.layers import ConvexPolytopeTree

        tree = ConvexPolytopeTree(max_depth=size["depth"], num_experts=size["experts"], num_classes=classes, seed=seed)
        tree.fit_greedy(x, y, epochs=epochs, batch_size=128, learning_rate=0.05, verbose=0)
        return lambda v: keras.ops.convert_to_numpy(tree(v, training=False))
    if model_name == "nongreedy":
        from sklearn.tree import DecisionTreeClassifier

        from keras_trees.interop.sklearn import from_sklearn
        from keras_trees.layers import NonGreedyTree

        cart = DecisionTreeClassifier(max_depth=size["depth"], random_state=seed).fit(x, y)
        model = NonGreedyTree(max_depth=size["depth"], num_classes=classes, nu=1.0, seed=seed)
        model.initialize_from(from_sklearn(cart), x=x, y=y)
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9))
        model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
        return lambda v: model.predict(v, batch_size=len(v), verbose=0)
    raise ValueError(f"unknown model {model_name!r}")


def train(epochs, seed=0, model_name="hinge", smoke=False):
    """A dict: device, kernels (custom_ops_available of the model's family), accuracy, seconds."""
    import jax
    import keras
    import numpy as np

    from keras_trees import ops as tree_ops

    try:
        kernels = bool(tree_ops.custom_ops_available(FAMILY[model_name]))
    except TypeError:  # no per-family form yet
        kernels = bool(tree_ops.custom_ops_available())
    x_train, y_train, x_test, y_test = data(seed, smoke)
    keras.utils.set_random_seed(seed)
    start = time.perf_counter()
    predict = fit(model_name, x_train, y_train, epochs, seed, smoke)
    seconds = time.perf_counter() - start
    accuracy = float(np.mean(np.argmax(np.asarray(predict(x_test)), axis=1) == y_test))
    device = jax.devices()[0]
    return {"device": str(device), "device_kind": device.device_kind, "platform": device.platform,
            "kernels": kernels, "summary": tree_ops.execution_report()["summary"], "epochs": epochs,
            "accuracy": accuracy, "seconds": seconds}


def start_on_cpu(epochs, seed, model_name, smoke=False):
    """Starts the same training in a fresh process that sees only the CPU (it runs
    while this process trains on the default device); its output goes to a file."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    output = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--epochs", str(epochs), "--seed", str(seed),
                             "--model", model_name, "--child"] + (["--smoke"] if smoke else []),
                            env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
    return proc, output


def finish_on_cpu(child):
    proc, output = child
    proc.wait()
    output.seek(0)
    text = output.read()
    lines = [line for line in text.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        print(text[-6000:], file=sys.stderr)
        return None
    return json.loads(lines[-1][len(RESULT):])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(FAMILY), default="hinge")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    parser.add_argument("--max-gap", type=float, default=0.03,
                        help="fail when the default device's test accuracy is more than this below the CPU run's")
    parser.add_argument("--smoke", action="store_true", help="tiny data and models (CI: the code path only)")
    parser.add_argument("--expect-gpu", action="store_true",
                        help="also fail unless the default device is a GPU running the model's kernels")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU comparison")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(RESULT + json.dumps(train(args.epochs, args.seed, args.model, args.smoke)))
        return 0
    child = None if args.no_cpu else start_on_cpu(args.epochs, args.seed, args.model, args.smoke)
    here = train(args.epochs, args.seed, args.model, args.smoke)
    results = {"default device": here}
    if child is not None:
        results["cpu (JAX_PLATFORMS=cpu)"] = finish_on_cpu(child)
    described = DESCRIBED[args.model].format(epochs=args.epochs, **sizes(args.model, args.smoke))
    print(f"digits{' (smoke: 400 rows)' if args.smoke else ''}, {described}, "
          f"{args.epochs} epochs, seed {args.seed}")
    print(f"{'run':<24} {'device':<28} {'kernels':>7} {'test accuracy':>13} {'fit s':>7}")
    for name, r in results.items():
        if r is None:
            print(f"{name:<24} FAILED (output above)")
            continue
        print(f"{name:<24} {r['device_kind'] + ' ' + r['device']:<28} {str(r['kernels']):>7} "
              f"{r['accuracy']:>13.4f} {r['seconds']:>7.1f}")
    problems = []
    if here["accuracy"] < args.min_accuracy:
        problems.append(f"test accuracy {here['accuracy']:.4f} on {here['device']} < {args.min_accuracy}")
    if any(r is None for r in results.values()):
        problems.append("the CPU run failed")
    cpu = results.get("cpu (JAX_PLATFORMS=cpu)")
    if cpu is not None and here["accuracy"] < cpu["accuracy"] - args.max_gap - 1e-9:  # (rounding of the gap)
        problems.append(f"test accuracy {here['accuracy']:.4f} on {here['device']} is more than {args.max_gap} "
                        f"below the CPU run's {cpu['accuracy']:.4f}")
    if args.expect_gpu and here["platform"] != "gpu":
        problems.append(f"trained on {here['device']}, not a GPU")
    if args.expect_gpu and not here["kernels"]:
        problems.append(f"custom_ops_available({FAMILY[args.model]!r}) is False: the keras.ops path trained, "
                        "not the kernels")
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    if not problems:
        gap = "" if cpu is None else f", CPU {cpu['accuracy']:.4f}, gap allowed {args.max_gap}"
        print(f"training: {args.model} ok (test accuracy {here['accuracy']:.4f} >= {args.min_accuracy}{gap})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
