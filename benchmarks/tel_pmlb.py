"""Tree Ensemble Layer vs. XGBoost vs. CART on the nine PMLB sets (paper Table 3).

Hazimeh et al. (ICML 2020), Section 4.2: a standalone Tree Ensemble Layer
(``Input -> BatchNormalization -> TreeEnsembleLayer``, Adam, cross-entropy on
logits) tuned over the number of trees, depth, transition width (the paper's gamma), learning rate, L2 on the
split weights and batch size, against gradient boosting (xgboost) and a CART
tree, side by side on the same splits (see shared/benchmarks.md for the data
and protocol: stratified 80/20 train/test per seed, 20% of train held out for
validation, features standardized with train statistics).

Per data set and seed:

* TEL: a Keras Tuner search (Bayesian optimization after random initial
  points, or pure random search) on the train part, maximizing validation AUC
  (computed each epoch with sklearn, the same AUC as the test figure); every
  trial trains with early stopping on validation AUC, and the tuner keeps each
  trial's best-epoch weights. The best trial's model (trained on the train part,
  weights from its best validation epoch) is evaluated on test, with the mean
  number of reachable leaves per sample and tree on the test set (conditional
  computation: 1.0 means a single root-to-leaf path).
* XGBoost: a random search over max_depth, learning_rate and reg_lambda, the
  number of trees set by early stopping on validation (up to 500 rounds),
  configuration chosen by validation AUC.
* CART: scikit-learn DecisionTreeClassifier, depth 1-20 chosen by validation AUC.

Search space (paper Appendix D.1 ranges, narrowed where a small trial budget
would waste trials on settings that cannot train in the epoch budget):

* num_trees: integer in [1, 100], log-uniform (paper: uniform in [1, 100])
* depth: integer in [2, 8] (paper: same)
* gamma (hyperparameter of TreeEnsembleHyperModel; the layer's transition_width): log-uniform in [1e-2, 1] (paper: [1e-4, 1])
* learning rate: log-uniform in [1e-3, 1e-1] (paper: {1e-1, ..., 1e-5})
* L2 on node weights: 0 with probability 1/2, else log-uniform in [1e-6, 1e-1]
  (paper: the same mixture over [1e-8, 1e2])
* batch size: {32, 64, 128, 256} (paper: {32, ..., 512})
* epochs: early stopping, at most --epochs (paper: tuned in [5, 100])

(Keras Tuner 1.4's Bayesian optimizer searches integer hyperparameters in a
[0, 1] box and maps the upper edge 1.0 to max + 1, so it can propose 101 trees
or depth 9; random search stays within the ranges.)

Usage:

    python benchmarks/tel_pmlb.py --quick
    python benchmarks/tel_pmlb.py --smoke   # CI: 600 rows of wisconsin, seed 0, one trial of one epoch
    python benchmarks/tel_pmlb.py [--sets crx,pima] [--seeds 0,1,2] [--trials 10]
                                  [--epochs 100] [--json results/tel_pmlb.json]
"""

import math
import shutil
import tempfile
import time
import warnings

import _data  # noqa: F401  (sets up sys.path and TF logging)
import numpy as np

# Test AUC of the standalone TEL in the paper's Table 3 (pima = PMLB "pima";
# wisconsin = "breast-cancer-wisconsin").
PAPER_TEL = {
    "crx": 0.911, "optdigits": 1.0, "pima": 0.831, "satimage": 0.990,
    "spambase": 0.986, "texture": 1.0, "twonorm": 0.998, "vehicle": 0.953,
    "wisconsin": 0.995,
}

QUICK_SETS = ("pima", "vehicle", "wisconsin")
SMOKE_SETS = ("wisconsin",)

SEARCH_SPACE = {
    "num_trees": "int [1, 100] log",
    "depth": "int [2, 8]",
    "gamma": "float [1e-2, 1] log",
    "learning_rate": "float [1e-3, 1e-1] log",
    "node_l2": "0 (p=0.5) or float [1e-6, 1e-1] log",
    "batch_size": "{32, 64, 128, 256}",
}


