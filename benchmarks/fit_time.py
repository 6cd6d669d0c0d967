"""Fit time of the estimators, and the early-stopping rule that saves it.

Two parts:

* **Fit time** (the default): each estimator with its defaults on a
  5,000 x 20 ``make_classification`` set (10 informative columns, 80% train),
  seeds ``--seeds``, printing the median seconds of ``fit``, the epochs and the
  test accuracy. Right before each seed's fits the same rows fit CART with its
  depth chosen by 5-fold cross-validation (the single trees' peer,
  ``_data.cart_cv``), and the median ratio of the times is printed beside them: a machine
  reference measured in the same minute (this 2-core machine's speed varies
  by up to 2x over an hour, and an absolute time alone cannot say which state
  a run met). With ``--compare-patience`` every fit also runs with a fixed
  ``patience`` (``_adaptive_patience = None``), alternating in one process, and
  the ratio is printed beside it (same seed, same trajectory: adaptive
  patience only stops it earlier).
* **Curves** (``--curves SET ...``, any names of ``_data.load``): the hinge
  forest and Tree Ensemble classifiers trained once per set with defaults but
  ``patience=60`` (so the trajectory runs past any stop considered), recording
  per epoch the validation loss and the test accuracy and AUC of that epoch's
  weights (protocol split, seed 0, fitted on train + validation like
  ``peers.py``). Then each stopping rule is replayed on the recorded curves:
  where it stops, which epoch it restores, and that epoch's test scores
  against the fixed patience's: the mean share of epochs run, on how many sets
  the restored epoch is the same, and the change in accuracy and AUC.

    python benchmarks/fit_time.py                      # every classifier, seeds 0 1 2
    python benchmarks/fit_time.py --compare-patience --models hinge tel --seeds 0
    python benchmarks/fit_time.py --curves iris wine breast_cancer digits crx pima --json curves.json
    python benchmarks/fit_time.py --curves held-out --families hinge   # a group of _data's sets
    python benchmarks/fit_time.py --smoke              # CI: 600 rows, two families, one epoch each
    python benchmarks/fit_time.py --backend tensorflow torch --models hinge tel --seeds 0

``--backend NAME ...`` runs the same measurement once per Keras backend, each
in a fresh process with ``KERAS_BACKEND`` set (the backend is fixed when Keras
is imported), one after the other; with ``--json PATH`` each writes
``PATH`` with the backend's name before the extension.

Figures: docs/benchmarks.md, "Fit time".
"""

import math
import os
import statistics
import subprocess
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _data  # noqa: E402  (also puts the repository root on sys.path)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_trees import estimators as E  # noqa: E402
from keras_trees.estimators._base import ADAPTIVE_PATIENCE, adaptive_patience  # noqa: E402

MODELS = {
    "hinge": E.HingeForestClassifier,
    "tel": E.TreeEnsembleClassifier,
    "e2e": E.EndToEndTreeClassifier,
    "polytope": E.ConvexPolytopeTreeClassifier,
    "non-greedy": E.NonGreedyTreeClassifier,
}
SMOKE_SETTINGS = {"hinge": dict(max_epochs=1, num_trees=4, max_depth=2, num_features=4),
                  "tel": dict(max_epochs=1, num_trees=2, max_depth=2)}
CURVE_PATIENCE = 60
#: Rules replayed on the curves, ``(rate, offset)`` of adaptive patience (None: fixed).
RULES = {"fixed": None, "adaptive 0.3, 5": (0.3, 5), "adaptive 0.3, 10": (0.3, 10),
         "adaptive 0.5, 5": (0.5, 5), "adaptive 0.5, 10 (the default)": ADAPTIVE_PATIENCE,
         "adaptive 1.0, 10": (1.0, 10)}


