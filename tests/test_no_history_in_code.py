"""Code, comments and user docs say what holds now: no issue number (``#16``,
"issue 31") and no date; the story of a change lives in its commit message,
and what a developer needs later in ``benchmarks/NOTES.md`` or
``tests/gpu/NOTES.md`` (not scanned, nor CHANGELOG.md, whose releases carry
dates)."""

import pathlib
import re

from tests.conftest import REPO_ROOT

ROOT = pathlib.Path(REPO_ROOT)
FOLDERS = ("keras_trees", "custom_ops", "tests", "benchmarks", "examples", "tutorials", "docs", ".ci")
SUFFIXES = {".py", ".md", ".sh", ".h", ".cc", ".cu", ".cuh", ".toml", ".yml", ""}
SKIPPED = {"NOTES.md", "CHANGELOG.md", pathlib.Path(__file__).name}  # this file quotes examples
ISSUE = re.compile(r"(?<![\w&/#])#\d{1,3}\b(?!-)|\bissues? #?\d+\b", re.IGNORECASE)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# Data, not history: a named benchmark problem and a test's date column.
ALLOWED = (re.compile(r"Friedman #\d(-#\d)?"), re.compile(r"date_range\(\"20\d\d-"))


def _files():
    yield ROOT / "README.md"
    yield ROOT / "pyproject.toml"
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in SUFFIXES and path.name not in SKIPPED \
                    and "__pycache__" not in path.parts and path.stat().st_size < 2_000_000:
                yield path


def test_no_issue_numbers_or_dates():
    found, paths = [], list(_files())
    assert len(paths) > 300, f"only {len(paths)} files scanned"
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            cleaned = line
            for allowed in ALLOWED:
                cleaned = allowed.sub("", cleaned)
            if ISSUE.search(cleaned) or DATE.search(cleaned):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "issue numbers or dates (history belongs in commit messages):\n" + "\n".join(found)


def test_the_check_sees_them():
    assert ISSUE.search("refused (#16).") and ISSUE.search("see issue 31") and DATE.search("run of 2026-11-29")
    assert not ISSUE.search("color #ff0000") and not ISSUE.search("a&#39;b")
    assert not ISSUE.search(ALLOWED[0].sub("", "Friedman #1-#3"))
