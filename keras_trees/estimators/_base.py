"""What every keras-trees estimator shares; each family's module overrides the hooks.

`TreeEstimator` does the scikit-learn side once: input checks
(``n_features_in_``, ``feature_names_in_``), preprocessing
(`keras_trees.estimators._preprocessing`), label encoding (``classes_``,
any label type) or target standardization (regression), ``sample_weight``
times ``class_weight``, the seeded (and for classifiers stratified)
validation split, seeding Keras, and prediction. A family says what model to
build and how to train it through the hooks:

* ``_build_model(n_features, n_outputs, seed)`` -> the Keras model on the
  preprocessed float32 features (class logits or probabilities, or
  standardized regression targets);
* ``_compile(model)`` -> compiles it (default: Adam(``learning_rate``), sparse
  categorical cross-entropy or mean squared error, and
  ``steps_per_execution=steps_per_execution()``);
* ``_prepare(model, x, y, sample_weight)`` -> anything before training (e.g.
  the CART initialization);
* ``_callbacks(x, y, sample_weight, early_stopping)`` -> the ``fit`` callbacks
  (default: the early stopping on validation loss, when there is validation data);
* ``_epochs(callbacks)`` -> the ``epochs`` of ``fit`` (default ``max_epochs``);
* ``_fit_model(model, x, y, sample_weight, validation)`` -> trains and returns
  the history dict (default: compile, ``_prepare``, ``model.fit``; a family
  that does not train with ``fit`` replaces it);
* ``_candidates()`` -> argument overrides of the models to train (default: one
  model with the estimator's own arguments); the hooks read an argument with
  ``self._arg(name)``. With several candidates each is built and trained on
  the same split, and the one with the best validation score
  (``_validation_score``: error, then loss) is kept (``candidate_scores_``).

Each concrete class declares its constructor arguments and defaults with
`parameters` (scikit-learn reads them from the signature).
"""

import inspect
import numbers
import sys
import time

import keras
import numpy as np
from scipy.special import softmax
from sklearn.base import BaseEstimator
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state, compute_sample_weight
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_array,
    check_consistent_length,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from keras_trees import _deprecation, _scores
from keras_trees.estimators import _explain, _memory, _threads
from keras_trees._arrays import to_numpy
from keras_trees.estimators._preprocessing import is_frame, make_preprocessor

#: Constraints of the arguments every estimator has (scikit-learn's
#: ``_parameter_constraints``: a wrong value raises ``InvalidParameterError``,
#: a ``ValueError`` and ``TypeError`` naming the argument, in ``fit``).
SHARED_CONSTRAINTS = {
    "validation_fraction": [Interval(numbers.Real, 0, 1, closed="left"), None],
    "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
    "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
    "max_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
    "patience": [Interval(numbers.Integral, 1, None, closed="left")],
    "min_frequency": [Interval(numbers.Integral, 1, None, closed="left"),
                      Interval(numbers.Real, 0, 1, closed="neither"), None],
    "code_indicators": [Interval(numbers.Integral, 3, None, closed="left"), None],
    "max_categories": [Interval(numbers.Integral, 2, None, closed="left"), None],
    "random_state": ["random_state"],
    "verbose": [Interval(numbers.Integral, 0, 2, closed="both")],
    "n_jobs": [Interval(numbers.Integral, 1, None, closed="left"),
               Interval(numbers.Integral, None, -1, closed="right"), None],
    "class_weight": [StrOptions({"balanced"}), dict, None],
}

_PREDICT_BATCH = 8192

# The single trees cut on validation data (end-to-end, convex polytope) go back
# at most to depth 1, never to the root: a tree of depth 0 predicts a constant,
# which no user fitting a tree on data with signal wants, and a validation
# part of 20-60 rows cannot tell a good first split from none (on small sets
# where CART's cross-validation keeps depth 1-4, cuts ended at the root). CART
# tuned by cross-validation also starts its grid at depth 1.
CUT_MIN_DEPTH = 1

#: The ``verbose`` and ``n_jobs`` entries of the docstrings.
VERBOSE_DOC = """verbose: 0 silent; 1 one line per fit stage ({stages}) and a closing
            line (trees, depth, parameters, seconds, epochs, best validation
            loss); 2 also Keras' one line per epoch.
        n_jobs: CPU threads of ``fit`` and prediction (None: unchanged, all
            cores, but one PyTorch intra-op thread unless ``OMP_NUM_THREADS``
            is set; -1 all cores, -2 all but one): PyTorch's intra-op threads
            for the call; TensorFlow's intra-op and inter-op pools only if its
            runtime has not started yet (then for the whole process; else a
            ``RuntimeWarning``); not JAX's; NumPy/SciPy's BLAS and OpenMP pools
            on every backend (``keras_trees.estimators._threads``)."""

#: The explanation entries of the ``Attributes`` of the docstrings.
EXPLAIN_DOC = """``feature_importances_`` (per input column, one-hot
    columns summed back), ``forest_`` (the trees over the input columns, for
    ``keras_trees.inspection``; ``forest_features(X)`` gives the rows they read), """

#: The preprocessing arguments every estimator has, as its docstring lists them.
PREPROCESSING_DOC = """min_frequency: ``OneHotEncoder``'s ``min_frequency`` for categorical columns.
        max_categories: the most one-hot columns of one categorical column
            (default 64): in a column with more distinct values (an
            identifier, a zip code), values seen fewer than ``min_frequency``
            times (5 if None) and all but the ``max_categories - 1`` most
            frequent of the rest become ``other``; a column of nearly unique
            values warns. None: no cap.
        code_indicators: a numeric column with 3 to this many distinct values
            in the training data (a code) keeps its scaled value and also gets
            a 0/1 column per value (``hobby=2``); None: no such columns."""

#: The ``class_weight`` entry of the classifiers' docstrings.
CLASS_WEIGHT_DOC = """
        class_weight: None, ``"balanced"`` or ``{label: weight}``, multiplied
            into ``sample_weight`` (as in scikit-learn)."""