def accuracy(y_true, scores):
    return float(np.mean(np.argmax(np.asarray(scores), axis=1) == y_true))


# --------------------------------------------------------------------------- TEL


def make_hypermodel(input_dim, num_classes):
    """The library's TEL search space (keras_trees.tuner), recording each trial's history."""
    from keras_trees.tuner import TreeEnsembleHyperModel

    class RecordingHyperModel(TreeEnsembleHyperModel):
        def __init__(self):
            super().__init__((input_dim,), num_classes=num_classes, batch_sizes=(32, 64, 128, 256))
            self.histories = []  # (hyperparameter values, History.history) per trial

        def fit(self, hp, model, *args, **kwargs):
            history = super().fit(hp, model, *args, **kwargs)
            self.histories.append((dict(hp.values), history.history))
            return history

    return RecordingHyperModel()


def make_val_auc_callback(x_val, y_val, num_classes):
    import keras

    class ValidationAUC(keras.callbacks.Callback):
        """Adds ``val_auc`` (sklearn, as reported on test) to the epoch logs."""

        def on_epoch_end(self, epoch, logs=None):
            if logs is None:
                return
            scores = keras.ops.convert_to_numpy(self.model(x_val, training=False))
            if not np.all(np.isfinite(scores)):
                logs["val_auc"] = 0.0
                return
            logs["val_auc"] = _data.auc(y_val, scores, num_classes)

    return ValidationAUC()


def run_tel(split, seed, args, workdir, project):
    import keras
    import keras_tuner as kt

    keras.utils.set_random_seed(seed)
    hypermodel = make_hypermodel(split.x_train.shape[1], split.num_classes)
    objective = kt.Objective("val_auc", direction="max")
    common = dict(objective=objective, max_trials=args.trials, seed=seed,
                  directory=workdir, project_name=project, overwrite=True)
    if args.tuner == "bayes":
        tuner = kt.BayesianOptimization(
            hypermodel, num_initial_points=max(1, math.ceil(args.trials / 2)), **common)
    else:
        tuner = kt.RandomSearch(hypermodel, **common)
    callbacks = [
        make_val_auc_callback(split.x_val, split.y_val, split.num_classes),
        keras.callbacks.EarlyStopping("val_auc", mode="max", patience=args.patience),
        keras.callbacks.TerminateOnNaN(),
    ]
    start = time.perf_counter()
    tuner.search(split.x_train, split.y_train, epochs=args.epochs,
                 validation_data=(split.x_val, split.y_val),
                 callbacks=callbacks, verbose=0)
    search_s = time.perf_counter() - start

    best_trial = tuner.oracle.get_best_trials(1)[0]
    hp = best_trial.hyperparameters
    model = tuner.get_best_models(1)[0]
    batchnorm, tel = model.layers[0], model.layers[1]
    test_scores = keras.ops.convert_to_numpy(model(split.x_test, training=False))
    val_scores = keras.ops.convert_to_numpy(model(split.x_val, training=False))
    leaves = tel.mean_reachable_leaves(batchnorm(split.x_test, training=False))
    trials = list(tuner.oracle.trials.values())
    epochs_run = [len(h.get("loss", [])) for _, h in hypermodel.histories]
    best_epoch = None
    for values, history in hypermodel.histories:
        if values == hp.values and history.get("val_auc"):
            best_epoch = int(np.argmax(history["val_auc"]))
    result = {
        "test_auc": _data.auc(split.y_test, test_scores, split.num_classes),
        "test_accuracy": accuracy(split.y_test, test_scores),
        "val_auc": _data.auc(split.y_val, val_scores, split.num_classes),
        "num_trees": int(hp.get("num_trees")),
        "depth": int(hp.get("depth")),
        "gamma": float(hp.get("gamma")),
        "learning_rate": float(hp.get("learning_rate")),
        "node_l2": float(hp.get("node_l2")) if hp.get("use_node_l2") else 0.0,
        "batch_size": int(hp.get("batch_size")),
        "best_epoch": None if best_epoch is None else int(best_epoch) + 1,
        "mean_reachable_leaves": float(leaves),
        "num_leaves": 2 ** int(hp.get("depth")),
        "num_params": int(model.count_params()),
        "trials": len(trials),
        "mean_epochs_per_trial": float(np.mean(epochs_run)) if epochs_run else 0.0,
        "search_seconds": search_s,
    }
    keras.backend.clear_session()
    return result


