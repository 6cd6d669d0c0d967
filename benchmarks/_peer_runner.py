"""Trains one differentiable-tree peer inside that peer's own environment.

Run by benchmarks/peers.py with the interpreter of the peer's virtual
environment (benchmarks/_peer_envs.py), never ours:

    <env>/bin/python benchmarks/_peer_runner.py PEER SPLIT.npz RESULT.json [--seed S] [--epochs N]

``SPLIT.npz`` holds ``x_train, y_train, x_val, y_val, x_test`` (standardized
float32 features, integer labels 0..K-1) and ``num_classes``. The peer trains
on the train part with early stopping on the validation part and writes the
class probabilities of the test rows, the training time and the model size
(trainable parameters) to ``RESULT.json``; peers.py scores them with the same
code as every other model. This file imports only NumPy and the peer's own
libraries (it must run in the peers' environments).

Peers, with their documented defaults:

* ``node``: NODE (Popov et al., ICLR 2020) through pytorch-tabular's
  ``NodeConfig`` (1 layer of 2048 oblivious trees of depth 6, entmax15) with
  pytorch-tabular's default trainer (batch 64, at most 10 epochs, early
  stopping on the validation loss with patience 3, best checkpoint restored).
* ``grande``: GRANDE (Marton et al., ICLR 2024) with the parameters and
  training arguments of its README (2048 trees of depth 5, batch 64, at most
  1000 epochs, early stopping on the validation loss with patience 25, best
  weights restored).

``--epochs`` caps the number of epochs (for quick runs).
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np


def run_node(data, seed, epochs):
    import pandas as pd
    from pytorch_tabular import TabularModel
    from pytorch_tabular.config import DataConfig, OptimizerConfig, TrainerConfig
    from pytorch_tabular.models import NodeConfig

    num_classes = int(data["num_classes"])
    columns = [f"f{i}" for i in range(data["x_train"].shape[1])]

    def frame(x, y=None):
        df = pd.DataFrame(x, columns=columns)
        if y is not None:
            df["target"] = y.astype(np.int64)
        return df

    with tempfile.TemporaryDirectory() as workdir:
        trainer = dict(accelerator="cpu", progress_bar="none", seed=seed,
                       checkpoints_path=os.path.join(workdir, "checkpoints"))
        if epochs:
            trainer["max_epochs"] = epochs
        model = TabularModel(
            data_config=DataConfig(target=["target"], continuous_cols=columns),
            model_config=NodeConfig(task="classification"),
            optimizer_config=OptimizerConfig(),
            trainer_config=TrainerConfig(**trainer),
            verbose=False,
        )
        start = time.perf_counter()
        model.fit(train=frame(data["x_train"], data["y_train"]),
                  validation=frame(data["x_val"], data["y_val"]), seed=seed)
        seconds = time.perf_counter() - start
        predicted = model.predict(frame(data["x_test"]))
        proba = np.zeros((len(data["x_test"]), num_classes))
        for k in range(num_classes):
            column = f"target_{k}_probability"
            if column in predicted:
                proba[:, k] = predicted[column].to_numpy()
        epochs_run = int(model.trainer.current_epoch)
        size = int(model.num_params)
    import importlib.metadata

    return dict(proba=proba, fit_seconds=seconds, size=size, size_unit="parameters",
                epochs=epochs_run,
                versions={name: importlib.metadata.version(name) for name in ("pytorch-tabular", "torch")})


def run_grande(data, seed, epochs):
    import sklearn.preprocessing  # noqa: F401  (GRANDE uses sklearn.preprocessing and
    import sklearn.utils.class_weight  # noqa: F401  sklearn.utils.class_weight after a bare "import sklearn")
    from GRANDE import GRANDE

    num_classes = int(data["num_classes"])
    # The README's parameters (equal to GRANDE.default_parameters()).
    params = GRANDE.default_parameters()
    args = {
        "epochs": epochs or 1_000,
        "early_stopping_epochs": 25,
        "batch_size": 64,
        "cat_idx": [],
        "objective": "binary" if num_classes == 2 else "classification",
        "random_seed": seed,
        "verbose": 0,
    }
    model = GRANDE(params=params, args=args)
    start = time.perf_counter()
    model.fit(X_train=data["x_train"], y_train=data["y_train"].astype(np.float64),
              X_val=data["x_val"], y_val=data["y_val"].astype(np.float64))
    seconds = time.perf_counter() - start
    proba = np.asarray(model.predict(data["x_test"]), dtype=np.float64)
    # GRANDE keeps its parameters in plain tf.Variable attributes, which Keras 3
    # does not track in model.trainable_variables: count the four of build_model.
    size = int(sum(np.prod(getattr(model, name).shape) for name in (
        "estimator_weights", "split_values", "split_index_array", "leaf_classes_array")))
    import importlib.metadata

    return dict(proba=proba, fit_seconds=seconds, size=size, size_unit="parameters",
                epochs=len(model.history.history.get("loss", [])),
                versions={name: importlib.metadata.version(name) for name in ("GRANDE", "tensorflow")})


PEERS = {"node": run_node, "grande": run_grande}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("split", help=".npz with x_train, y_train, x_val, y_val, x_test, num_classes")
    parser.add_argument("result", help="JSON file to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="cap on the training epochs")
    args = parser.parse_args(argv)
    with np.load(args.split) as archive:
        data = {key: archive[key] for key in archive.files}
    result = PEERS[args.peer](data, args.seed, args.epochs)
    proba = np.asarray(result.pop("proba"), dtype=np.float64)
    expected = (len(data["x_test"]), int(data["num_classes"]))
    if proba.shape != expected:
        raise ValueError(f"{args.peer} returned probabilities of shape {proba.shape}, expected {expected}")
    result["proba"] = proba.tolist()
    result["python"] = sys.version.split()[0]
    with open(args.result, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