def fit_time(args):
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split

    rows = 600 if args.smoke else 5000
    x, y = make_classification(rows, 20, n_informative=10, random_state=0)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    print(f"make_classification: {rows} rows x 20 columns, {len(x_train)} to fit; seeds {args.seeds}")
    rules = [("adaptive", ADAPTIVE_PATIENCE)] + ([("fixed", None)] if args.compare_patience else [])
    fit_part = types.SimpleNamespace(x_fit=x_train, y_fit=y_train)
    results = []
    for name in args.models:
        cls = MODELS[name]
        runs = {label: [] for label, _ in rules}
        for seed in args.seeds:
            start = time.perf_counter()  # the reference, once per seed, right before its fits
            _data.cart_cv(fit_part, seed, quick=args.smoke)
            cart_seconds = time.perf_counter() - start
            for label, rule in rules:
                estimator = cls(random_state=seed, **(SMOKE_SETTINGS.get(name, {}) if args.smoke else {}))
                estimator._adaptive_patience = rule
                start = time.perf_counter()
                estimator.fit(x_train, y_train)
                seconds = time.perf_counter() - start
                epochs = len(estimator.history_.get("loss", []))
                runs[label].append(dict(seconds=seconds, epochs=epochs, accuracy=float(estimator.score(x_test, y_test)),
                                        cart_cv_seconds=cart_seconds))
        row = {"model": name}
        for label, _ in rules:
            row[label] = {key: statistics.median(r[key] for r in runs[label])
                          for key in ("seconds", "epochs", "accuracy", "cart_cv_seconds")}
            row[label]["cart_cv_ratio"] = statistics.median(r["seconds"] / r["cart_cv_seconds"] for r in runs[label])
            row[label]["runs"] = runs[label]
        text = (f"{keras.backend.backend():10s} {name:11s} "
                f"fit {row['adaptive']['seconds']:6.1f} s  epochs {row['adaptive']['epochs']:5.0f}  "
                f"accuracy {row['adaptive']['accuracy']:.4f}   | CART (CV) beside it "
                f"{row['adaptive']['cart_cv_seconds']:5.2f} s, ratio {row['adaptive']['cart_cv_ratio']:5.1f}")
        if args.compare_patience:
            fixed = row["fixed"]
            text += (f"   | fixed patience: fit {fixed['seconds']:6.1f} s  epochs {fixed['epochs']:5.0f}  "
                     f"accuracy {fixed['accuracy']:.4f}  | time ratio {row['adaptive']['seconds'] / fixed['seconds']:.2f}")
        print(text, flush=True)
        results.append(row)
    return {"rows": rows, "backend": keras.backend.backend(), "results": results}


class _Recorder(keras.callbacks.Callback):
    """Test accuracy and AUC of each epoch's weights."""

    def __init__(self, estimator, split):
        super().__init__()
        self.estimator, self.split = estimator, split
        self.accuracy, self.auc = [], []

    def on_epoch_end(self, epoch, logs=None):
        out = np.asarray(self.model(self.split.x_test, training=False), dtype=np.float64)
        proba = self.estimator._probabilities(out)
        self.accuracy.append(_data.accuracy(self.split.y_test, proba))
        self.auc.append(_data.auc(self.split.y_test, proba, self.split.num_classes))


def record_curve(name, family, smoke):
    """The validation-loss curve and per-epoch test scores of one default fit (seed 0)."""
    _, split = next(_data.splits(name, seeds=[0], rows=_data.SMOKE_ROWS if smoke else None))
    settings = SMOKE_SETTINGS[family] if smoke else {}
    estimator = MODELS[family](random_state=0, patience=CURVE_PATIENCE, **settings)
    estimator._adaptive_patience = None
    callbacks = estimator._callbacks
    recorder = {}

    def with_recorder(*args, **kwargs):
        recorder["r"] = _Recorder(estimator, split)
        return callbacks(*args, **kwargs) + [recorder["r"]]

    estimator._callbacks = with_recorder
    start = time.perf_counter()
    estimator.fit(np.concatenate([split.x_train, split.x_val]), np.concatenate([split.y_train, split.y_val]))
    return dict(set=name, family=family, val_loss=[float(v) for v in estimator.history_["val_loss"]],
                accuracy=recorder["r"].accuracy, auc=recorder["r"].auc, seconds=time.perf_counter() - start,
                patience=MODELS[family]().patience, max_epochs=MODELS[family]().max_epochs)


def replay(curve, rule):
    """(epochs run, restored 0-based epoch) of early stopping with ``rule`` on a recorded curve."""
    best, best_epoch = math.inf, -1
    losses = curve["val_loss"][: curve["max_epochs"]]
    for epoch, loss in enumerate(losses):
        if loss < best:
            best, best_epoch = loss, epoch
        elif epoch - best_epoch >= adaptive_patience(best_epoch, curve["patience"], rule):
            return epoch + 1, best_epoch
    return len(losses), best_epoch


