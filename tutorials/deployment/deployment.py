"""Tutorial: deploying keras-trees models.

Trains two small models on scikit-learn's breast-cancer data (a Tree Ensemble
Layer as a hidden layer, and an end-to-end tree grown greedily), joins them in
one Functional model that averages their class probabilities, then ships it
four ways and reloads every artefact in a *fresh Python process*, checking the
predictions:

1. ``model.save("model.keras")`` -> ``keras.saving.load_model`` (after ``import keras_trees``);
2. ``model.export("savedmodel")`` -> ``tf.saved_model.load`` (after ``import keras_trees``,
   which registers the custom ops);
3. ``keras_trees.export_portable(model, "portable")`` -> ``tf.saved_model.load`` in a
   process that never imports keras_trees (stock TensorFlow ops only);
4. ``keras_trees.inspection.to_json`` -> the grown tree evaluated with NumPy alone.

    python tutorials/deployment/deployment.py [--quick | --smoke] [--out DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # run from a checkout without installing

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import keras_trees  # noqa: E402
from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing  # noqa: E402
from keras_trees.inspection import export_trees, predict_exported  # noqa: E402
from keras_trees.layers import EndToEndTree, TreeEnsembleLayer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def fresh_process(code, env=None):
    """Runs ``code`` in a new interpreter and returns its stdout."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return done.stdout.strip().splitlines()[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one or two epochs, the smallest settings; its figures mean nothing")
    parser.add_argument("--out", default=os.path.join(HERE, "_out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    keras.utils.set_random_seed(0)

    x, y = load_breast_cancer(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    mean, std = x_tr.mean(0), x_tr.std(0)
    x_tr, x_te = ((x_tr - mean) / std).astype("float32"), ((x_te - mean) / std).astype("float32")
    y_tr, y_te = y_tr.astype("int32"), y_te.astype("int32")

    # --- a model with two families -------------------------------------------------
    # A TEL as a hidden layer (Dense -> TEL -> Dense gives class logits) ...
    tel_model = keras.Sequential([
        keras.Input((30,)),
        keras.layers.Dense(16, activation="relu"),
        TreeEnsembleLayer(num_trees=8, max_depth=3, units=8),
        keras.layers.Dense(2),
    ], name="tel_classifier")
    tel_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tel_model.fit(x_tr, y_tr, epochs=1 if args.smoke else 5 if args.quick else 30, batch_size=64, verbose=0)
    # ... and an end-to-end tree grown greedily, deterministic at inference.
    tree = EndToEndTree(max_depth=3, num_classes=2, seed=0)
    tree_model = keras.Sequential([keras.Input((30,)), tree], name="tree_classifier")
    tree_model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy())
    growth = GreedyLevelGrowth(x_tr, y_tr, epochs_per_level=1 if args.smoke else 3 if args.quick else 15)
    tree_model.fit(x_tr, y_tr, batch_size=100, epochs=growth.max_epochs(3), verbose=0,
                   callbacks=[growth, EMLeafUpdate(x_tr, y_tr), SteepnessAnnealing(0.1)])
    # Both in one Functional model: averaged class probabilities.
    inputs = keras.Input((30,))
    probs = keras.layers.Average()([keras.layers.Softmax()(tel_model(inputs)), tree_model(inputs)])
    model = keras.Model(inputs, probs, name="deployed")
    reference = model.predict(x_te, verbose=0)
    print(f"test accuracy: TEL {np.mean(tel_model.predict(x_te, verbose=0).argmax(1) == y_te):.3f}, "
          f"tree {np.mean(tree_model.predict(x_te, verbose=0).argmax(1) == y_te):.3f} "
          f"({tree.num_leaves()} leaves), both {np.mean(reference.argmax(1) == y_te):.3f}")
    data = os.path.join(args.out, "x_test.npy")
    np.save(data, x_te)
    np.save(os.path.join(args.out, "reference.npy"), reference)
    check = (f"import numpy as np; x = np.load({data!r}); "
             f"ref = np.load({os.path.join(args.out, 'reference.npy')!r}); ")

    # --- 1. .keras -----------------------------------------------------------------
    path = os.path.join(args.out, "model.keras")
    model.save(path)
    print("1. .keras file, reloaded in a fresh process: identical predictions =", fresh_process(
        check + "import keras, keras_trees; "
        f"m = keras.saving.load_model({path!r}); "
        "print(np.array_equal(m.predict(x, verbose=0), ref))"))

    # --- 2. SavedModel with the custom ops -----------------------------------------
    path = os.path.join(args.out, "savedmodel")
    model.export(path, verbose=False)
    print("2. SavedModel (custom ops), fresh process: max |difference| =", fresh_process(
        check + "import tensorflow as tf, keras_trees; "  # keras_trees registers the ops
        f"m = tf.saved_model.load({path!r}); "
        "print(float(np.abs(m.serve(x).numpy() - ref).max()))"))

    # --- 3. portable SavedModel (stock TensorFlow only) ----------------------------
    path = os.path.join(args.out, "portable")
    keras_trees.export_portable(model, path, verbose=False)
    print("3. portable SavedModel, fresh process without keras_trees: max |difference| =", fresh_process(
        check + "import sys, tensorflow as tf; "
        f"m = tf.saved_model.load({path!r}); "
        "assert 'keras_trees' not in sys.modules; "
        "print(float(np.abs(m.serve(x).numpy() - ref).max()))"))

    # --- 4. the grown tree as JSON, evaluated with NumPy ---------------------------
    [doc] = export_trees(tree_model, x_tr, y_tr)
    path = os.path.join(args.out, "tree.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    start = time.perf_counter()
    numpy_probs = predict_exported(json.load(open(path)), x_te)
    same = np.allclose(numpy_probs, tree_model.predict(x_te, verbose=0), atol=1e-6)
    print(f"4. tree.json ({os.path.getsize(path) / 1024:.0f} KiB, {doc['trees'][0]['num_leaves']} leaves) "
          f"evaluated with NumPy in {1e3 * (time.perf_counter() - start):.1f} ms: "
          f"identical predictions = {same}")


if __name__ == "__main__":
    main()