# ------------------------------------------------------------------------ XGBoost


def run_xgboost(split, seed, args):
    import xgboost as xgb

    rng = np.random.default_rng(1000 + seed)
    binary = split.num_classes == 2
    best = None
    start = time.perf_counter()
    for _ in range(args.xgb_trials):
        params = {
            "max_depth": int(rng.integers(2, 11)),
            "learning_rate": float(10 ** rng.uniform(-2, math.log10(0.3))),
            "reg_lambda": 0.0 if rng.random() < 0.5 else float(10 ** rng.uniform(-3, 1)),
        }
        model = xgb.XGBClassifier(
            n_estimators=args.xgb_rounds, early_stopping_rounds=30,
            objective="binary:logistic" if binary else "multi:softprob",
            eval_metric="logloss" if binary else "mlogloss",
            tree_method="hist", n_jobs=1, random_state=seed, verbosity=0, **params,
        )
        model.fit(split.x_train, split.y_train,
                  eval_set=[(split.x_val, split.y_val)], verbose=False)
        val_auc = _data.auc(split.y_val, np.log(np.clip(model.predict_proba(split.x_val), 1e-12, 1)),
                            split.num_classes)
        if best is None or val_auc > best[0]:
            best = (val_auc, params, model)
    val_auc, params, model = best
    probs = model.predict_proba(split.x_test)
    rounds = int(model.best_iteration) + 1
    return {
        "test_auc": _data.auc(split.y_test, np.log(np.clip(probs, 1e-12, 1)), split.num_classes),
        "test_accuracy": accuracy(split.y_test, probs),
        "val_auc": val_auc,
        "n_estimators": rounds,
        # xgboost grows one tree per class and round for multiclass problems
        "num_trees": rounds * (1 if binary else split.num_classes),
        **params,
        "search_seconds": time.perf_counter() - start,
    }


# --------------------------------------------------------------------------- CART


def run_cart(split, seed):
    from sklearn.tree import DecisionTreeClassifier

    best = None
    start = time.perf_counter()
    for depth in range(1, 21):
        model = DecisionTreeClassifier(max_depth=depth, random_state=seed)
        model.fit(split.x_train, split.y_train)
        val_auc = _data.auc(split.y_val, np.log(np.clip(model.predict_proba(split.x_val), 1e-12, 1)),
                            split.num_classes)
        if best is None or val_auc > best[0]:
            best = (val_auc, depth, model)
        if model.get_depth() < depth:  # the tree stopped growing: deeper is the same
            break
    val_auc, depth, model = best
    probs = model.predict_proba(split.x_test)
    return {
        "test_auc": _data.auc(split.y_test, np.log(np.clip(probs, 1e-12, 1)), split.num_classes),
        "test_accuracy": accuracy(split.y_test, probs),
        "val_auc": val_auc,
        "max_depth": depth,
        "num_leaves": int(model.get_n_leaves()),
        "search_seconds": time.perf_counter() - start,
    }


# ------------------------------------------------------------------------ reports