GROUPS = {"sklearn": _data.SKLEARN_SETS[:4], "pmlb": _data.PMLB_SETS, "held-out": _data.HELD_OUT_SETS,
          "held-out-2": _data.HELD_OUT_2_SETS}


def curves(args):
    recorded = []
    names = [n for name in args.curves for n in GROUPS.get(name, (name,))]
    for name in names:
        for family in args.families if not args.smoke else ("hinge",):
            curve = record_curve(name, family, args.smoke)
            recorded.append(curve)
            print(f"{family:5s} {name:16s} {len(curve['val_loss']):4d} epochs recorded ({curve['seconds']:.0f} s)",
                  flush=True)
    summary = []
    for family in sorted({c["family"] for c in recorded}):
        mine = [c for c in recorded if c["family"] == family]
        print(f"\n{family}: {len(mine)} sets, patience {mine[0]['patience']}, at most {mine[0]['max_epochs']} epochs")
        print(f"  {'rule':32s} {'epochs run':>10s} {'same best':>9s} {'accuracy':>9s} {'worst':>7s} {'AUC':>8s} {'worst':>8s}")
        for label, rule in RULES.items():
            share, same, accuracy, auc = [], 0, [], []
            for curve in mine:
                epochs, best = replay(curve, rule)
                fixed_epochs, fixed_best = replay(curve, None)
                share.append(epochs / fixed_epochs)
                same += best == fixed_best
                accuracy.append(100 * (curve["accuracy"][best] - curve["accuracy"][fixed_best]))
                auc.append(curve["auc"][best] - curve["auc"][fixed_best])
            print(f"  {label:32s} {np.mean(share):10.3f} {same:4d}/{len(mine):<4d} {np.mean(accuracy):+9.3f} "
                  f"{min(accuracy):+7.2f} {np.mean(auc):+8.4f} {min(auc):+8.4f}")
            summary.append(dict(family=family, rule=label, epochs_share=float(np.mean(share)), same_best=same,
                                sets=len(mine), accuracy_points=float(np.mean(accuracy)), auc=float(np.mean(auc))))
    return {"curves": recorded, "summary": summary}


def _per_backend(backends, argv):
    """Runs this script once per backend (``KERAS_BACKEND``), with ``argv``
    less ``--backend``; the exit status of the first that fails, else 0."""
    rest, skipping, json_path = [], False, None
    for arg in argv:
        if arg == "--backend":
            skipping = True
            continue
        if skipping and not arg.startswith("--"):
            continue
        skipping = False
        rest.append(arg)
    if "--json" in rest:
        json_path = rest[rest.index("--json") + 1]
    status = 0
    for backend in backends:
        args = list(rest)
        if json_path:
            root, ext = os.path.splitext(json_path)
            args[args.index("--json") + 1] = f"{root}.{backend}{ext or '.json'}"
        print(f"--- backend {backend}", flush=True)
        done = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                              env={**os.environ, "KERAS_BACKEND": backend})
        status = status or done.returncode
    return status


def main():
    parser = _data.arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--backend", nargs="+", choices=["tensorflow", "jax", "torch"],
                        help="run once per Keras backend, each in a fresh process (default: the current one)")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(_data.SEEDS))
    parser.add_argument("--compare-patience", action="store_true",
                        help="also fit with a fixed patience, side by side")
    parser.add_argument("--curves", nargs="+", metavar="SET", help="record and replay validation curves")
    parser.add_argument("--families", nargs="+", choices=["hinge", "tel"], default=["hinge", "tel"],
                        help="the estimators whose curves --curves records")
    args = parser.parse_args()
    if args.backend and args.backend != [keras.backend.backend()]:
        sys.exit(_per_backend(args.backend, sys.argv[1:]))
    if args.smoke:
        args.seeds = [0]
        args.models = [m for m in args.models if m in SMOKE_SETTINGS] or ["hinge"]
    if args.curves:
        payload = curves(args)
    else:
        payload = fit_time(args)
    _data.write_json(args.json, {"benchmark": "fit_time", "smoke": args.smoke, **payload})


if __name__ == "__main__":
    main()