def parameters(**defaults):
    """Class decorator: the estimator's constructor, keyword-only arguments
    ``defaults`` (name -> default) stored unchanged as attributes, as
    scikit-learn requires. ``inspect.signature`` (and so ``get_params``,
    ``help``) shows them. An unknown argument raises ``TypeError`` naming the
    class, the argument and the valid ones; a deprecated name of the class's
    ``_renamed_arguments`` (old -> new) is accepted with a ``DeprecationWarning``."""
    signature = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value)
           for name, value in defaults.items()]
    )

    def decorate(cls):
        renamed = dict(getattr(cls, "_renamed_arguments", {}))

        def __init__(self, *args, **kwargs):
            if args:
                raise TypeError(f"{cls.__name__}() takes keyword arguments only, got {len(args)} positional "
                                f"argument(s); valid arguments: {', '.join(defaults)}")
            for old, new in renamed.items():
                if old in kwargs:
                    kwargs[new] = _deprecation.renamed_argument(
                        cls.__name__, kwargs, old, new, kwargs.get(new, defaults[new]), defaults[new])
            unknown = [name for name in kwargs if name not in defaults]
            if unknown:
                raise TypeError(
                    f"{cls.__name__}() got an unexpected keyword argument {unknown[0]!r}; "
                    f"valid arguments: {', '.join(defaults)}")
            for name, default in defaults.items():
                setattr(self, name, kwargs.get(name, default))

        __init__.__signature__ = signature
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        __init__.__doc__ = f"See `{cls.__name__}`."
        cls.__init__ = __init__
        return cls

    return decorate


#: Optimizer steps per call of the compiled training function (TensorFlow,
#: JAX): one Python round trip per 32 mini-batches instead of one per batch.
#: The steps and their order are the same, so the trained weights are
#: bit-identical to ``steps_per_execution=1`` (tested), and fits of small
#: models spend far less time in Python. No keras-trees callback has
#: per-batch hooks, which Keras calls once per execution. The estimators' own
#: fits on TensorFlow and JAX run a whole epoch per call (`_fit_on_one_iterator`);
#: this is the compiled model's setting for any later ``fit``.
STEPS_PER_EXECUTION = 32


def steps_per_execution():
    """``steps_per_execution`` for ``compile``: `STEPS_PER_EXECUTION`,
    or 1 on PyTorch (which Keras runs eagerly, one step at a time)."""
    return 1 if keras.backend.backend() == "torch" else STEPS_PER_EXECUTION


def set_random_seed(seed):
    """``keras.utils.set_random_seed(seed)`` (Python, NumPy, Keras' global
    seed, PyTorch on its backend), without importing TensorFlow only to seed
    it: Keras imports TensorFlow whenever it is installed, which on the JAX
    and PyTorch backends would add seconds to the first ``fit`` of a process
    although no estimator uses TensorFlow there. TensorFlow is
    seeded as well on its own backend or once it is imported."""
    from keras.src.utils import module_utils

    lazy = getattr(module_utils, "tensorflow", None)
    if (keras.backend.backend() == "tensorflow" or "tensorflow" in sys.modules
            or getattr(lazy, "_available", True) is not None):
        keras.utils.set_random_seed(seed)
        return
    lazy._available = False  # not imported yet: Keras skips tf.random.set_seed
    try:
        keras.utils.set_random_seed(seed)
    finally:
        lazy._available = None


#: Adaptive patience ``(rate, offset)``: training stops after
#: ``min(patience, ceil(rate * best_epoch) + offset)`` epochs without a better
#: validation loss, ``best_epoch`` the (1-based) epoch of the best so far. A
#: run whose best came early has shown how fast it learns, so it waits less
#: (best at epoch 3: 12 epochs, not 30); one that still improved late waits up
#: to ``patience``. Training only stops earlier on the same trajectory, so
#: where the best epoch falls before the new stop the returned model is the
#: same. Chosen by replaying rules on recorded validation curves of the
#: hinge forest and Tree Ensemble estimators on many sets
#: (``benchmarks/fit_time.py --curves``; docs/benchmarks.md, "Fit time").
#: AutoGluon's adaptive early stopping has the same form (rate 0.3).
ADAPTIVE_PATIENCE = (0.5, 10)


def cv_cart_depth(task, x, y, sample_weight, max_depth, seed, criterion=None):
    """The depth from 1 to ``max_depth`` that scikit-learn's CART picks by
    5-fold cross-validation on ``(x, y)`` (accuracy, stratified folds, for
    ``task="classification"``; R^2 for regression; ties: the shallower): the
    depth of the tuned CART, the fair peer of a single tree. Fewer folds
    where a class has fewer than 5 rows; ``max_depth`` where no 2 folds can
    be made. ``criterion``: CART's (its default if None)."""
    from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    if max_depth == 1:
        return 1
    folds, splitter = 5, KFold
    if task == "classification":
        smallest = int(np.bincount(np.asarray(y, dtype=np.int64)).min())
        if smallest >= 2:  # stratified folds need two rows of each class at least
            folds, splitter = min(5, smallest), StratifiedKFold
    folds = min(folds, len(y))
    if folds < 2:
        return max_depth
    cart = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
    search = GridSearchCV(cart(random_state=seed, **({"criterion": criterion} if criterion else {})),
                          {"max_depth": list(range(1, max_depth + 1))},
                          cv=splitter(folds, shuffle=True, random_state=seed))
    search.fit(x, y, sample_weight=sample_weight)  # the first best: the shallower on ties
    return int(search.best_params_["max_depth"])


def adaptive_patience(best_epoch, patience, rule=ADAPTIVE_PATIENCE):
    """Epochs without improvement before stopping when the best so far is the
    0-based epoch ``best_epoch`` (-1: the initial model): see
    `ADAPTIVE_PATIENCE`; ``rule=None``: ``patience``."""
    if rule is None:
        return patience
    rate, offset = rule
    return min(patience, int(np.ceil(rate * (best_epoch + 1))) + offset)


