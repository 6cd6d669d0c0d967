"""Plots of trained trees (matplotlib, an optional dependency: ``pip install keras-trees[examples]``).

* :func:`plot_tree`: a tree diagram from an exported layer dict (or a
  :class:`~keras_trees.forest.Forest`); edge widths
  show the samples routed through them, leaves show class distributions (or
  their values).
* :func:`plot_split_weights`: the linear split weights of a tree drawn as
  images (the end-to-end paper's Figures 4-5).
* :func:`plot_decision_regions`: a model's predicted class over a 2D input plane.
"""

import numpy as np

from keras_trees import topology
from keras_trees.api_export import keras_trees_export
from keras_trees.forest import Forest


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("keras_trees.inspection plots need matplotlib: pip install matplotlib") from e
    return plt


def _document(doc):
    """An exported layer dict, or the dict of a :class:`~keras_trees.forest.Forest`."""
    return doc.to_dict() if isinstance(doc, Forest) else doc


def _layout(nodes):
    """x positions: leaves left to right in order, splits centred over children."""
    xs, counter = {}, [0]

    def place(i):
        node = nodes[i]
        if node["type"] == "leaf":
            xs[i] = counter[0]
            counter[0] += 1
        else:
            place(node["left"])
            place(node["right"])
            xs[i] = 0.5 * (xs[node["left"]] + xs[node["right"]])

    place(0)
    return xs


@keras_trees_export("keras_trees.inspection")
def plot_tree(doc, tree=0, ax=None, class_names=None, max_leaves=64):
    """Draws tree ``tree`` of an exported layer dict (:func:`export_trees`) or a
    :class:`~keras_trees.forest.Forest`.

    Edge widths are proportional to ``samples`` when the export was given data.
    Leaves of classifiers are drawn as small bar charts of their class
    distribution (``class_counts`` when present, else the leaf values).

    Returns the matplotlib ``Axes``.
    """
    plt = _pyplot()
    doc = _document(doc)
    names = doc.get("feature_names")
    nodes = {n["id"]: n for n in doc["trees"][tree]["nodes"]}
    n_leaves = sum(n["type"] == "leaf" for n in nodes.values())
    if n_leaves > max_leaves:
        raise ValueError(f"tree {tree} has {n_leaves} leaves; plot_tree draws at most max_leaves={max_leaves}")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 0.6 * n_leaves), 1.2 * (doc["trees"][tree]["depth"] + 2)))
    xs = _layout(nodes)
    total = max(nodes[0].get("samples", 1), 1)
    for i, node in nodes.items():
        y = -topology.position_depth(i)
        if node["type"] == "split":
            for child in (node["left"], node["right"]):
                width = 0.5 + 8.0 * nodes[child].get("samples", total / 2) / total
                ax.plot([xs[i], xs[child]], [y, y - 1], color="0.5", lw=width, zorder=1, solid_capstyle="round")
            s = node["split"]
            if s["kind"] == "axis_aligned":
                feature = names[s["feature"]] if names else f"x[{s['feature']}]"
                label = f"{feature} > {s['threshold']:.2f}"
            else:
                label = f"#{i}"
            ax.text(xs[i], y, label, ha="center", va="center", fontsize=7, zorder=3,
                    bbox=dict(boxstyle="round", fc="white", ec="0.3"))
        else:
            dist = np.asarray(node.get("class_counts", node["value"]), float)
            if dist.sum() == 0:  # no data reached this leaf: draw what it predicts
                dist = np.asarray(node["value"], float)
            if dist.size > 1 and (dist >= 0).all() and dist.sum() > 0:
                dist = dist / dist.sum()
                k = dist.size
                left = xs[i] - 0.4
                ax.bar(left + (np.arange(k) + 0.5) * 0.8 / k, 0.8 * dist, width=0.8 / k, bottom=y - 0.9,
                       color=plt.cm.tab20(np.arange(k) % 20), zorder=2)
                ax.add_patch(plt.Rectangle((left, y - 0.9), 0.8, 0.8, fill=False, ec="0.3", zorder=3))
            else:
                ax.text(xs[i], y - 0.5, np.array2string(dist, precision=2), ha="center", fontsize=6)
            if "samples" in node:
                ax.text(xs[i], y - 1.05, str(node["samples"]), ha="center", va="top", fontsize=6)
    ax.set_xlim(-1, n_leaves)
    ax.set_ylim(-doc["trees"][tree]["depth"] - 1.4, 0.6)
    ax.axis("off")
    source = f"{doc['class_name']} {doc['name']!r}" if "class_name" in doc else doc["family"]
    ax.set_title(f"{source}, tree {tree}: "
                 f"{doc['trees'][tree]['num_leaves']} leaves, depth {doc['trees'][tree]['depth']}",
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
        doc: exported layer dict (or :class:`~keras_trees.forest.Forest`) with
            linear or noisy-OR splits.
        image_shape: ``(height, width)`` (or with channels; the channels are averaged).
        nodes: split ids to draw (default: the first ``max_nodes`` in heap order).

    Returns the array of ``Axes``.
    """
    plt = _pyplot()
    splits = [n for n in _document(doc)["trees"][tree]["nodes"] if n["type"] == "split"]
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

    Returns the matplotlib ``Axes``.
    """
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
