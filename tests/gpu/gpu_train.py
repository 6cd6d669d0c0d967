"""Trains a hinge forest (or a Tree Ensemble Layer) on the default device and on the CPU, and compares test accuracy.

The model of the hinge-forest tutorial on scikit-learn's 8x8 digits (1,797
images, 10 classes, bundled with scikit-learn): ``Dense(64)`` learned
features, ``HingeBatchNormalization``, ``HingeForest(100 trees, depth 6, 10
units, summed)``, Adam 0.005, batch 32, on a stratified 80/20 split with
standardized features. ``--model tel``: ``TreeEnsembleLayer(20 trees, depth
4, 10 units, transition_width 1)`` on the standardized pixels instead (the
conditional forward and backward passes, #32), Adam 0.01. The same seed trains once on ``jax.devices()[0]`` (the
GPU on the lent machine, through the CUDA kernels) and once, at the same
time, in a child process with ``JAX_PLATFORMS=cpu`` (the CPU kernels); both
print their test accuracy, training time (each slowed a little by the other)
and whether the kernels ran.

    KERAS_BACKEND=jax python tests/gpu/gpu_train.py [--model hinge|tel] [--epochs 20] [--min-accuracy 0.9] [--expect-gpu]

Exits non-zero when the default device's accuracy is below ``--min-accuracy``
or the CPU run fails; with ``--expect-gpu`` also when the default device is
not a GPU running the model's kernels.
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


def data(seed=0):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float32), y.astype(np.int32), test_size=0.2, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(x_train)
    return scaler.transform(x_train).astype(np.float32), y_train, scaler.transform(x_test).astype(np.float32), y_test


# The op family each model's layer runs.
FAMILY = {"hinge": "hinge", "tel": "soft_tree"}


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


def train(epochs, seed=0, model_name="hinge"):
    """A dict: device, kernels (custom_ops_available of the model's family), accuracy, seconds."""
    import jax
    import keras
    import numpy as np

    from keras_trees import ops as tree_ops

    try:
        kernels = bool(tree_ops.custom_ops_available(FAMILY[model_name]))
    except TypeError:  # no per-family form yet
        kernels = bool(tree_ops.custom_ops_available())
    x_train, y_train, x_test, y_test = data(seed)
    keras.utils.set_random_seed(seed)
    model, rate = build(model_name, seed, x_train.shape[1])
    model.compile(keras.optimizers.Adam(rate), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = time.perf_counter()
    model.fit(x_train, y_train, epochs=epochs, batch_size=32, verbose=0)
    seconds = time.perf_counter() - start
    accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), axis=1) == y_test))
    device = jax.devices()[0]
    return {"device": str(device), "device_kind": device.device_kind, "platform": device.platform,
            "kernels": kernels, "summary": tree_ops.execution_report()["summary"], "epochs": epochs,
            "accuracy": accuracy, "seconds": seconds}


def start_on_cpu(epochs, seed, model_name):
    """Starts the same training in a fresh process that sees only the CPU (it runs
    while this process trains on the default device); its output goes to a file."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    output = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--epochs", str(epochs), "--seed", str(seed),
                             "--model", model_name, "--child"], env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
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
    parser.add_argument("--expect-gpu", action="store_true",
                        help="also fail unless the default device is a GPU running the model's kernels")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU comparison")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(RESULT + json.dumps(train(args.epochs, args.seed, args.model)))
        return 0
    child = None if args.no_cpu else start_on_cpu(args.epochs, args.seed, args.model)
    here = train(args.epochs, args.seed, args.model)
    results = {"default device": here}
    if child is not None:
        results["cpu (JAX_PLATFORMS=cpu)"] = finish_on_cpu(child)
    described = ("TreeEnsembleLayer(20 trees, depth 4), Adam 0.01" if args.model == "tel" else
                 "Dense(64) + HingeBatchNormalization + HingeForest(100 trees, depth 6), Adam 0.005")
    print(f"digits, {described}, {args.epochs} epochs, batch 32, seed {args.seed}")
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
    if args.expect_gpu and here["platform"] != "gpu":
        problems.append(f"trained on {here['device']}, not a GPU")
    if args.expect_gpu and not here["kernels"]:
        problems.append(f"custom_ops_available({FAMILY[args.model]!r}) is False: the keras.ops path trained, "
                        "not the kernels")
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    if not problems:
        print(f"training: ok (test accuracy {here['accuracy']:.4f} >= {args.min_accuracy})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