class TreeEstimator(BaseEstimator):
    """Base class of the keras-trees estimators (see the module docstring).

    Subclasses mix in ``ClassifierMixin`` or ``RegressorMixin`` (first) and
    set ``_task`` to ``"classification"`` or ``"regression"``.
    """

    _task = None
    #: The classification model outputs probabilities (True) or logits.
    _outputs_probabilities = False
    #: The logged quantity early stopping watches.
    _monitor = "val_loss"
    #: The model as ``_prepare`` leaves it (e.g. a greedy tree it starts from)
    #: competes in early stopping as epoch 0: training never returns a model
    #: worse on the validation data than its initialization.
    _initial_is_candidate = False
    #: An epoch of ``model.fit`` is at least this many mini-batches: a smaller
    #: training set is repeated within each epoch (shuffled), so that
    #: ``max_epochs`` and ``patience`` mean enough optimizer steps on small
    #: data too (iris: 108 rows, one batch of 256, would get 40 steps). 0: off.
    _min_epoch_steps = 16
    #: Early stopping's `ADAPTIVE_PATIENCE` rule (None: fixed ``patience``).
    _adaptive_patience = ADAPTIVE_PATIENCE
    _parameter_constraints = {}
    #: Deprecated argument names (old -> new), accepted with a warning.
    _renamed_arguments = {}
    #: Marks the keras-trees estimators for keras_trees.inspection (duck typing,
    #: without importing scikit-learn there).
    _keras_trees_estimator = True

    # ------------------------------------------------------------------ hooks
    def _build_model(self, n_features, n_outputs, seed):
        raise NotImplementedError(f"{type(self).__name__} must define _build_model")

    def _compile(self, model):
        if self._task == "classification":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=not self._outputs_probabilities)
        else:
            loss = keras.losses.MeanSquaredError()
        model.compile(keras.optimizers.Adam(self.learning_rate), loss, steps_per_execution=steps_per_execution())

    def _prepare(self, model, x, y, sample_weight):
        """Before training (default: nothing)."""

    def _callbacks(self, x, y, sample_weight, early_stopping):
        return [] if early_stopping is None else [early_stopping]

    def _epochs(self, callbacks):
        return self.max_epochs

    def _validation_needed(self, callbacks):
        """None (every epoch's validation scores may be read), or a function
        telling at an epoch's end whether they are (`_ValidationLogs`);
        ``callbacks``: those of `_callbacks`."""
        return None

    def _early_stopping(self, initial=None):
        return _EarlyStopping(self._monitor, mode="min", patience=self.patience,
                              restore_best_weights=True, initial=initial, adaptive=self._adaptive_patience)

    def _candidates(self):
        """Argument overrides of the models to train, the first the one used
        without validation data (default: one, the estimator's own arguments)."""
        return [{}]

    def _arg(self, name):
        """An argument as the model being built sees it: the current
        candidate's override, else the estimator's own value."""
        return getattr(self, "_candidate", {}).get(name, getattr(self, name))

    def _validation_score(self, model, validation):
        """(error, loss) of a trained model on the validation data, lower is
        better: the weighted error rate and log loss of a classifier (the
        loss breaks the ties that error rates have on a small validation
        part), the weighted mean squared error of a regressor (twice)."""
        x, y, w = validation
        return self._score_outputs(_outputs(model, x), y, w)

    def _score_outputs(self, out, y, w):
        """`_validation_score` of model outputs ``out`` for targets ``y``, weights ``w``."""
        out = np.asarray(out, dtype=np.float64)
        if self._task == "regression":
            mse = _scores.mean_squared_error(out, y, w)
            return mse, mse
        return _scores.error_and_log_loss(self._probabilities(out), y, w)

    def _constant_score(self, y, sample_weight, validation):
        """`_score_outputs` on the validation data of the constant
        prediction from the training targets ``y``: their weighted mean
        (regression), their weighted class frequencies (classification)."""
        w = np.asarray(sample_weight, dtype=np.float64)
        w = w / max(w.sum(), 1e-300)
        if self._task == "regression":
            out = w @ np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        else:
            prior = np.bincount(np.asarray(y), weights=w, minlength=len(self.classes_))
            prior = np.clip(prior, 1e-12, None)
            out = prior / prior.sum() if self._outputs_probabilities else np.log(prior / prior.sum())
        return self._score_outputs(np.repeat(np.asarray(out)[None], len(validation[1]), axis=0), *validation[1:])

    def _fit_candidates(self, n_features, n_outputs, seed, x, y, sample_weight, validation):
        """Builds and trains every candidate (each from the same seed); returns
        the kept model and its history."""
        candidates = self._candidates() if validation is not None else self._candidates()[:1]
        self.__dict__.pop("candidate_scores_", None)  # a refit with one candidate has none
        constant = None if validation is None else self._constant_score(y, sample_weight, validation)
        kept, scores = [], []
        try:
            for overrides in candidates:
                self._candidate = dict(overrides)
                set_random_seed(seed)
                start = time.perf_counter()
                model = self._build_model(n_features, n_outputs, seed)
                history = self._fit_model(model, x, y, sample_weight, validation)
                # Scored on the predictions the estimator returns (predict's routing).
                score = () if validation is None else self._validation_score(model, validation)
                if len(candidates) > 1:
                    scores.append({**overrides, "validation_error": score[0], "validation_loss": score[1]})
                    self._say(f"candidate {', '.join(f'{k}={v!r}' for k, v in overrides.items())}: "
                              f"validation error {score[0]:.4g}, loss {score[1]:.4g} "
                              f"({time.perf_counter() - start:.1f} s)")
                kept.append((score, model, history))
        finally:
            self._candidate = {}
        if scores:
            self.candidate_scores_ = scores
        if validation is None:
            return kept[0][1], kept[0][2]
        # The best candidate among those that beat the constant prediction on
        # the validation loss, else the best of all (and a warning).
        beating = [k for k in kept if k[0][1] <= constant[1]]
        score, model, history = min(beating or kept, key=lambda k: k[0])
        history["validation_constant"] = list(constant)
        if score[1] > constant[1]:
            self._warn_worse_than_constant(score, constant, history)
        return model, history

    def _warn_worse_than_constant(self, score, constant, history):
        """The ``UserWarning`` of a fitted model that predicts its validation
        part worse than the constant prediction from the training targets."""
        import warnings

        what = "mean target" if self._task == "regression" else "class frequencies"
        loss = "squared error" if self._task == "regression" else "log loss"
        message = (f"{type(self).__name__}: the fitted model predicts its validation part worse than the "
                   f"constant prediction of the training {what} (validation {loss} {score[1]:.4g} against "
                   f"{constant[1]:.4g}), and no candidate beats it; it is returned as fitted "
                   f"(history_['validation_constant'] holds the constant's score). "
                   f"Try {self._worse_than_constant_advice()}, or check that X carries signal about y.")
        self._say(message.split(": ", 1)[1])
        warnings.warn(message, UserWarning, stacklevel=5)

    def _worse_than_constant_advice(self):
        """What to try when the fitted model is worse than the constant (the warning's advice)."""
        return ("more training (max_epochs), a smaller learning_rate, a larger validation part "
                "(validation_fraction or eval_set)")

    def _fit_model(self, model, x, y, sample_weight, validation):
        """Trains ``model``; returns its history (a dict of per-epoch lists)."""
        self._compile(model)
        self._prepare(model, x, y, sample_weight)
        early = None
        if validation is not None:
            initial = None
            if self._initial_is_candidate:
                logs = model.evaluate(validation[0], validation[1], sample_weight=validation[2],
                                      batch_size=_PREDICT_BATCH, verbose=0, return_dict=True)
                initial = (float(logs[self._monitor.removeprefix("val_")]), [to_numpy(v) for v in model.weights])
            early = self._early_stopping(initial)
        self._fit_validation = validation  # for hooks that score the returned predictor
        try:
            callbacks = self._callbacks(x, y, sample_weight, early)
        finally:
            self.__dict__.pop("_fit_validation", None)
        repeat = -(-self._min_epoch_steps * self.batch_size // len(x))
        if repeat > 1:
            index = np.tile(np.arange(len(x)), repeat)
            x, y, sample_weight = x[index], y[index], sample_weight[index]
        # The validation metrics come first at each epoch's end, where
        # fit(validation_data=...) would compute them: before any callback
        # changes the model (growth, EM leaves).
        validating = [] if validation is None else [_ValidationLogs(validation, self._validation_needed(callbacks))]
        # steps_per_epoch: the batches of one pass (on JAX all full, so an
        # epoch reads a few rows of the next pass). On TensorFlow and JAX it
        # cuts epochs out of one endless stream of batches
        # (_fit_on_one_iterator); on PyTorch it is the number of batches fit
        # takes anyway, and given, it stops Keras' epoch iterator from making
        # a second data iterator per epoch.
        steps = -(-len(x) // self.batch_size)
        epochs = self._epochs(callbacks)
        progress = []
        if self.verbose == 1:
            progress = [_Progress(self, epochs, early, by_epochs=self._progress_by_epochs)]
            self._say(f"training: at most {epochs} epochs of {steps} mini-batches of {self.batch_size} "
                      f"({len(x)} rows{'' if repeat <= 1 else f', the {len(x) // repeat} training rows repeated'}), "
                      + ("no validation" if validation is None else f"{len(validation[0])} validation rows"))
        fit = dict(epochs=epochs, steps_per_epoch=steps,
                   verbose=self._keras_verbose(), callbacks=validating + callbacks + progress)
        if keras.backend.backend() == "tensorflow":
            batches = _one_pass_per_epoch(x, y, sample_weight, self.batch_size, self._seed)
        elif keras.backend.backend() == "jax":
            batches = _full_batches(x, y, sample_weight, self.batch_size, self._seed)
        else:
            history = model.fit(x, y, sample_weight=sample_weight, batch_size=self.batch_size, shuffle=True, **fit)
            return dict(history.history)
        history = _fit_on_one_iterator(model, batches, steps, fit)
        return dict(history.history)

    # ----------------------------------------------------------------- verbose
    #: ``verbose=1`` prints a progress line every tenth of the epochs (as well as
    #: every `PROGRESS_SECONDS`); False: only by time (a family whose own
    #: callbacks print a line per stage).
    _progress_by_epochs = True

    def _keras_verbose(self):
        """Keras' ``fit`` verbosity: its one line per epoch at ``verbose=2``, else silent."""
        return 2 if self.verbose == 2 else 0

    def _say(self, text):
        """One line of the fit's stages (``verbose >= 1``)."""
        if self.verbose:
            print(f"{type(self).__name__}: {text}", flush=True)

    def _summary(self, forest, seconds):
        """The line closing a fit: trees, depth, parameters, time, epochs, validation."""
        depth = int(forest.tree_depths().max()) if forest.num_trees else 0
        trees = f"{forest.num_trees} tree{'s' if forest.num_trees != 1 else ''}"
        leaves = int(np.sum(forest.num_leaves())) if forest.num_trees else 0
        text = (f"fitted {trees} of depth {depth}, {leaves} leaves ({self.model_.count_params()} parameters) "
                f"in {seconds:.1f} s")
        history = self.history_
        if history.get("loss"):
            text += f", {len(history['loss'])} epochs"
        if history.get("routing") == "soft":
            text += ", routed softly (the hard tree validated worse than the constant)"
        monitored = history.get(self._monitor) or history.get("val_loss")
        if monitored:
            text += f", best validation {self._monitor.removeprefix('val_').replace('_', ' ')} {min(monitored):.4g}"
        return text

    # ------------------------------------------------------------- scikit-learn
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.non_deterministic = False
        if self._task == "regression":
            tags.target_tags.multi_output = True
        return tags

    def _check_X(self, X, reset):
        """Validated input: a frame stays a frame (its columns are typed);
        anything else becomes a numeric array (NaN allowed)."""
        if is_frame(X) and (reset or getattr(self, "_fitted_on_frame", False)):
            validate_data(self, X, reset=reset, skip_check_array=True)
            if X.shape[0] < 1:
                raise ValueError(f"X: found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is required.")
            return X
        if getattr(self, "_fitted_on_frame", False) and not reset:
            validate_data(self, X, reset=False, skip_check_array=True)
            return check_array(X, dtype=None, ensure_all_finite="allow-nan")
        try:
            return validate_data(self, X, reset=reset, dtype="numeric", ensure_all_finite="allow-nan")
        except ValueError as error:
            column = None if reset else _non_numeric_column(X, None)
            if column is None:
                raise
            name, value = column
            raise ValueError(f"X: column {name} was numeric in fit, but holds {value!r}; pass numbers "
                             "(NaN or None for a missing value) in it") from error

    def _check_y(self, y, n_samples):
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None.")
        if self._task == "classification":
            y = column_or_1d(check_array(y, ensure_2d=False, dtype=None, ensure_all_finite=False), warn=True)
            check_classification_targets(y)
        else:
            y = check_array(y, ensure_2d=False, dtype="numeric", ensure_all_finite=True)
            if y.ndim == 2 and y.shape[1] == 0:
                raise ValueError("y: regression targets need at least one column")
            if y.ndim > 2:
                raise ValueError(f"y: regression targets must be 1D or 2D, got shape {y.shape}")
        check_consistent_length(np.empty((n_samples, 0)), y)
        return y

    def _encode_targets(self, y):
        """Integer class ids (classification) or standardized float32 targets."""
        if self._task == "classification":
            encoder = LabelEncoder().fit(y)
            self.classes_ = encoder.classes_
            if len(self.classes_) < 2:
                raise ValueError(
                    f"y: {type(self).__name__} needs samples of at least 2 classes, got 1 class "
                    f"({self.classes_[0]!r})")
            return encoder.transform(y).astype(np.int32), len(self.classes_)
        y2 = y.reshape(len(y), -1).astype(np.float64)
        self._y_ndim = y.ndim
        self._y_mean = y2.mean(axis=0)
        scale = y2.std(axis=0)
        self._y_scale = np.where(scale > 0, scale, 1.0)
        return ((y2 - self._y_mean) / self._y_scale).astype(np.float32), y2.shape[1]

    def _split(self, n, y, seed):
        """Training and validation positions (``validation`` None: no split;
        ``validation_fraction`` None or 0: none)."""
        n_val = int(np.floor((self.validation_fraction or 0.0) * n))
        everything = np.arange(n)
        if n_val < 1 or n - n_val < 2:
            return everything, None
        stratify = None
        if self._task == "classification":
            counts = np.bincount(y, minlength=len(self.classes_))
            k = int((counts > 0).sum())
            if counts[counts > 0].min() >= 2 and n_val >= k and n - n_val >= k:
                stratify = y
        train, val = train_test_split(everything, test_size=n_val, random_state=seed, stratify=stratify)
        return np.sort(train), np.sort(val)

    def fit(self, X, y, sample_weight=None, eval_set=None, **kwargs):
        """Preprocesses ``X`` (the fitted transformer is ``preprocessor_``), builds
        the Keras model (``model_``) and trains it (``history_``).

        Args:
            X: array-like or pandas frame, ``(n_samples, n_features)``.
            y: class labels of any type (classifiers), or ``(n_samples,)`` /
                ``(n_samples, n_outputs)`` float targets (regressors).
            sample_weight: optional ``(n_samples,)`` non-negative weights,
                multiplied by the ``class_weight`` of classifiers.
            eval_set: optional validation set ``(X_val, y_val)`` or
                ``(X_val, y_val, sample_weight_val)``, or a list of them as
                xgboost and LightGBM take (the last one is used): it replaces
                the internal ``validation_fraction`` split, so every row of
                ``X`` trains, and early stopping, the depth cut and the
                choice among candidates read it.

        Returns:
            self.
        """
        if kwargs:
            raise TypeError(f"{type(self).__name__}.fit() got an unexpected keyword argument "
                            f"{next(iter(kwargs))!r}; it takes X, y, sample_weight and eval_set "
                            "(the estimator's other settings are constructor arguments)")
        self._validate_params()
        start = time.perf_counter()
        self._fit_start = start
        with _threads.limit(self.n_jobs, type(self).__name__):
            self._fit(X, y, sample_weight, eval_set)
        if self.verbose:  # the trees as forest_ returns them
            self._say(self._summary(self._forest(), time.perf_counter() - start))
        return self

    def _eval_set(self, eval_set):
        """``(X_val, y_val, sample_weight_val or None)`` of ``fit``'s ``eval_set``, or None."""
        if eval_set is None:
            return None
        if isinstance(eval_set, list):
            if not eval_set:
                raise ValueError("eval_set: expected (X_val, y_val) or a non-empty list of them, got []")
            eval_set = eval_set[-1]
        if not isinstance(eval_set, tuple) or len(eval_set) not in (2, 3):
            raise ValueError(f"eval_set: expected (X_val, y_val), (X_val, y_val, sample_weight_val) or a list "
                             f"of them, got {type(eval_set).__name__}")
        return eval_set if len(eval_set) == 3 else (*eval_set, None)

    def _eval_targets(self, y_val, n):
        """Encoded validation targets (``eval_set``), as the training targets are."""
        y_val = self._check_y(y_val, n)
        if self._task == "classification":
            unknown = np.setdiff1d(np.unique(y_val), self.classes_)
            if len(unknown):
                raise ValueError(f"eval_set: y_val has labels not in the training y: {list(unknown[:5])!r}")
            return np.searchsorted(self.classes_, y_val).astype(np.int32)
        y2 = y_val.reshape(len(y_val), -1).astype(np.float64)
        if y2.shape[1] != len(self._y_mean):
            raise ValueError(f"eval_set: y_val has {y2.shape[1]} output(s), the training y {len(self._y_mean)}")
        return ((y2 - self._y_mean) / self._y_scale).astype(np.float32)

    def _fit(self, X, y, sample_weight, eval_set=None):
        eval_set = self._eval_set(eval_set)
        self._fitted_on_frame = is_frame(X)
        X = self._check_X(X, reset=True)
        y = self._check_y(y, X.shape[0])
        targets, n_outputs = self._encode_targets(y)
        weights = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        class_weights = None
        if self._task == "classification" and self.class_weight is not None:
            per_row = compute_sample_weight(self.class_weight, y)
            weights = weights * per_row
            class_weights = np.ones(n_outputs)
            class_weights[targets] = per_row
        weights = weights.astype(np.float32)

        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        preprocessor = make_preprocessor(X, getattr(self, "min_frequency", None),
                                         getattr(self, "code_indicators", None), getattr(self, "max_categories", None))
        x = np.asarray(preprocessor.fit_transform(X), dtype=np.float32)
        _memory.check(self, x.shape[0], x.shape[1], n_outputs, preprocessor)  # before the model is built
        if x.shape[1] == 0:
            raise ValueError("X: no feature is left after preprocessing (every column was empty)")
        if eval_set is None:
            train, val = self._split(len(x), targets, seed)
            validation = None if val is None else (x[val], targets[val], weights[val])
        else:
            train = np.arange(len(x))
            validation = self._validation_rows(preprocessor, class_weights, *eval_set)

        self._seed = seed  # for the hooks (e.g. a CART initialization)
        model, self.history_ = self._fit_candidates(
            x.shape[1], n_outputs, seed, x[train], targets[train], weights[train], validation)
        self.preprocessor_ = preprocessor
        self.model_ = model
        self._design = _explain.design(self)
        forest = _explain.design_forest(self)
        self._node_samples = None  # the training rows' count per node, for forest_'s pruning
        if forest.num_trees == 1 and forest.leaf_prediction:
            self._node_samples = forest.node_statistics(_explain.to_design(self, x[train]))["samples"]
        rows = train if len(train) <= _explain.IMPORTANCE_ROWS else np.sort(
            check_random_state(seed).choice(train, _explain.IMPORTANCE_ROWS, replace=False))
        self._feature_importances = self._importances_on(
            _explain.to_design(self, x[rows]), None, weights[rows], aggregate=True, forest=forest)
        return forest

    def _validation_rows(self, preprocessor, class_weights, X_val, y_val, w_val):
        """``(x, targets, weights)`` of an explicit validation set, transformed as
        the training rows (``class_weights``: the training weight of each class, or None)."""
        X_val = self._check_X(X_val, reset=False)
        targets = self._eval_targets(y_val, X_val.shape[0])
        w = _check_sample_weight(w_val, X_val, dtype=np.float64, ensure_non_negative=True)
        if class_weights is not None:
            w = w * class_weights[targets]
        x = np.asarray(self._transform(X_val, preprocessor), dtype=np.float32)
        return x, targets, w.astype(np.float32)

    def set_params(self, **params):
        """scikit-learn's ``set_params``; deprecated argument names are accepted
        with a ``DeprecationWarning`` (an unknown name raises scikit-learn's
        ``ValueError`` naming the estimator and listing the valid ones)."""
        for old, new in self._renamed_arguments.items():
            if old in params:
                params[new] = _deprecation.renamed_argument(
                    type(self).__name__, params, old, new, params.get(new, getattr(self, new)), getattr(self, new))
        return super().set_params(**params)

    # ------------------------------------------------------------- explanation
    @property
    def forest_(self):
        """The trained trees as a [`keras_trees.forest.Forest`][keras_trees.forest.Forest] whose splits
        read the design rows of `forest_features` (numeric columns in their
        units, 0/1 missing indicators and one-hot columns), named after the input
        columns (``colour=red``, ``age=missing``). Computed from ``model_`` on
        each access (`keras_trees.estimators._explain`).

        A single hard-routed tree (end-to-end, non-greedy, convex polytope) is
        pruned ([`Forest.prune`][keras_trees.forest.Forest.prune]): splits
        no input can flip (all weights zero, a test a split above already
        decided, a threshold no 0/1 value of a one-hot or missing-value column
        crosses) are removed, which changes no prediction; and where the
        estimator kept the per-node counts of its training rows
        (``_node_samples``), splits that send every training row the same way
        are removed too, which keeps every training row's prediction.
        ``source_node`` maps each node back to the model's heap position."""
        return self._forest()

    def _forest(self, feature_names=None):
        """`forest_`, optionally naming the input columns ``feature_names``."""
        check_is_fitted(self, "model_")
        forest = _explain.design_forest(self, feature_names)
        if forest.num_trees != 1 or not forest.leaf_prediction:
            return forest
        binary = forest.extra.get("binary_features") or [None] * forest.input_dim
        lower = np.where([b is not None for b in binary], 0.0, -np.inf)
        upper = np.where([b is not None for b in binary], 1.0, np.inf)
        samples = getattr(self, "_node_samples", None)
        if samples is not None and np.shape(samples) != forest.node_state.shape:
            samples = None  # counts of another model (e.g. a model_ replaced by hand)
        return forest.prune(bounds=(lower, upper), samples=samples)

    def forest_features(self, X):
        """The design rows of ``X`` that the splits of `forest_` read:
        ``(n_samples, n_design_columns)`` float64, the preprocessed features
        with scaling undone (missing values imputed, categoricals one-hot,
        ordered categoricals as ranks)."""
        check_is_fitted(self, "model_")
        X = self._check_X(X, reset=False)
        return _explain.to_design(self, self._transform(X))

    @property
    def feature_importances_(self):
        """``(n_features_in_,)`` importance of each input column, summing to 1
        (all zeros when the trees have no split), in the order of the columns of
        ``X`` (``feature_names_in_``): [`keras_trees.inspection.feature_importances`][keras_trees.inspection.importances.feature_importances]
        (``kind="split_usage"``) of `forest_` on the training rows (a
        seeded sample of 4096 of larger sets, with their sample weights), each
        split's samples shared among the design columns it reads (oblique
        splits: by ``|w_j| * std_j``), then summed over the design columns of
        each input column (its one-hot columns, its missing indicator)."""
        check_is_fitted(self, "model_")
        return self._feature_importances.copy()

    def _importances_on(self, rows, y, sample_weight, kind="split_usage", criterion=None, aggregate=False,
                        forest=None):
        """[`keras_trees.inspection.feature_importances`][keras_trees.inspection.importances.feature_importances] of `forest_` on
        design rows: ``(n_design_columns,)``, or with ``aggregate`` summed into the
        input columns and normalized, ``(n_features_in_,)``."""
        from keras_trees.inspection.importances import feature_importances

        values = feature_importances(self.forest_ if forest is None else forest, rows, y, kind=kind,
                                     criterion=criterion, sample_weight=sample_weight,
                                     num_classes=len(self.classes_) if self._task == "classification" else None)
        if not aggregate:
            return values
        return _explain.normalized(_explain.aggregate(values, self._design.columns, self.n_features_in_))

    # -------------------------------------------------------------- prediction
    def _model_outputs(self, X):
        """The Keras model's outputs on ``X`` (NumPy, float32), in eager batches."""
        check_is_fitted(self, "model_")
        X = self._check_X(X, reset=False)
        with _threads.limit(self.n_jobs, type(self).__name__):
            return _outputs(self.model_, np.asarray(self._transform(X), dtype=np.float32))

    def _transform(self, X, preprocessor=None):
        """``preprocessor`` (default ``preprocessor_``) applied to checked rows
        ``X``. Rows given as an array to a model fitted on a frame have already
        been warned about once (by `_check_X`); the transformer's own
        steps do not warn again. A value that is no number in a column that
        was numeric in ``fit`` raises a ``ValueError`` naming the column."""
        import warnings

        preprocessor = self.preprocessor_ if preprocessor is None else preprocessor
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="X does not have valid feature names")
                return preprocessor.transform(X)
        except (ValueError, TypeError) as error:
            column = _non_numeric_column(X, _numeric_positions(preprocessor))
            if column is None:
                raise
            name, value = column
            raise ValueError(f"X: column {name} was numeric in fit, but holds {value!r}; pass numbers "
                             "(NaN or None for a missing value) in it") from error

    def _probabilities(self, out):
        """Class probabilities from the model's float64 outputs (probabilities or logits)."""
        if self._outputs_probabilities:
            return out / out.sum(axis=1, keepdims=True)
        return softmax(out, axis=1)

    def _predict_proba(self, X):
        return self._probabilities(self._model_outputs(X).astype(np.float64))

    def _predict_regression(self, X):
        out = self._model_outputs(X).astype(np.float64) * self._y_scale + self._y_mean
        return out.ravel() if self._y_ndim == 1 else out


def _numeric_positions(preprocessor):
    """Positions of the input columns a fitted preprocessor reads as numbers
    (None: every column, the plain-array pipeline)."""
    if not hasattr(preprocessor, "transformers_"):
        return None
    return sorted({int(j) for name, _, columns in preprocessor.transformers_ if name in ("numeric", "codes")
                   for j in np.atleast_1d(columns) if not isinstance(j, str)})


def _non_numeric_column(X, positions):
    """``(column label, value)`` of the first value that is no number in the
    columns at ``positions`` of ``X`` (None: all), or None."""
    is_df = is_frame(X)
    values = X if is_df else np.asarray(X, dtype=object)
    if np.ndim(values) != 2:
        return None
    positions = range(values.shape[1]) if positions is None else positions
    for j in positions:
        column = values.iloc[:, j].to_numpy(dtype=object) if is_df else values[:, j]
        for value in column:
            if value is None:
                continue
            try:
                float(value)
            except (TypeError, ValueError):
                return (repr(X.columns[j]) if is_df else f"{j} (x[{j}])"), value
    return None


def _outputs(model, x):
    """A Keras model's outputs on float32 rows ``x`` (NumPy, float32), in eager batches."""
    parts = [to_numpy(model(x[i:i + _PREDICT_BATCH], training=False))
             for i in range(0, len(x), _PREDICT_BATCH)]
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, 1), np.float32)


