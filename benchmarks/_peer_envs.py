"""Virtual environments for the differentiable-tree peers of benchmarks/peers.py.

Each peer pins libraries of its own (GRANDE pins TensorFlow 2.16.1; NODE comes
with PyTorch and PyTorch Lightning through ``pytorch-tabular``), so it runs in
a virtual environment of its own, never in ours. The environment is created
on first use under ``$KERAS_TREES_CACHE_DIR/peer-envs/<name>`` (default
``~/.cache/keras_trees/peer-envs/<name>``) and reused afterwards. A marker file
is written only after every install step succeeded and records the steps, so
an environment left half-built by an interrupted or failed install, or built
with other install steps than those below, is removed and rebuilt.

Usage (creates the environments without running a benchmark):

    python benchmarks/_peer_envs.py node grande
"""

import json
import os
import shutil
import subprocess
import sys
import time

MARKER = "keras-trees-peer-env.json"

# Install steps per peer: each step is a list of alternatives (pip argument
# lists) tried in order until one succeeds. NODE prefers PyTorch's CPU-only
# wheels (about 0.2 GB instead of several GB of CUDA libraries); where that
# index cannot be reached (one quick try), the PyPI wheel is used.
PEERS = {
    "node": [
        [["torch", "--index-url", "https://download.pytorch.org/whl/cpu", "--retries", "0", "--timeout", "20"],
         ["torch"]],
        # pytorch-tabular 1.2.0 imports requests without declaring it.
        [["pytorch-tabular==1.2.0", "requests"]],
    ],
    "grande": [
        # GRANDE 0.1.6 pins category-encoders 2.6.1, which fails with
        # scikit-learn >= 1.6 (no _get_tags) and predates pandas 3.
        [["GRANDE==0.1.6", "scikit-learn>=1.3,<1.6", "pandas>=2.0.3,<3"]],
    ],
}


def cache_root():
    root = os.environ.get("KERAS_TREES_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "keras_trees")
    return os.path.join(root, "peer-envs")


def env_dir(name):
    return os.path.join(cache_root(), name)


def env_python(name):
    return os.path.join(env_dir(name), "bin", "python")


def is_ready(name):
    """Whether the environment was fully installed with the current install steps."""
    info = describe(name)
    return info is not None and info.get("steps") == PEERS[name]


def _run(cmd, log):
    print("  $", " ".join(cmd), file=log, flush=True)
    return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode


def ensure_env(name, log=None, python=None):
    """The interpreter of peer ``name``'s environment, created if missing or half-built.

    ``python`` creates the environment (default: the running interpreter);
    ``log`` (a text stream) gets a line when an environment was created.

    Raises RuntimeError naming the failed pip step (its output is in the
    ``install.log`` of the environment's directory).
    """
    if name not in PEERS:
        raise ValueError(f"name: expected one of {sorted(PEERS)}, got {name!r}")
    path = env_dir(name)
    if is_ready(name):
        return env_python(name)
    if os.path.exists(path):
        shutil.rmtree(path)  # half-built (no marker) or built with other install steps
    os.makedirs(path)
    python = python or sys.executable
    start = time.time()
    log_path = os.path.join(path, "install.log")
    with open(log_path, "w") as log_file:
        if _run([python, "-m", "venv", path], log_file):
            raise RuntimeError(f"creating the {name} peer environment failed: see {log_path}")
        pip = [env_python(name), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        _run(pip[:3] + ["install", "--disable-pip-version-check", "-q", "--upgrade", "pip"], log_file)
        for step in PEERS[name]:
            for alternative in step:
                if _run(pip + alternative, log_file) == 0:
                    break
            else:
                raise RuntimeError(f"installing {step[-1]} into the {name} peer environment failed: "
                                   f"see {log_path}")
        freeze = subprocess.run([env_python(name), "-m", "pip", "freeze"], capture_output=True,
                                text=True).stdout.split()
    seconds = time.time() - start
    with open(os.path.join(path, MARKER), "w") as handle:
        json.dump({"install_seconds": round(seconds, 1), "steps": PEERS[name], "packages": freeze}, handle, indent=1)
    if log is not None:
        print(f"created the {name} peer environment in {seconds:.0f} s: {path}", file=log, flush=True)
    return env_python(name)


def describe(name):
    """The marker of a completed install (time, steps, packages), or None."""
    marker = os.path.join(env_dir(name), MARKER)
    if not os.path.exists(marker):
        return None
    with open(marker) as handle:
        return json.load(handle)


if __name__ == "__main__":
    for peer in sys.argv[1:] or sorted(PEERS):
        ensure_env(peer, log=sys.stdout)
