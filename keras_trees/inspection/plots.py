"""Plots of trained trees (matplotlib, an optional dependency: ``pip install keras-trees[examples]``).

* [`plot_tree`][keras_trees.inspection.plots.plot_tree]: a tree diagram from an exported layer dict (or a
  [`Forest`][keras_trees.forest.Forest]); edge widths
  show the samples routed through them, leaves show class distributions (or
  their values).
* [`plot_split_weights`][keras_trees.inspection.plots.plot_split_weights]: the linear split weights of a tree drawn as
  images (the end-to-end paper's Figures 4-5).
* [`plot_decision_regions`][keras_trees.inspection.plots.plot_decision_regions]: a model's predicted class over a 2D input plane.
"""

import numbers

import numpy as np

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.forest import Forest, check_document
from keras_trees.inspection import names as _names
from keras_trees.inspection import rules as _rules
from keras_trees.inspection.export import _is_stream, require_arrays


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("keras_trees.inspection plots need matplotlib: pip install matplotlib") from e
    return plt


def _document(doc, x=None, y=None):
    """An exported layer dict, or the dict of a [`Forest`][keras_trees.forest.Forest]
    (or of a tree layer's ``to_forest()``)."""
    if isinstance(doc, dict):
        check_document(doc)
        return doc
    if x is not None and not _is_stream(x):  # a stream is summed batch by batch (Forest.node_statistics)
        x = _names.as_array(x)
    return _names.as_forest(doc).to_dict(x, y)


def _tree(doc, tree):
    """The tree ``tree`` of a document (an integer in ``[-num_trees, num_trees)``, as
    [`Forest.tree`][keras_trees.forest.Forest.tree])."""
    count = len(doc["trees"])
    if isinstance(tree, bool) or not isinstance(tree, numbers.Integral) or not -count <= tree < count:
        raise ValueError(f"tree must be an integer in [0, {count}), got {tree!r}")
    return doc["trees"][int(tree)]


def _layout(nodes, shown):
    """x positions: shown leaves (and truncated splits) left to right in order,
    splits centred over children; also each node's width in leaves."""
    xs, span, counter = {}, {}, [0]

    def place(i):
        node = nodes[i]
        if node["type"] == "leaf" or i not in shown:
            xs[i], span[i] = counter[0], 1
            counter[0] += 1
        else:
            place(node["left"])
            place(node["right"])
            xs[i] = 0.5 * (xs[node["left"]] + xs[node["right"]])
            span[i] = span[node["left"]] + span[node["right"]]

    place(0)
    return xs, span


def _visible_depth(nodes, max_depth, max_leaves):
    """The deepest split level drawn: ``max_depth``, lowered until at most
    ``max_leaves`` leaves (and cut branches) remain."""
    depth = max(topology.position_depth(i) for i in nodes) if max_depth is None else int(max_depth)
    while max_leaves is not None and depth > 0 and sum(
            topology.position_depth(i) == depth or (nodes[i]["type"] == "leaf" and topology.position_depth(i) < depth)
            for i in nodes) > max_leaves:
        depth -= 1
    return depth


def _fits(text, room_inches, fontsize):
    return len(text) * 0.62 * fontsize / 72.0 <= room_inches


def _split_label(forest, tree, i, names, decimals, room, fontsize):
    """The text drawn at split ``i``: the test that sends samples right with
    its two largest terms, else with one (an oblique split then says how many
    terms it has, ``+ ... (k more of n terms)``), else that text cut to the
    room with an ellipsis; None where not even a few characters fit."""
    for terms in (2, 1):
        label = _rules.split_text(forest, tree, i, names, decimals, terms=terms)[1]
        if _fits(label, room, fontsize):
            return label
    keep = int(room * 72.0 / (0.62 * fontsize)) - 1
    if keep < 6:
        return None
    return label[:keep].rstrip() + "\u2026"


