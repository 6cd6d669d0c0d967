"""Tutorial: tuning tree models with Keras Tuner, then inspecting the best one.

1. A Tree Ensemble Layer searched with Bayesian optimization over the paper's
   space (trees, depth, gamma, learning rate, batch size, L2 on node weights)
   on scikit-learn's digits, objective validation accuracy.
2. An end-to-end tree searched with random search (depth, steepness annealing,
   epochs per level, split type); every trial grows its tree greedily inside
   ``fit`` (the HyperModel adds the callbacks).
3. The best tree reloaded from the tuner's directory in a fresh process, its
   statistics, and its diagram.

    python tutorials/tuning/tuning.py [--quick | --smoke] [--out DIR]
"""

import argparse
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # run from a checkout without installing

import keras  # noqa: E402
import keras_tuner as kt  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits, load_wine  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from keras_trees.inspection import export_trees, plot_tree, tree_statistics  # noqa: E402
from keras_trees.tuner import EndToEndTreeHyperModel, TreeEnsembleHyperModel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def splits(x, y, seed=0):
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    x_tr, x_val, y_tr, y_val = train_test_split(x_tr, y_tr, test_size=0.2, random_state=seed, stratify=y_tr)
    mean, std = x_tr.mean(0), x_tr.std(0) + 1e-6
    f = lambda a: ((a - mean) / std).astype("float32")  # noqa: E731
    return f(x_tr), f(x_val), f(x_te), y_tr.astype("int32"), y_val.astype("int32"), y_te.astype("int32")


def trial_scores(tuner):
    trials = sorted(tuner.oracle.trials.values(), key=lambda t: int(t.trial_id))
    return [t.score if t.score is not None else np.nan for t in trials]


def tune_tel(out, quick, smoke=False):
    x_tr, x_val, x_te, y_tr, y_val, y_te = splits(*load_digits(return_X_y=True))
    hypermodel = TreeEnsembleHyperModel(input_shape=(64,), num_classes=10)
    tuner = kt.BayesianOptimization(hypermodel, objective="val_accuracy",
                                    max_trials=1 if smoke else 3 if quick else 15,
                                    num_initial_points=1 if smoke else 2 if quick else 5, seed=0,
                                    directory=out, project_name="tel_digits", overwrite=True)
    tuner.search(x_tr, y_tr, validation_data=(x_val, y_val), epochs=1 if smoke else 3 if quick else 40, verbose=0,
                 callbacks=[keras.callbacks.EarlyStopping("val_accuracy", patience=5)])
    best_hp = tuner.get_best_hyperparameters(1)[0]
    model = tuner.get_best_models(1)[0]
    acc = np.mean(model.predict(x_te, verbose=0).argmax(1) == y_te)
    print("TEL best hyperparameters:", {k: (round(v, 4) if isinstance(v, float) else v)
                                        for k, v in best_hp.values.items()})
    print(f"TEL test accuracy {acc:.3f}")
    return trial_scores(tuner)


def epochs_per_level(quick, smoke=False):
    """The tree search's choices of epochs per level."""
    return (1,) if smoke else (2, 4) if quick else (10, 20)


def tune_tree(out, quick, smoke=False):
    x_tr, x_val, x_te, y_tr, y_val, y_te = splits(*load_wine(return_X_y=True))
    hypermodel = EndToEndTreeHyperModel(input_shape=(13,), num_classes=3, max_depth=4,
                                        epochs_per_level=epochs_per_level(quick, smoke), batch_sizes=(32, 64))
    tuner = kt.RandomSearch(hypermodel, objective="val_accuracy", max_trials=1 if smoke else 2 if quick else 10,
                            seed=0,
                            directory=out, project_name="tree_wine", overwrite=True)
    tuner.search(x_tr, y_tr, validation_data=(x_val, y_val), verbose=0)
    # Trials may tie on a small validation set, and a reloaded oracle may order ties
    # differently: remember the best trial by its id.
    [best_trial] = tuner.oracle.get_best_trials(1)
    model = tuner.load_model(best_trial)
    with open(os.path.join(out, "best_tree_trial_id.txt"), "w") as f:
        f.write(best_trial.trial_id)
    print("tree best hyperparameters:", tuner.get_best_hyperparameters(1)[0].values)
    print(f"tree test accuracy {np.mean(model.predict(x_te, verbose=0).argmax(1) == y_te):.3f}")
    np.save(os.path.join(out, "x_test.npy"), x_te)
    np.save(os.path.join(out, "best_tree_predictions.npy"), model.predict(x_te, verbose=0))
    [stats] = tree_statistics(model, x_te)
    print(f"best tree: depth {stats['depth'][0]}, {stats['leaves'][0]} leaves, "
          f"{stats['split_evaluations']:.2f} split evaluations per sample")
    [doc] = export_trees(model, x_tr, y_tr)
    ax = plot_tree(doc, class_names=["class 0", "class 1", "class 2"])
    path = os.path.join(out, "best_tree.png")
    ax.figure.savefig(path, dpi=90, bbox_inches="tight")
    print(f"wrote {path}")
    return trial_scores(tuner), hypermodel


def reload_in_fresh_process(out, quick, smoke=False):
    levels = epochs_per_level(quick, smoke)
    code = f"""
import numpy as np, keras_tuner as kt
import keras_trees
from keras_trees.tuner import EndToEndTreeHyperModel
hm = EndToEndTreeHyperModel(input_shape=(13,), num_classes=3, max_depth=4, epochs_per_level={levels!r},
                            batch_sizes=(32, 64))
tuner = kt.RandomSearch(hm, objective="val_accuracy", max_trials=1, directory={out!r},
                        project_name="tree_wine", overwrite=False)
trial_id = open({os.path.join(out, "best_tree_trial_id.txt")!r}).read().strip()
model = tuner.load_model(tuner.oracle.get_trial(trial_id))
x = np.load({os.path.join(out, "x_test.npy")!r})
print(np.array_equal(model.predict(x, verbose=0), np.load({os.path.join(out, "best_tree_predictions.npy")!r})))
"""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    print("best tree reloaded from the tuner directory in a fresh process: identical predictions =",
          done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="smoke test (CI): one or two epochs, the smallest settings; its figures mean nothing")
    parser.add_argument("--out", default=os.path.join(HERE, "_out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    keras.utils.set_random_seed(0)
    tel_scores = tune_tel(args.out, args.quick, args.smoke)
    tree_scores, _ = tune_tree(args.out, args.quick, args.smoke)
    reload_in_fresh_process(args.out, args.quick, args.smoke)
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(np.arange(1, len(tel_scores) + 1), tel_scores, "o-", label="TEL, Bayesian optimization (digits)")
    ax.plot(np.arange(1, len(tree_scores) + 1), tree_scores, "s-", label="end-to-end tree, random search (wine)")
    ax.set_xlabel("trial")
    ax.set_ylabel("validation accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(args.out, "trials.png")
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