def _one_pass_per_epoch(x, y, sample_weight, batch_size, seed):
    """The repeated ``tf.data`` dataset of `_fit_on_one_iterator`: each
    pass over the rows in a new order (seeded by ``seed``), in batches of
    ``batch_size`` rows, the last one smaller, like Keras' own from arrays."""
    import tensorflow as tf

    columns = tuple(tf.constant(a) for a in (x, y, sample_weight))
    return (tf.data.Dataset.range(len(x))
            .shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
            .batch(batch_size)
            .map(lambda index: tuple(tf.gather(c, index) for c in columns))
            .repeat()
            .prefetch(1))


def _full_batches(x, y, sample_weight, batch_size, seed):
    """Endless mini-batches of ``min(batch_size, len(x))`` rows for ``fit`` on JAX.

    The rows are taken in passes, each a new order seeded by ``seed``, and a
    batch that a pass cannot fill takes its last rows from the next pass: every
    row comes once per pass and every batch has the same shape. JAX compiles
    the training step once per input shape, so the smaller last batch of each
    pass that ``fit`` makes from arrays would cost a second compilation in
    every fit, a sizeable share of a small one.
    ``fit`` reads ``steps_per_epoch`` batches an epoch from this one generator."""
    rng = np.random.default_rng(seed)
    n = len(x)
    size = min(batch_size, n)
    order = np.zeros(0, dtype=np.int64)
    while True:
        while len(order) < size:
            order = np.concatenate([order, rng.permutation(n)])
        index, order = order[:size], order[size:]
        yield x[index], y[index], sample_weight[index]