def summarize(name, runs):
    summary = {"paper_tel_auc": PAPER_TEL.get(name)}
    for model in ("tel", "xgboost", "cart"):
        mean, std = _data.mean_std([r[model]["test_auc"] for r in runs])
        summary[model] = {"test_auc_mean": mean, "test_auc_std": std}
        summary[model]["test_accuracy_mean"] = _data.mean_std(
            [r[model]["test_accuracy"] for r in runs])[0]
    tel = [r["tel"] for r in runs]
    summary["tel"]["trees_depth"] = [f"{t['num_trees']}/{t['depth']}" for t in tel]
    summary["tel"]["mean_reachable_leaves"] = _data.mean_std(
        [t["mean_reachable_leaves"] for t in tel])[0]
    summary["xgboost"]["num_trees"] = [r["xgboost"]["num_trees"] for r in runs]
    summary["cart"]["max_depth"] = [r["cart"]["max_depth"] for r in runs]
    return summary


def fmt(mean, std):
    return f"{mean:.3f} ± {std:.3f}"


def print_table(summaries):
    header = (f"{'data set':<10} {'TEL':>14} {'XGBoost':>14} {'CART':>14} {'paper TEL':>9}"
              f"  {'TEL trees/depth':<22} {'leaves':>6}  {'XGB trees':<16} {'CART depth':<10}")
    print(header)
    print("-" * len(header))
    for name, s in summaries.items():
        paper = s["paper_tel_auc"]
        print(f"{name:<10} {fmt(s['tel']['test_auc_mean'], s['tel']['test_auc_std']):>14} "
              f"{fmt(s['xgboost']['test_auc_mean'], s['xgboost']['test_auc_std']):>14} "
              f"{fmt(s['cart']['test_auc_mean'], s['cart']['test_auc_std']):>14} "
              f"{paper if paper is not None else float('nan'):>9.3f}  "
              f"{', '.join(s['tel']['trees_depth']):<22} {s['tel']['mean_reachable_leaves']:>6.2f}  "
              f"{','.join(map(str, s['xgboost']['num_trees'])):<16} "
              f"{','.join(map(str, s['cart']['max_depth'])):<10}")
    print("-" * len(header))
    averages = {m: float(np.mean([s[m]["test_auc_mean"] for s in summaries.values()]))
                for m in ("tel", "xgboost", "cart")}
    averages["paper_tel"] = float(np.mean([s["paper_tel_auc"] for s in summaries.values()]))
    averages["tel_mean_reachable_leaves"] = float(
        np.mean([s["tel"]["mean_reachable_leaves"] for s in summaries.values()]))
    print(f"{'average':<10} {averages['tel']:>14.4f} {averages['xgboost']:>14.4f} "
          f"{averages['cart']:>14.4f} {averages['paper_tel']:>9.4f}  {'':<22} "
          f"{averages['tel_mean_reachable_leaves']:>6.2f}")
    print("AUC: mean ± std over seeds (binary ROC AUC, multiclass macro one-vs-rest). "
          "trees/depth, XGB trees (rounds x classes) and CART depth: chosen per seed; "
          "leaves: TEL mean reachable leaves per test sample and tree.")
    return averages


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--sets", help="comma-separated subset of " + ",".join(_data.PMLB_SETS)
                        + " (quick: " + ",".join(QUICK_SETS) + ")")
    parser.add_argument("--seeds", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--trials", type=int, help="Keras Tuner trials per set and seed "
                        "(default 10; quick: 4)")
    parser.add_argument("--epochs", type=int, help="max epochs per trial (default 100; quick: 30)")
    parser.add_argument("--patience", type=int, help="early-stopping patience in epochs "
                        "(default 10; quick: 5)")
    parser.add_argument("--tuner", choices=("bayes", "random"), default="bayes")
    parser.add_argument("--xgb-trials", type=int, help="XGBoost configurations per set and seed "
                        "(default 12; quick: 4)")
    parser.add_argument("--xgb-rounds", type=int, default=500, help="max boosting rounds")
    args = parser.parse_args()

    # Loading a tuner checkpoint into a fresh (uncompiled) model skips the Adam
    # slots, and the tuner's Gaussian process warns on short-length-scale fits.
    warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
    warnings.filterwarnings("ignore", module="sklearn.gaussian_process")

    quick = args.quick
    sets = args.sets.split(",") if args.sets else list(SMOKE_SETS if args.smoke else QUICK_SETS if quick
                                                       else _data.PMLB_SETS)
    unknown = [s for s in sets if s not in _data.PMLB_SETS]
    if unknown:
        parser.error(f"unknown sets {unknown}; choose from {list(_data.PMLB_SETS)}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else ([0] if args.smoke else list(_data.SEEDS))
    smoke = args.smoke
    args.trials = args.trials or (1 if smoke else 4 if quick else 10)
    args.epochs = args.epochs or (1 if smoke else 30 if quick else 100)
    args.patience = args.patience or (1 if smoke else 5 if quick else 10)
    args.xgb_trials = args.xgb_trials or (1 if smoke else 4 if quick else 12)
    if smoke:
        args.xgb_rounds = min(args.xgb_rounds, 10)

    import keras

    import keras_trees
    from keras_trees.ops import _library

    print(f"keras {keras.__version__}, keras-trees {keras_trees.__version__}, "
          f"custom ops loaded: {_library.load()}")
    print(f"sets {sets}, seeds {seeds}, TEL: {args.trials} {args.tuner} trials, <= {args.epochs} "
          f"epochs, patience {args.patience}; XGBoost: {args.xgb_trials} configs, "
          f"<= {args.xgb_rounds} rounds; CART: depth 1-20", flush=True)

    workdir = tempfile.mkdtemp(prefix="tel_pmlb_tuner_")
    results, summaries = {}, {}
    total_start = time.perf_counter()
    try:
        for name in sets:
            runs = []
            for seed, split in _data.splits(name, seeds, rows=_data.smoke_rows(args)):
                tel = run_tel(split, seed, args, workdir, f"{name}_{seed}")
                xgb_result = run_xgboost(split, seed, args)
                cart = run_cart(split, seed)
                runs.append({"seed": seed, "n_train": len(split.y_train), "n_val": len(split.y_val),
                             "n_test": len(split.y_test), "num_features": split.x_train.shape[1],
                             "num_classes": split.num_classes,
                             "tel": tel, "xgboost": xgb_result, "cart": cart})
                print(f"{name:<10} seed {seed}: TEL {tel['test_auc']:.4f} "
                      f"({tel['num_trees']} trees, depth {tel['depth']}, gamma {tel['gamma']:.3g}, "
                      f"lr {tel['learning_rate']:.2g}, l2 {tel['node_l2']:.2g}, "
                      f"batch {tel['batch_size']}, leaves {tel['mean_reachable_leaves']:.2f}, "
                      f"{tel['search_seconds']:.0f}s)  XGB {xgb_result['test_auc']:.4f} "
                      f"({xgb_result['n_estimators']} rounds, depth {xgb_result['max_depth']}, "
                      f"{xgb_result['search_seconds']:.0f}s)  CART {cart['test_auc']:.4f} "
                      f"(depth {cart['max_depth']})  [{time.perf_counter() - total_start:.0f}s]",
                      flush=True)
            results[name] = runs
            summaries[name] = summarize(name, runs)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    total_s = time.perf_counter() - total_start
    print()
    averages = print_table(summaries)
    print(f"total {total_s:.0f}s")
    _data.write_json(args.json, {
        "benchmark": "tel_pmlb",
        "quick": quick,
        "smoke": args.smoke,
        "sets": sets,
        "seeds": seeds,
        "settings": {"tel_trials": args.trials, "tuner": args.tuner, "max_epochs": args.epochs,
                     "patience": args.patience, "tel_search_space": SEARCH_SPACE,
                     "tuner_objective": "val_auc (max)", "xgb_trials": args.xgb_trials,
                     "xgb_max_rounds": args.xgb_rounds, "cart_depths": "1-20"},
        "summary": summaries,
        "averages": averages,
        "runs": results,
        "total_seconds": total_s,
    })


if __name__ == "__main__":
    main()
