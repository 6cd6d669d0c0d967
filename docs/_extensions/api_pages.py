"""MkDocs hook: writes the API reference pages (``api/*.md``) at build time.

Every public object of keras-trees is declared where it is defined, with
``@keras_trees_export("keras_trees.<package>")`` (or ``export_constants``);
this reads those declarations from the sources (no import: the build needs no
Keras backend) and writes one page per public package, a mkdocstrings entry
per object on its defining module, so the reference always holds exactly the
public API. ``tests/test_docs.py`` checks that it finds what
``keras_trees.api_export`` registers at run time.
"""

import ast
import os

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (page name, package, one line), in the order of the reference.
API_PAGES = [
    ("keras_trees", "keras_trees", "The top-level objects: the `Forest` value type and the exports."),
    ("layers", "keras_trees.layers", "The tree layers, one family per class."),
    ("callbacks", "keras_trees.callbacks", "Training callbacks: annealing, EM leaves, greedy growth."),
    ("losses", "keras_trees.losses", "Losses of the convex polytope trees' information-theoretic training."),
    ("estimators", "keras_trees.estimators", "scikit-learn estimators, one classifier and one regressor per family."),
    ("inspection", "keras_trees.inspection", "Export, statistics, importances, rules and plots of trained trees."),
    ("ops", "keras_trees.ops", "The tree operations: compiled kernels and their `keras.ops` references."),
    ("tuner", "keras_trees.tuner", "Keras Tuner `HyperModel`s, one per family (extra `tuner`)."),
    ("interop", "keras_trees.interop", "scikit-learn trees as `Forest` values."),
    ("constraints", "keras_trees.constraints", "Weight constraints."),
    ("regularizers", "keras_trees.regularizers", "Weight regularizers."),
    ("initializers", "keras_trees.initializers", "Weight initializers."),
    ("distribute", "keras_trees.distribute", "Strategies Keras' `fit` can train with on several workers."),
    ("streaming", "keras_trees.streaming", "Training data as batches (arrays or streams), sums over workers."),
    ("topology", "keras_trees.topology", "The heap topology every hard-routed family shares."),
]


def _string(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def declared_exports():
    """``{package: {public name: (defining module, qualified name) or None for a constant}}``."""
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "keras_trees")):
        for filename in sorted(files):
            if not filename.endswith(".py"):
                continue
            path = os.path.join(folder, filename)
            module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    for decorator in node.decorator_list:
                        if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "keras_trees_export"
                                and decorator.args and _string(decorator.args[0])):
                            name = next((_string(k.value) for k in decorator.keywords if k.arg == "name"), None)
                            name = name or (_string(decorator.args[1]) if len(decorator.args) > 1 else None) or node.name
                            found.setdefault(_string(decorator.args[0]), {})[name] = (module, node.name)
                elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                      and getattr(node.value.func, "id", None) == "export_constants"):
                    args = [_string(a) for a in node.value.args]
                    for name in args[2:]:
                        found.setdefault(args[0], {})[name] = None
    return found


def api_page(package, summary, exported):
    lines = [f"# `{package}`", "", summary, "",
             "<!-- Written at build time by docs/_extensions/api_pages.py from the @keras_trees_export declarations. -->",
             ""]
    constants = []
    for name in sorted(exported, key=lambda n: (not n[0].isupper(), n.lower())):  # classes, then functions
        where = exported[name]
        if where is None:
            constants.append(name)
            continue
        module, qualname = where
        lines += [f"::: {module}.{qualname}", "    options:", f'      heading: "{package}.{name}"', ""]
    if constants:
        lines += ["## Constants", ""]
        lines += [f"* `{package}.{name}`" for name in constants]
        lines.append("")
    return "\n".join(lines)


def api_pages():
    """``{path under docs/: Markdown}`` of the reference."""
    exports = declared_exports()
    return {f"api/{page}.md": api_page(package, summary, exports.get(package, {}))
            for page, package, summary in API_PAGES}


def on_files(files, config):
    for path, content in api_pages().items():
        files.append(File.generated(config, path, content=content))
    return files
