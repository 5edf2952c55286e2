"""Aggregated rows -> plots: micro-F1 by layer and by context size, scalar-mix weights, per-class F1 by layer."""


from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from probing.data.files import replaced_atomically
from probing.report.aggregate import (
    DISPLAY_KEYS,
    SETTING_KEYS,
    SPLITS,
    mean_std,
    of_kind,
    representation_layer,
    representation_sort_key,
    split_scores,
    with_variants,
)
from probing.report.runs import group_by
from probing.report.tables import (
    context_label,
    context_sizes,
    context_sweeps,
    fixed_settings,
    format_score,
    setting_label,
    varying_keys,
)
from probing.results import load
from probing.vocabulary import MIX


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def layer_axis(ax, label: str = "layer") -> None:
    """An x axis of layers: integer ticks only (matplotlib would mark 0.2, 0.4, ... between two layers)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


MAX_LAYER_TICKS = 16  # more labels than this overlap on a panel (31 layers of a 30-block decoder)


def drawn_layer_ticks(layers) -> list[int]:
    """The layers to label on an x axis of the drawn `layers`: all of them, or the multiples of 2, 5, 10, ... among
    them, whichever first gives one to MAX_LAYER_TICKS labels (else evenly spaced drawn layers)."""
    layers = sorted(set(layers) - {None})
    for step in (1, 2, 5, 10, 20, 50, 100):
        ticks = [layer for layer in layers if layer % step == 0]
        if 0 < len(ticks) <= MAX_LAYER_TICKS:
            return ticks
    return layers[::-(-len(layers) // MAX_LAYER_TICKS)] if layers else []


def save_figure(fig, path: Path) -> bool:
    if fig.get_layout_engine() is None:  # a figure made with layout="constrained" keeps its own
        fig.tight_layout()
    with replaced_atomically(path) as temporary:
        fig.savefig(temporary, dpi=120, bbox_inches="tight")  # "tight" keeps the legend drawn beside the axes
    pyplot().close(fig)
    return True


def _finish(fig, ax, path: Path, rows: list[dict], title: str, xlabel: str, ylabel: str) -> bool:
    """Label the axes, title the plot with the settings all rows share, add the legend and save."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{fixed_settings(rows)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def _colours() -> Iterator[str]:
    return itertools.cycle(f"C{i}" for i in range(10))


def _legend(label: str, what: str) -> str:
    return f"{label}: {what}" if label else what


def _draw_scores(ax, xs: list, points: list[dict], label: str, colour: str, solid: str) -> None:
    """Mean micro-F1 (std over seeds as error bars): `solid` split as a solid line, the other dashed, same colour."""
    for split in sorted(SPLITS, key=lambda s: s != solid):
        means = [p[f"{split}_micro_f1"] for p in points]
        if any(m is None for m in means):
            continue
        stds = [p[f"{split}_micro_f1_std"] or 0.0 for p in points]
        style, alpha = ("-o", 1.0) if split == solid else ("--", 0.6)
        ax.errorbar(xs, means, yerr=stds if any(stds) else None, fmt=style, capsize=3, color=colour, alpha=alpha,
                    label=f"{label} ({split})")


def _draw_layer_curve(ax, points: list[dict], label: str, colours: Iterator[str]) -> None:
    if points:
        points = sorted(points, key=lambda p: representation_layer(p["representation"]))
        xs = [representation_layer(p["representation"]) for p in points]
        _draw_scores(ax, xs, points, label, next(colours), solid="test")


def _draw_level(ax, row: dict, label: str, colours: Iterator[str]) -> None:
    """A representation without layers (baseline: dashed, scalar mix: dotted) as its test micro-F1."""
    if row["test_micro_f1"] is not None:
        style = ":" if row["representation"] == MIX else "--"
        ax.axhline(row["test_micro_f1"], linestyle=style, color=next(colours),
                   label=_legend(label, f"{row['representation']}{_type_tag(row)} (test)"))


def _type_tag(row: dict) -> str:
    """Marks a type-level baseline (Rand, BERTw, a static file) drawn beside the context-level ones."""
    return ", type level" if row.get("level") == "type" else ""


def _draw_layer_group(ax, group: list[dict], label: str, colours: Iterator[str]) -> None:
    group = sorted(group, key=lambda r: representation_sort_key(r["representation"]))
    _draw_layer_curve(ax, of_kind(group, "layer"), _legend(label, "layers"), colours)
    _draw_layer_curve(ax, of_kind(group, "avg"), _legend(label, "AVG-l"), colours)
    for row in of_kind(group, "baseline", MIX):
        _draw_level(ax, row, label, colours)


def layer_sweeps(rows: list[dict]) -> list[list[dict]]:
    """Rows grouped by every setting but representation and level (type-level Rand, GloVe and AVG-l belong with the
    context-level layers they are compared to), keeping the groups with two or more layers or AVG-l: curves."""
    groups = group_by(rows, [k for k in SETTING_KEYS if k not in ("representation", "level")]).values()
    return [group for group in groups if len(of_kind(group, "layer", "avg")) > 1]