def _fit_on_one_iterator(model, batches, steps, fit_kwargs, steps_per_execution=None):
    """``model.fit`` on TensorFlow or JAX from one endless stream of mini-batches
    for the whole fit (`_one_pass_per_epoch`, `_full_batches`).

    Given NumPy arrays, Keras makes a new data iterator every epoch; on
    TensorFlow, in the estimators' short epochs, that costs more than the
    training steps. Here ``fit`` reads ``steps``
    batches per epoch from one iterator, and one call of the training function
    runs the whole epoch (``steps_per_execution`` = ``steps``: from an endless
    stream a call takes ``steps_per_execution`` batches whatever the epoch's
    length, so it must divide ``steps``); the model's own setting is restored
    afterwards.
    """
    saved = model.steps_per_execution
    model.steps_per_execution = steps_per_execution or steps
    try:
        return model.fit(batches, shuffle=False, **fit_kwargs)
    finally:
        model.steps_per_execution = saved


class _ValidationLogs(keras.callbacks.Callback):
    """Writes the validation metrics of the epoch into its logs (``val_loss``
    and the model's other metrics, prefixed ``val_``), as
    ``fit(validation_data=...)`` does: up to `_PREDICT_BATCH` rows in one
    ``test_on_batch`` (the value of ``evaluate`` up to the order of the float
    sums), more with ``evaluate`` in batches of that size. ``fit``'s
    validation creates a new ``tf.data`` iterator at every epoch on
    TensorFlow, which for a few hundred rows costs many times this one call;
    a fit of the end-to-end tree runs over a hundred epochs.
    ``validation``: ``(x, y, sample_weight)`` NumPy arrays.

    ``needed`` (optional, no arguments): False when nothing will read this
    epoch's scores (the epochs inside a level of greedy growth: a partly grown
    tree is no candidate of early stopping). Such an epoch writes NaN for each
    validation metric instead (the history keeps one value per epoch); the
    first epoch is always scored (to learn the metrics' names)."""

    def __init__(self, validation, needed=None):
        super().__init__()
        self.validation = validation
        self.needed = needed
        self._names = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        if self._names is not None and self.needed is not None and not self.needed():
            logs.update(dict.fromkeys(self._names, float("nan")))
            return
        x, y, w = self.validation
        if len(x) <= _PREDICT_BATCH:
            values = self.model.test_on_batch(x, y, sample_weight=w, return_dict=True)
        else:
            values = self.model.evaluate(x, y, sample_weight=w, batch_size=_PREDICT_BATCH, verbose=0,
                                         return_dict=True)
        scores = {f"val_{name}": float(value) for name, value in values.items()}
        self._names = list(scores)
        logs.update(scores)