@keras_trees_export("keras_trees.inspection")
def plot_tree(doc, tree=0, ax=None, class_names=None, max_leaves=None, feature_names=None, max_depth=None,
              fontsize=None, decimals=3, x=None, y=None):
    """Draws tree ``tree`` of an exported layer dict ([`export_trees`][keras_trees.inspection.export.export_trees]), a
    [`Forest`][keras_trees.forest.Forest] or a tree layer.

    Edge widths are proportional to ``samples`` when the export was given data.
    Leaves of classifiers are drawn as small bar charts of their class
    distribution (``class_counts`` when present, else the leaf values). Splits
    are labelled with the test that sends samples right (the rule text of
    [`export_text`][keras_trees.inspection.rules.export_text]).

    Deep trees stay readable: the figure grows with the number of leaves (up
    to 60 inches), a split's label is shortened to the width of its subtree
    (one term of an oblique split, then cut with an ellipsis; a dot marks the
    split only where not even a few characters fit), leaves reached by no sample
    (``samples == 0``) are drawn as a faint dot without text, and sample
    counts appear only where they fit.

    Args:
        class_names: legend entries for the class bars.
        max_leaves: draw at most this many leaves: deeper levels are cut
            (as ``max_depth``) until they fit; None draws all.
        feature_names: names in split labels; default the document's.
        max_depth: draw splits down to this depth; a split below is drawn as a
            "..." marker with its sample count.
        fontsize: of the labels (default 7, 6 for more than 128 leaves).
        decimals: digits in split labels.
        x, y: for a forest or layer (not a dict): rows its splits read and
            optional labels, for sample counts ([`Forest.to_dict`][keras_trees.forest.Forest.to_dict]); ``x``
            may be a stream of ``(x, y[, sample_weight])`` batches (``y``
            None), summed batch by batch ([`Forest.node_statistics`][keras_trees.forest.Forest.node_statistics]).

    A fitted keras-trees estimator draws its trees over its input columns
    (``estimator.forest_``); ``x, y`` are then what its ``fit`` takes,
    ``feature_names`` names its input columns and ``class_names`` defaults to
    its ``classes_``.

    Returns the matplotlib ``Axes``.
    """
    plt = _pyplot()
    if _names.is_estimator(doc):
        estimator = doc
        doc, x = _names.from_estimator(estimator, x, feature_names, "plot_tree")
        if class_names is None and estimator._task == "classification":
            class_names = [str(c) for c in estimator.classes_]
        y = _names.estimator_labels(estimator, y)
        feature_names = None
    doc = _document(doc, x, y)
    forest = Forest.from_dict(doc)
    names = _names.resolve(forest.input_dim, feature_names, forest=forest)
    nodes = {n["id"]: n for n in _tree(doc, tree)["nodes"]}
    depth = _visible_depth(nodes, max_depth, max_leaves)
    shown = {i for i in nodes if topology.position_depth(i) < depth or nodes[i]["type"] == "leaf"}
    shown = {i for i in shown if topology.position_depth(i) <= depth}
    xs, span = _layout(nodes, shown)
    n_cols = span[0]
    levels = int(max(topology.position_depth(i) for i in xs))
    fontsize = fontsize or (7 if n_cols <= 128 else 6)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(60.0, max(6.0, 0.75 * n_cols)), min(30.0, 1.1 * (levels + 2))))
    inches = ax.get_position().width * ax.figure.get_size_inches()[0] / (n_cols + 1)  # one leaf column
    total = max(nodes[0].get("samples", 1), 1)
    box = 0.8 if n_cols <= 256 else 0.95
    for i in xs:
        node, y = nodes[i], -topology.position_depth(i)
        samples = node.get("samples")
        empty = samples == 0
        if node["type"] == "split" and i in shown:
            for child in (node["left"], node["right"]):
                width = 0.3 + 6.0 * nodes[child].get("samples", total / 2) / total
                ax.plot([xs[i], xs[child]], [y, y - 1], color="0.75" if nodes[child].get("samples") == 0 else "0.5",
                        lw=width, zorder=1, solid_capstyle="round")
            label = _split_label(forest, tree, i, names, decimals, span[i] * inches, fontsize)
            if label is not None:
                ax.text(xs[i], y, label, ha="center", va="center", fontsize=fontsize, zorder=3,
                        bbox=dict(boxstyle="round", fc="white", ec="0.3"))
            else:
                ax.plot(xs[i], y, "o", ms=3 if n_cols > 256 else 5, color="0.3", zorder=3)
            continue
        if empty:
            ax.plot(xs[i], y - 0.5, ".", color="0.7", zorder=2)
            continue
        if node["type"] == "split":  # cut by max_depth / max_leaves: "..." over the classes arriving
            ax.text(xs[i], y - 0.08, "...", ha="center", va="bottom", fontsize=fontsize + 1, zorder=3)
        if node["type"] == "leaf" or "class_counts" in node:
            dist = np.asarray(node.get("class_counts", node.get("value")), float)
            if dist.sum() == 0:  # no data reached this leaf: draw what it predicts
                dist = np.asarray(node["value"], float)
            if dist.size > 1 and (dist >= 0).all() and dist.sum() > 0:
                dist = dist / dist.sum()
                k = dist.size
                left = xs[i] - box / 2
                ax.bar(left + (np.arange(k) + 0.5) * box / k, 0.8 * dist, width=box / k, bottom=y - 0.9,
                       color=plt.cm.tab20(np.arange(k) % 20), zorder=2)
                ax.add_patch(plt.Rectangle((left, y - 0.9), box, 0.8, fill=False, ec="0.3",
                                           lw=0.8 if n_cols <= 256 else 0.3, zorder=3))
            else:
                text = np.array2string(dist, precision=2)
                if _fits(text, inches, fontsize - 1):
                    ax.text(xs[i], y - 0.5, text, ha="center", fontsize=fontsize - 1)
                else:
                    ax.plot(xs[i], y - 0.5, "s", ms=2, color="0.3", zorder=2)
        if samples is not None and _fits(str(samples), inches, fontsize - 1):
            ax.text(xs[i], y - 1.05, str(samples), ha="center", va="top", fontsize=fontsize - 1)
    ax.set_xlim(-1, n_cols)
    ax.set_ylim(-levels - 1.4, 0.6)
    ax.axis("off")
    source = f"{doc['class_name']} {doc['name']!r}" if "class_name" in doc else doc["family"]
    tree_depth, tree_leaves = int(forest.tree_depths()[tree]), int(forest.num_leaves()[tree])
    cut = f", drawn to depth {depth}" if depth < tree_depth else ""
    ax.set_title(f"{source}, tree {tree}: "
                 f"{tree_leaves} leaves, depth {tree_depth}{cut}",
                 fontsize=9)
    if class_names is not None:
        k = len(class_names)
        handles = [plt.Rectangle((0, 0), 1, 1, color=plt.cm.tab20(c % 20)) for c in range(k)]
        ax.legend(handles, class_names, fontsize=6, ncol=min(k, 10), loc="lower center",
                  bbox_to_anchor=(0.5, -0.08))
    return ax


