"""The examples run as written (at a reduced size)."""

import os

from tests.conftest import REPO_ROOT, run_python


def run_script(path, *args, tmp_path):
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{path!r}, *{list(args)!r}]\n"
        f"runpy.run_path({os.path.join(REPO_ROOT, path)!r}, run_name='__main__')\n"
    )
    return run_python(code, cwd=tmp_path)


def test_quickstart(tmp_path):
    out = run_script("examples/quickstart.py", "--epochs", "2", "--trees", "4", "--depth", "3",
                     tmp_path=tmp_path)
    assert "test accuracy" in out
    assert "identical predictions = True" in out


def test_cnn_tel_digits(tmp_path):
    out = run_script("examples/cnn_tel_digits.py", "--seeds", "1", "--epochs", "2", tmp_path=tmp_path)
    assert "cnn_tel" in out and "cnn_dense" in out
