"""Every family's regressor with its defaults beside CART and xgboost (test R^2).

The estimators of ``keras_trees.estimators`` with their defaults (no search) on
regression sets that ship with scikit-learn: ``diabetes`` (442 x 10) and the
synthetic Friedman #1-#3 problems (2,000 rows each, fixed noise). Protocol
splits of benchmarks/_data.py (80/20, seeds 0, 1, 2); the estimators hold out
their own validation share, so every model fits on train + validation. The
references: CART of the same depth (8), CART with its depth chosen by 5-fold
cross-validation on train + validation (``cart-cv``: ``_data.cart_cv`` on R^2,
as ``peers.py``'s on accuracy) and xgboost with its defaults and early
stopping on the validation part. Prints the test R^2 (mean over seeds) per
set and on average, and the mean fit time.

    python benchmarks/regressors.py --quick            # diabetes and friedman1, seed 0, short fits
    python benchmarks/regressors.py --json out.json    # four sets, seeds 0, 1, 2
    python benchmarks/regressors.py --smoke            # CI: diabetes, seed 0, the --quick fits
    python benchmarks/regressors.py --datasets make_regression sparse_uncorrelated friedman1_300 \
        --models NonGreedyTreeRegressor cart-cv --params NonGreedyTreeRegressor:init_depth=max_depth

``--datasets`` also takes three synthetic checks that are not in the default
run (``EXTRA_SETS``: a linear target with 5 of 20 columns informative, the
sparse uncorrelated problem, and Friedman #1 on 300 rows). ``--params
MODEL:ARG=VALUE`` changes an estimator's default (a JSON value, else text).
"""

import time
import warnings

import numpy as np
from sklearn.metrics import r2_score

import _data

ESTIMATORS = ("TreeEnsembleRegressor", "HingeForestRegressor", "EndToEndTreeRegressor",
              "ConvexPolytopeTreeRegressor", "NonGreedyTreeRegressor")
# Shorter fits for --quick and --smoke (the code path, not the figures).
QUICK = {"TreeEnsembleRegressor": {"max_epochs": 3}, "HingeForestRegressor": {"max_epochs": 2, "num_trees": 5},
         "EndToEndTreeRegressor": {"epochs_per_level": 1, "max_depth": 3},
         "ConvexPolytopeTreeRegressor": {"epochs_per_level": 2, "max_depth": 3},
         "NonGreedyTreeRegressor": {"max_epochs": 2, "max_depth": 3}}
SETS = ("diabetes", "friedman1", "friedman2", "friedman3")
#: Synthetic checks outside the default run (``--datasets``), for defaults chosen on ``SETS``.
EXTRA_SETS = ("make_regression", "sparse_uncorrelated", "friedman1_300")


def load(name):
    from sklearn import datasets

    if name == "diabetes":
        return _data.load_sklearn("diabetes")
    make = {"friedman1": lambda: datasets.make_friedman1(2000, noise=1.0, random_state=0),
            "friedman2": lambda: datasets.make_friedman2(2000, noise=50.0, random_state=0),
            "friedman3": lambda: datasets.make_friedman3(2000, noise=0.1, random_state=0),
            "make_regression": lambda: datasets.make_regression(2000, 20, n_informative=5, noise=10.0,
                                                                random_state=0),
            "sparse_uncorrelated": lambda: datasets.make_sparse_uncorrelated(2000, 10, random_state=0),
            "friedman1_300": lambda: datasets.make_friedman1(300, noise=1.0, random_state=1)}[name]
    x, y = make()
    return x.astype(np.float32), y.astype(np.float32)


def fit_predict(model, split, seed, quick, params=None):
    """Test predictions and fit seconds of ``model`` on ``split`` (``params``:
    arguments of our estimators that replace their defaults)."""
    start = time.perf_counter()
    if model == "cart-d8":
        from sklearn.tree import DecisionTreeRegressor

        fitted = DecisionTreeRegressor(max_depth=8, random_state=seed).fit(split.x_fit, split.y_fit)
    elif model == "cart-cv":
        fitted = _data.cart_cv(split, seed, quick, regression=True).best_estimator_
    elif model == "xgboost":
        import xgboost as xgb

        fitted = xgb.XGBRegressor(n_estimators=50 if quick else 1000, early_stopping_rounds=50, n_jobs=1,
                                  random_state=seed, verbosity=0)
        fitted.fit(split.x_train, split.y_train, eval_set=[(split.x_val, split.y_val)], verbose=False)
    else:
        from keras_trees import estimators

        settings = QUICK[model] if quick else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = getattr(estimators, model)(random_state=seed, **settings, **(params or {})).fit(
                split.x_fit, split.y_fit)
    seconds = time.perf_counter() - start
    return fitted.predict(split.x_test), seconds


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=SETS + EXTRA_SETS, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--models", nargs="+", choices=("cart-d8", "cart-cv", "xgboost") + ESTIMATORS, default=None)
    parser.add_argument("--params", nargs="+", metavar="MODEL:ARG=VALUE", default=[],
                        help="an estimator's argument instead of its default, e.g. "
                             "NonGreedyTreeRegressor:init_depth=max_depth (a JSON value, else text)")
    args = parser.parse_args()
    params = _data.parse_params(args.params, set(ESTIMATORS), parser)
    sets = args.datasets or (["diabetes"] if args.smoke else ["diabetes", "friedman1"] if args.quick else list(SETS))
    seeds = _data.run_seeds(args)
    models = args.models or ["cart-d8", "cart-cv", "xgboost", *ESTIMATORS]
    results = {}
    for name in sets:
        x, y = load(name)
        for seed in seeds:
            split = _data.split(x, y, seed, regression=True, rows=_data.smoke_rows(args))
            for model in models:
                pred, seconds = fit_predict(model, split, seed, args.quick or args.smoke, params.get(model))
                row = {"seed": seed, "r2": float(r2_score(split.y_test, pred)), "train_seconds": seconds}
                results.setdefault(name, {}).setdefault(model, []).append(row)
                print(f"  {name} seed {seed} {model}: R^2 {row['r2']:.4f} fit {seconds:.1f} s", flush=True)
    width = max(len(m) for m in models)
    print("\ntest R^2, mean over seeds " + " ".join(str(s) for s in seeds))
    print(f"{'model':{width}s}  " + "  ".join(f"{n:>9s}" for n in sets) + "  average  fit s")
    summary = {}
    for model in models:
        per_set = [np.mean([r["r2"] for r in results[n][model]]) for n in sets]
        seconds = np.mean([r["train_seconds"] for n in sets for r in results[n][model]])
        summary[model] = {"per_set": dict(zip(sets, map(float, per_set))), "average": float(np.mean(per_set)),
                          "train_seconds": float(seconds)}
        print(f"{model:{width}s}  " + "  ".join(f"{v:9.4f}" for v in per_set)
              + f"  {np.mean(per_set):7.4f}  {seconds:5.1f}")
    _data.write_json(args.json, {"benchmark": "regressors", "sets": sets, "seeds": seeds, "results": results,
                                 "summary": summary, "params": params})


if __name__ == "__main__":
    main()
