"""Ordered categoricals as ranks or as one-hot columns.

A synthetic five-class problem with two ordered categorical columns (6 and 10
levels, ``pd.Categorical(..., ordered=True)``) and six numeric ones: the class
is the quintile of ``0.8 a + 0.5 b + 1.5 x0 + x1 x2 + noise`` (``a``, ``b``:
the categories' ranks), 4,000 rows, a stratified 80/20 split per seed. Each
estimator with its defaults is fitted twice on the same split: on the frame
as it is (ordered columns become ranks, the estimators' preprocessing) and
with the two columns made unordered (``cat.as_unordered()``: one-hot
columns). xgboost (``enable_categorical``, early stopping on 10% of the
training rows) is the reference when it is installed.

    python benchmarks/ordered_categoricals.py                 # hinge and tel, seeds 0 1 2
    python benchmarks/ordered_categoricals.py --models tel --seeds 0
    python benchmarks/ordered_categoricals.py --smoke         # CI: 400 rows, tiny models, one epoch

Figures: docs/benchmarks.md, "Ordered categoricals".
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402  (also puts the repository root on sys.path)
import numpy as np  # noqa: E402

from keras_trees import estimators as E  # noqa: E402

MODELS = {"hinge": E.HingeForestClassifier, "tel": E.TreeEnsembleClassifier}
SMOKE_SETTINGS = {"hinge": dict(max_epochs=1, num_trees=4, max_depth=2, num_features=4),
                  "tel": dict(max_epochs=1, num_trees=2, max_depth=2)}
LEVELS_A = ["none", "low", "mid", "high", "very high", "max"]
LEVELS_B = [f"grade{i}" for i in range(10)]


def make(seed, rows):
    import pandas as pd

    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(rows, 6))
    a, b = rng.integers(0, len(LEVELS_A), rows), rng.integers(0, len(LEVELS_B), rows)
    score = 0.8 * a + 0.5 * b + 1.5 * numeric[:, 0] + numeric[:, 1] * numeric[:, 2]
    score = score + rng.normal(scale=0.7, size=rows)
    y = np.digitize(score, np.quantile(score, [0.2, 0.4, 0.6, 0.8]))
    frame = pd.DataFrame(numeric, columns=[f"x{i}" for i in range(6)])
    frame["a"] = pd.Categorical.from_codes(a, LEVELS_A, ordered=True)
    frame["b"] = pd.Categorical.from_codes(b, LEVELS_B, ordered=True)
    return frame, y


def unordered(frame):
    return frame.assign(a=frame["a"].cat.as_unordered(), b=frame["b"].cat.as_unordered())


def scores(y_true, proba):
    from sklearn.metrics import accuracy_score, roc_auc_score

    return accuracy_score(y_true, proba.argmax(1)), roc_auc_score(y_true, proba, multi_class="ovr")


def xgboost_scores(x_train, y_train, x_test, y_test, seed):
    try:
        import xgboost
    except ImportError:
        return None
    from sklearn.model_selection import train_test_split

    x_fit, x_val, y_fit, y_val = train_test_split(x_train, y_train, test_size=0.1, random_state=seed,
                                                  stratify=y_train)
    model = xgboost.XGBClassifier(enable_categorical=True, tree_method="hist", n_estimators=2000,
                                  early_stopping_rounds=50, random_state=seed)
    model.fit(x_fit, y_fit, eval_set=[(x_val, y_val)], verbose=False)
    return scores(y_test, model.predict_proba(x_test))


def main():
    parser = _data.arg_parser(__doc__)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(_data.SEEDS))
    args = parser.parse_args()
    from sklearn.model_selection import train_test_split

    rows = 400 if args.smoke else 4000
    seeds = args.seeds[:1] if args.smoke else args.seeds
    print(f"five classes, 6 numeric + 2 ordered categorical columns, {rows} rows, 80/20 split; seeds {seeds}")
    results = {}
    for seed in seeds:
        frame, y = make(seed, rows)
        x_train, x_test, y_train, y_test = train_test_split(frame, y, test_size=0.2, random_state=seed, stratify=y)
        if not args.smoke:
            reference = xgboost_scores(x_train, y_train, x_test, y_test, seed)
            if reference is not None:
                results.setdefault("xgboost", []).append({"seed": seed, "accuracy": reference[0],
                                                          "auc": reference[1]})
        for name in args.models:
            for encoding, convert in (("ranks", lambda f: f), ("one-hot", unordered)):
                estimator = MODELS[name](random_state=seed, **(SMOKE_SETTINGS[name] if args.smoke else {}))
                start = time.perf_counter()
                estimator.fit(convert(x_train), y_train)
                seconds = time.perf_counter() - start
                accuracy, auc = scores(y_test, estimator.predict_proba(convert(x_test)))
                results.setdefault(f"{name} {encoding}", []).append(
                    {"seed": seed, "accuracy": accuracy, "auc": auc, "seconds": seconds})
    print(f"{'model':<16} {'accuracy':>9} {'AUC':>7}  per seed (accuracy)")
    for label, runs in results.items():
        accuracy = statistics.mean(r["accuracy"] for r in runs)
        auc = statistics.mean(r["auc"] for r in runs)
        per_seed = " ".join(f"{r['accuracy']:.4f}" for r in runs)
        print(f"{label:<16} {accuracy:>9.4f} {auc:>7.4f}  {per_seed}")
    _data.write_json(args.json, {"benchmark": "ordered_categoricals", "smoke": args.smoke, "rows": rows,
                                 "results": results})


if __name__ == "__main__":
    main()