def _finite(value):
    """``value`` as a finite float, or None (None, NaN, infinite, not a number)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if np.isfinite(value) else None


#: ``verbose=1`` prints a progress line at least this often while training.
PROGRESS_SECONDS = 15.0


class _Progress(keras.callbacks.Callback):
    """``verbose=1``: a line every tenth of the ``epochs`` (``by_epochs``) and
    whenever `PROGRESS_SECONDS` have passed since the last one, with the
    training and validation loss, the best validation loss so far, the
    seconds elapsed and an upper bound on those left (the epochs that remain
    at most, early stopping's patience included, at the mean epoch time so
    far); a closing line says where training stopped and which epoch was kept."""

    def __init__(self, estimator, epochs, early, by_epochs=True):
        super().__init__()
        self.estimator, self.epochs, self.early = estimator, int(epochs), early
        self.every = max(1, self.epochs // 10) if by_epochs else None

    def on_train_begin(self, logs=None):
        self.start = self.last = time.perf_counter()
        self.done = 0

    def _best(self):
        early = self.early
        best = None if early is None else _finite(getattr(early, "best", None))
        if best is None:
            return None
        return best, int(getattr(early, "best_epoch", 0) or 0)

    def _left_epochs(self, epoch):
        left = self.epochs - (epoch + 1)
        best = self._best()
        if best is not None and self.early.patience:
            left = min(left, max(best[1] + self.early.patience - epoch, 0))
        return left

    def on_epoch_end(self, epoch, logs=None):
        self.done = epoch + 1
        now = time.perf_counter()
        due = (self.every is not None and (epoch + 1) % self.every == 0) or now - self.last >= PROGRESS_SECONDS
        if not due or epoch + 1 == self.epochs:
            return
        self.last = now
        elapsed = now - self.start
        parts = [f"epoch {epoch + 1}/{self.epochs}"]
        logs = logs or {}
        if "loss" in logs:
            parts.append(f"loss {float(logs['loss']):.4g}")
        monitored = _finite(logs.get(self.estimator._monitor))
        if monitored is not None:
            parts.append(f"validation {self.estimator._monitor.removeprefix('val_').replace('_', ' ')} "
                         f"{float(monitored):.4g}")
        best = self._best()
        if best is not None:
            parts.append(f"best {best[0]:.4g} at epoch {best[1] + 1}")
        left = self._left_epochs(epoch) * elapsed / (epoch + 1)
        parts.append(f"{elapsed:.0f} s elapsed, at most {left:.0f} s left")
        self.estimator._say(", ".join(parts))

    def on_train_end(self, logs=None):
        elapsed = time.perf_counter() - self.start
        text = f"training ended after {self.done} of at most {self.epochs} epochs ({elapsed:.1f} s)"
        best = self._best()
        if best is not None:
            kept = "the starting model" if best[1] < 0 else f"epoch {best[1] + 1}"
            text += (f"; kept {kept}, validation "
                     f"{self.estimator._monitor.removeprefix('val_').replace('_', ' ')} {best[0]:.4g}")
        self.estimator._say(text)


class _EarlyStopping(keras.callbacks.EarlyStopping):
    """Keras' early stopping with `adaptive_patience` (the ``patience``
    given is its upper bound; ``adaptive=None`` keeps it fixed), optionally
    with the starting model as a candidate: ``initial=(its monitored value,
    its weights)`` is the best before epoch 1 (restored at the end unless an
    epoch beats it)."""

    def __init__(self, *args, initial=None, adaptive=ADAPTIVE_PATIENCE, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial = initial
        self.adaptive = adaptive
        self.max_patience = self.patience

    def on_epoch_end(self, epoch, logs=None):
        # Keras compares the epochs since the best with self.patience only when
        # this epoch is no improvement, so the best epoch read here is the one
        # that comparison uses.
        self.patience = adaptive_patience(getattr(self, "best_epoch", 0), self.max_patience, self.adaptive)
        super().on_epoch_end(epoch, logs)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self.initial is not None:
            self.best, self.best_weights = self.initial
            self.best_epoch = -1


class TreeClassifierBase(TreeEstimator):
    """Classifier side of `TreeEstimator`: ``predict`` and ``predict_proba``."""

    _task = "classification"

    def predict_proba(self, X):
        """Class probabilities, ``(n_samples, n_classes)`` in the order of ``classes_``."""
        return self._predict_proba(X)

    def predict_log_proba(self, X):
        """The natural logarithm of `predict_proba` (``-inf`` where a
        probability is 0), ``(n_samples, n_classes)``."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """The most probable class of every sample (labels as given to ``fit``)."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


class TreeRegressorBase(TreeEstimator):
    """Regressor side of `TreeEstimator`: ``predict`` in the units of ``y``."""

    _task = "regression"

    def predict(self, X):
        """Predicted targets, shaped like the ``y`` given to ``fit``."""
        return self._predict_regression(X)
