"""The documentation site (docs/, mkdocs.yml) builds, and every code block on it runs.

* ``mkdocs build --strict`` into a temporary folder: any warning fails, among
  them a broken link or anchor, a page missing from the nav, an API reference
  entry that does not resolve (the reference is generated from the docstrings
  by mkdocstrings; its pages are written at build time by
  ``docs/_extensions/api_pages.py``). About 10 s.
* every ``python`` block of every page runs, the blocks of a page in order in
  one namespace (a page may build on its earlier blocks), in a fresh temporary
  working directory; a block is shown without running only under a
  ``<!-- not run: REASON -->`` marker with a reason of ``NOT_RUN_REASONS``.
  The same for the landing page, README.md.
* the API reference lists every public object, nothing else.
* the landing page stays short and its commands are the CI's.
"""

import os
import re
import subprocess
import sys
import time

import pytest

from tests import _docs

ROOT = _docs.REPO_ROOT
PAGES = _docs.pages()
RUN_LANGUAGES = {"python", "py"}
MAX_NOT_RUN = 3  # "rare": the GPU-only and cluster-only commands


def run_blocks(page, tmp_path, monkeypatch):
    import keras

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    namespace = {"__name__": "__docs__"}
    ran = 0
    for line, language, code, not_run in _docs.code_blocks(os.path.join(ROOT, page)):
        if language not in RUN_LANGUAGES or not_run:
            continue
        start = time.time()
        try:
            exec(compile(code, f"{page}:{line}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001  (reported with the block's place)
            raise AssertionError(f"the code block at {page}:{line} failed: {type(error).__name__}: {error}") from error
        finally:
            keras.backend.clear_session()
        print(f"{page}:{line} ran in {time.time() - start:.1f} s")
        ran += 1
    return ran


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES + ["README.md"])
def test_code_blocks_run(page, tmp_path, monkeypatch):
    run_blocks(page, tmp_path, monkeypatch)


def test_blocks_not_run_are_rare_and_say_why():
    not_run = []
    for page in PAGES + ["README.md"]:
        for line, language, _, reason in _docs.code_blocks(os.path.join(ROOT, page)):
            if reason is not None:
                assert reason in _docs.NOT_RUN_REASONS, (
                    f"{page}:{line}: a block is not run only for one of {_docs.NOT_RUN_REASONS}, got {reason!r}")
                assert language in RUN_LANGUAGES, f"{page}:{line}: a not-run marker on a {language!r} block"
                not_run.append(f"{page}:{line}")
    assert len(not_run) <= MAX_NOT_RUN, f"too many blocks not run: {not_run}"


def test_every_page_has_a_python_block_or_is_text():
    """A Python block written in another fence language would silently not run."""
    for page in PAGES + ["README.md"]:
        for line, language, code, _ in _docs.code_blocks(os.path.join(ROOT, page)):
            if language in ("", "text", "console", "bash", "sh", "pycon", "toml", "yaml", "json"):
                looks_python = re.search(r"^(import |from \w+ import |\w+ = keras)", code, re.MULTILINE)
                assert not (looks_python and language not in ("bash", "sh", "console")), (
                    f"{page}:{line}: Python code in a {language!r} block is not run; fence it as python")


def test_api_reference_lists_the_public_api():
    """The reference pages, written at build time from the ``@keras_trees_export``
    declarations in the sources, list exactly what ``keras_trees.api_export``
    registers at run time, for every public package."""
    import keras_trees  # noqa: F401  (imports every public package)
    import keras_trees.estimators  # noqa: F401
    import keras_trees.tuner  # noqa: F401
    from keras_trees import api_export

    hook = _docs.api_pages_hook()
    declared = hook.declared_exports()
    documented = {package for _, package, _ in hook.API_PAGES}
    assert set(api_export.packages()) <= documented, "a public package has no API page: add it to API_PAGES"
    for package in documented:
        runtime = api_export.exports(package)
        assert set(declared.get(package, {})) == set(runtime), f"{package}: the sources and the registry differ"
        for name, where in declared.get(package, {}).items():
            symbol = runtime[name]
            if where is not None:
                assert (symbol.__module__, symbol.__qualname__) == where, f"{package}.{name} is defined elsewhere"


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    start = time.time()
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
    print(f"mkdocs build --strict in {time.time() - start:.1f} s")
    assert (tmp_path / "site" / "api" / "layers" / "index.html").exists()
    html = (tmp_path / "site" / "api" / "layers" / "index.html").read_text()
    assert "TreeEnsembleLayer" in html and "transition_width" in html  # rendered from the docstrings
    # Docstrings are in the renderer's form: no Sphinx role shows as raw text,
    # no parameter table with an empty Type column.
    for page in (tmp_path / "site" / "api").glob("*/index.html"):
        text = re.sub(r"<[^>]+>", "", page.read_text())
        roles = re.findall(r":(?:class|func|meth|mod|attr|data|obj|exc):`?[\w.~]+", text)
        assert not roles, f"{page.parent.name}: raw Sphinx roles in the API reference: {roles[:5]}"


def test_readme_is_a_landing_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    assert len(text.splitlines()) <= 260, "README.md is the landing page: about 250 lines at most"
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as handle:
        ci = handle.read()
    test_command = re.search(r"^python3 -m venv .*$", ci, re.MULTILINE).group(0)
    assert test_command in text, "the README's test command is .ci/run's"
    assert 'pip install -e ".[tensorflow,examples]"' in text, "the demo command installs the default backend"
    for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", text):
        assert os.path.exists(os.path.join(ROOT, target)), f"README.md links to a missing file: {target}"


def test_deployment_page_opens_with_the_import_that_loading_needs():
    with open(os.path.join(ROOT, "docs", "deployment.md"), encoding="utf-8") as handle:
        top = "".join(handle.readlines()[:8])
    assert "import keras_trees" in top and "Could not locate class" in top
    with open(os.path.join(ROOT, ".gitignore"), encoding="utf-8") as handle:
        assert "/site/" in handle.read().split(), "mkdocs build's output folder is not ignored"


@pytest.mark.slow
def test_loading_without_the_import_fails_as_the_deployment_page_says(tmp_path):
    """A .keras file with a keras_trees layer (saved here, where keras_trees is
    imported) does not load in a fresh process that has not imported it."""
    import keras

    from keras_trees.layers import EndToEndTree
    from tests.conftest import run_python

    model = keras.Sequential([keras.Input((3,)), EndToEndTree(max_depth=2, num_classes=2, seed=0)])
    model.save(str(tmp_path / "m.keras"))
    keras.backend.clear_session()
    out = run_python("""
        import keras
        try:
            keras.saving.load_model("m.keras")
        except Exception as error:
            print("LAST:", str(error).strip().splitlines()[-1])
    """, cwd=tmp_path)
    assert "Could not locate class 'EndToEndTree'" in out.split("LAST:")[-1], out
