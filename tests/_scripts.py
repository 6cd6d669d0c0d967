"""Running the repository's scripts (benchmarks, examples, tutorials) from the tests.

``run_in_process`` runs ``python SCRIPT ARGS`` inside the test's own process
(``runpy``, as ``__main__``, with the script's folder first on ``sys.path`` as
Python puts it): the TensorFlow import and the compiled kernels are paid once
per pytest worker instead of once per script. Each test still names its
script, and a script that fails (an exception or a non-zero ``sys.exit``)
fails that test with the script's name and output.

``quoted_scripts`` lists the scripts the documentation quotes a command for
(``python benchmarks/x.py ...``, ``cd benchmarks && python x.py``,
``examples/x.py``, ``tutorials/.../x.py``), for the check that each one has a
smoke test.
"""

import os
import re
import runpy
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_in_process(script, args, cwd, capfd):
    """stdout of ``python <script> <args>`` run in this process from ``cwd``
    (``script`` relative to the repository root). Anything the script's own
    child processes write to the same descriptors is included."""
    import keras

    path = os.path.join(REPO_ROOT, script)
    saved_argv, saved_path, saved_cwd = sys.argv, list(sys.path), os.getcwd()
    capfd.readouterr()  # drop what ran before
    sys.argv = [path, *map(str, args)]
    sys.path.insert(0, os.path.dirname(path))
    os.chdir(cwd)
    failure = cause = None
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            failure = f"exited with {exit_.code!r}"
    except Exception as error:  # noqa: BLE001  (reported with the script's output)
        failure, cause = f"raised {type(error).__name__}: {error}", error
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        keras.backend.clear_session()
        try:
            import matplotlib.pyplot as plt

            plt.close("all")
        except ImportError:
            pass
    out, err = capfd.readouterr()
    if failure:
        message = (f"python {script} {' '.join(map(str, args))} {failure}\n"
                   f"--- stdout\n{out[-6000:]}\n--- stderr\n{err[-6000:]}")
        raise AssertionError(message) from cause
    return out


def line_with(out, *words):
    """The first line of ``out`` that holds every one of ``words`` (the table
    header of a script), or a failed assertion that shows the output."""
    for line in out.splitlines():
        if all(word in line for word in words):
            return line
    raise AssertionError(f"no line with {words!r} in the output:\n{out[-4000:]}")


def lines_matching(out, pattern):
    """The lines of ``out`` that match the regular expression ``pattern`` (a
    table row); at least one, else a failed assertion that shows the output."""
    found = [line for line in out.splitlines() if re.search(pattern, line)]
    assert found, f"no line matches {pattern!r} in the output:\n{out[-4000:]}"
    return found


_QUOTED = re.compile(
    r"(?:(?<![\w/])(?P<dir>benchmarks|examples|tutorials/[\w-]+)/(?P<name>[\w]+\.py))"
    r"|(?:cd benchmarks && (?:\S*python\S*) (?P<bench>\w+\.py))"
)


def quoted_scripts(*docs):
    """Scripts (paths relative to the repository root) that ``docs`` (paths of
    Markdown files) name in a ``python`` command: every ``benchmarks/*.py``,
    ``examples/*.py`` or ``tutorials/*/*.py`` path that exists, and
    ``cd benchmarks && python x.py``. Helper modules (``_data.py``, ...) are not scripts."""
    found = set()
    for doc in docs:
        with open(os.path.join(REPO_ROOT, doc)) as handle:
            text = handle.read()
        for match in _QUOTED.finditer(text):
            if match.group("bench"):
                path = f"benchmarks/{match.group('bench')}"
            else:
                path = f"{match.group('dir')}/{match.group('name')}"
            if os.path.basename(path).startswith("_") or not os.path.exists(os.path.join(REPO_ROOT, path)):
                continue
            found.add(path)
    return found