def plot_by_layer(rows: list[dict], path: Path) -> bool:
    """Micro-F1 by layer (and AVG-l by l), one curve per setting, the setting's other representations as horizontal
    lines (Zhao et al. 2020 compare layers with these baselines); False if no setting has two layers to draw."""
    sweeps = layer_sweeps(rows)
    if not sweeps:
        return False
    drawn = [row for group in sweeps for row in group]
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    colours = _colours()
    label_keys = [k for k in varying_keys(drawn, DISPLAY_KEYS) if k not in ("representation", "level")]
    for group in sweeps:
        _draw_layer_group(ax, group, setting_label(group[0], label_keys), colours)
    ax.set_xticks(drawn_layer_ticks(representation_layer(r["representation"]) for r in drawn))
    return _finish(fig, ax, path, drawn, "S-class probing by layer", "layer (0 = embeddings)",
                   "micro-F1 (Zhao et al. 2020)")


def plot_by_context_size(rows: list[dict], path: Path) -> bool:
    """Zhao et al. (2020) Fig. 5: dev micro-F1 (test dashed) by context size, one line per representation probed
    at two or more context sizes; False if there is none."""
    sweeps = context_sweeps(rows)
    if not sweeps:
        return False
    drawn = [row for group in sweeps for row in group]
    sizes = context_sizes(drawn)
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    colours = _colours()
    label_keys = [k for k in varying_keys(drawn, DISPLAY_KEYS) if k not in ("representation", "context_size")]
    for group in sweeps:
        group = sorted(group, key=lambda r: sizes.index(r["context_size"]))
        label = _legend(setting_label(group[0], label_keys), group[0]["representation"])
        _draw_scores(ax, [sizes.index(r["context_size"]) for r in group], group, label, next(colours), solid="dev")
    ax.set_xticks(range(len(sizes)), [context_label(s) for s in sizes])
    return _finish(fig, ax, path, drawn, "S-class probing by context size", "context size (words left and right)",
                   "micro-F1")


def _gamma_text(row: dict) -> str:
    return "" if row["gamma"] is None else f" (γ = {format_score(row, 'gamma', number='{:.2f}')})"


def plot_mix_weights(rows: list[dict], path: Path) -> bool:
    """The learned scalar-mix weights per layer (Peters et al. 2018), one group of bars per setting, std over
    seeds as error bars; the dashed line 1/(L+1) is the plain average. False if no run learned a mix."""
    mixed = [r for r in rows if r["mix_weights"]]
    if not mixed:
        return False
    fig, ax = pyplot().subplots(figsize=(7.5, 4.2))
    width = 0.8 / len(mixed)
    label_keys = [k for k in varying_keys(mixed, DISPLAY_KEYS) if k != "representation"]
    for i, row in enumerate(mixed):
        xs = [layer + (i - (len(mixed) - 1) / 2) * width for layer in range(len(row["mix_weights"]))]
        errors = row["mix_weights_std"] if any(row["mix_weights_std"]) else None
        ax.bar(xs, row["mix_weights"], width, yerr=errors, capsize=2,
               label=(setting_label(row, label_keys) or "mix") + _gamma_text(row))
    for n_layers in sorted({len(r["mix_weights"]) for r in mixed}):
        ax.axhline(1 / n_layers, linestyle="--", color="grey", label=f"plain average 1/{n_layers}")
    ax.set_xticks(range(max(len(r["mix_weights"]) for r in mixed)))
    return _finish(fig, ax, path, mixed, "Scalar-mix weights", "layer (0 = embeddings)", "softmax weight")


def per_class_by_layer(results: list[dict[str, Any]]) -> tuple[list[str], list[int], list[list[float | None]]] | None:
    """Mean test F1 of each class at each integer layer, when the layer runs differ only in layer and seed."""
    layered = [r for r in of_kind(with_variants(results), "layer") if "per_class_f1" in split_scores(load(r), "test")]
    settings = group_by(layered, [k for k in SETTING_KEYS if k != "representation"])
    class_lists = {tuple(load(r).classes or ()) for r in layered}
    if len(settings) != 1 or len(class_lists) != 1 or not next(iter(class_lists)):
        return None
    classes = list(next(iter(class_lists)))
    by_layer = defaultdict(list)
    for result in layered:
        by_layer[representation_layer(result["representation"])].append(load(result).test["per_class_f1"])
    layers = sorted(by_layer)
    grid = [[mean_std(scores[k] for scores in by_layer[layer])[0] for layer in layers] for k in range(len(classes))]
    return classes, layers, grid


def plot_per_class(results: list[dict[str, Any]], path: Path) -> bool:
    """Heatmap of per-class test F1 (rows: classes, columns: layers); False if the sweep is not a layer sweep."""
    table = per_class_by_layer(results)
    if table is None:
        return False
    import numpy as np

    plt = pyplot()
    classes, layers, grid = table
    values = np.array([[np.nan if x is None else x for x in row] for row in grid], dtype=float)
    label_inches = 0.06 * max(len(name) for name in classes)  # the class names at fontsize 7
    fig, ax = plt.subplots(figsize=(1.6 + label_inches + 0.55 * len(layers), 1.0 + 0.28 * len(classes)))
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(layers)), [str(layer) for layer in layers])
    ax.set_yticks(range(len(classes)), classes, fontsize=7)
    ax.set_xlabel("layer")
    ax.set_title("test F1 per class (blank: undefined)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.05)
    return save_figure(fig, path)


def write_plots(rows: list[dict], results: list[dict[str, Any]], out_dir: Path) -> list[str]:
    """Every plot that applies to this sweep; returns the file names written."""
    plots = (("micro_f1_by_layer.png", plot_by_layer, rows),
             ("micro_f1_by_context_size.png", plot_by_context_size, rows),
             ("mix_weights.png", plot_mix_weights, rows),
             ("per_class_f1_by_layer.png", plot_per_class, results))
    return [name for name, plot, data in plots if plot(data, out_dir / name)]