@keras_trees_export("keras_trees.inspection")
def plot_split_weights(doc, image_shape, tree=0, nodes=None, max_nodes=12, axes=None):
    """Linear split weights of tree ``tree`` as images of ``image_shape``.

    Args:
        doc: exported layer dict (or [`Forest`][keras_trees.forest.Forest]) with
            linear or noisy-OR splits.
        image_shape: ``(height, width)`` (or with channels; the channels are averaged).
        nodes: split ids to draw (default: the first ``max_nodes`` in heap order).

    Returns the array of ``Axes``.
    """
    plt = _pyplot()
    splits = [n for n in _tree(_document(doc), tree)["nodes"] if n["type"] == "split"]
    if splits and splits[0]["split"]["kind"] == "axis_aligned":
        raise ValueError("plot_split_weights needs linear or noisy-OR splits")
    if nodes is not None:
        wanted = set(int(i) for i in nodes)
        splits = [n for n in splits if n["id"] in wanted]
    splits = splits[:max_nodes]
    if not splits:
        raise ValueError(f"tree {tree} has no split to draw")
    if axes is None:
        _, axes = plt.subplots(1, len(splits), figsize=(1.6 * len(splits), 1.9), squeeze=False)
        axes = axes[0]
    for ax, node in zip(axes, splits):
        w = np.asarray(node["split"]["weights"], float)
        if node["split"]["kind"] == "noisy_or":  # draw the strongest facet
            w = w[int(np.argmax(node["split"]["expert_weights"]))]
        if w.size != int(np.prod(image_shape)):
            raise ValueError(f"split weights have {w.size} entries; image_shape {image_shape} needs {np.prod(image_shape)}")
        img = w.reshape(image_shape)
        if img.ndim == 3:
            img = img.mean(-1)
        lim = np.abs(img).max() or 1.0
        ax.imshow(img, cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_title(f"node {node['id']}", fontsize=7)
        ax.axis("off")
    return axes


@keras_trees_export("keras_trees.inspection")
def plot_decision_regions(model, x, y=None, ax=None, resolution=200, padding=0.5):
    """Predicted class of ``model`` over the plane spanned by 2D inputs ``x``.

    ``x`` (and ``y``) are arrays in memory: every point is drawn (a stream of
    batches raises ``TypeError``). Returns the matplotlib ``Axes``.
    """
    require_arrays(x, "x", "plot_decision_regions", "a plot draws every point and spans their range")
    plt = _pyplot()
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"plot_decision_regions needs 2D inputs of shape (n, 2), got {x.shape}")
    lo, hi = x.min(0) - padding, x.max(0) + padding
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], resolution), np.linspace(lo[1], hi[1], resolution))
    grid = np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float32)
    pred = np.asarray(model.predict(grid, verbose=0, batch_size=8192))
    pred = pred.argmax(-1) if pred.ndim > 1 and pred.shape[-1] > 1 else (pred.reshape(-1) > 0.5).astype(int)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.contourf(gx, gy, pred.reshape(gx.shape), alpha=0.35, cmap="coolwarm",
                levels=np.arange(pred.max() + 2) - 0.5)
    if y is not None:
        ax.scatter(x[:, 0], x[:, 1], c=np.asarray(y).reshape(-1), s=6, cmap="coolwarm", edgecolors="k",
                   linewidths=0.2)
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    return ax
