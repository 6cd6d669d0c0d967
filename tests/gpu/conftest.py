"""Keeps pytest out of this folder: its scripts are run by tests/gpu/run_check.sh
on a GPU machine (tests/test_gpu_check.py checks them cheaply on the CPU), and
``--doctest-modules`` would otherwise import them in the normal test run."""

collect_ignore_glob = ["*.py"]
