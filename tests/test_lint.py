"""ruff's lint rules (``[tool.ruff]`` in pyproject.toml) hold over the repository's Python files."""

import os
import shutil
import subprocess
import sys

from tests.conftest import REPO_ROOT


def _ruff():
    found = shutil.which("ruff", path=os.path.join(sys.prefix, "bin")) or shutil.which("ruff")
    assert found is not None, "ruff is not installed: it is in the dev extra (pip install -e '.[dev]')"
    return found


def test_ruff_check_passes():
    result = subprocess.run([_ruff(), "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
