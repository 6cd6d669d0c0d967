"""The documentation site's code blocks and its generated API reference.

``code_blocks(path)`` returns the fenced blocks of a Markdown page with the
marker that may precede one: ``<!-- not run: REASON -->`` right above a block
keeps it from running (only with a reason from ``NOT_RUN_REASONS``).
``api_pages_hook()`` is the MkDocs hook that writes the API reference
(``docs/_extensions/api_pages.py``) as a module.
"""

import importlib.util
import os
import re

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO_ROOT, "docs")

# Why a block may be shown without running in CI; anything else is refused.
NOT_RUN_REASONS = ("needs a GPU", "needs several machines", "needs Ray", "needs files of your own")


def api_pages_hook():
    path = os.path.join(DOCS, "_extensions", "api_pages.py")
    spec = importlib.util.spec_from_file_location("keras_trees_docs_api_pages", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```\s*$",
                    re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!--\s*not run:\s*(?P<reason>[^>]*?)\s*-->\s*$")


def code_blocks(path):
    """``[(line, language, code, not_run_reason or None)]`` of the fenced blocks of a Markdown file."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    blocks = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        indent = len(match.group("indent"))
        body = "\n".join(l[indent:] for l in match.group("body").splitlines())
        blocks.append((line, match.group("lang"), body, marker.group("reason") if marker else None))
    return blocks


def pages():
    """Every Markdown page of the site, relative to the repository root."""
    found = []
    for folder, _, files in os.walk(DOCS):
        found += [os.path.relpath(os.path.join(folder, f), REPO_ROOT) for f in files if f.endswith(".md")]
    return sorted(found)
