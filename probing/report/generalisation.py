"""Statement probes across datasets (probe.eval_on) -> the train x test accuracy matrix of each layer (a table and a
heatmap), each dataset's test accuracy by layer, and each layer's first two principal components of the statements'
vectors coloured by label (Marks & Tegmark 2024, Fig. 1), all read from the runs' results.json. See
docs/statements.md, 'Generalisation'."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any

from probing.data.files import open_atomically
from probing.report.plots import layer_axis, pyplot, save_figure
from probing.report.tables import markdown

CSV_FILE = "statement_generalisation.csv"
# A matrix, a curve and the components are drawn for the runs of one task, model, encoder state, pooling and probe.
GROUP_KEYS = ("task", "model", "random_init", "pooling", "probe", "probe_family")
CSV_FIELDS = (*GROUP_KEYS, "layer", "trained_on", "tested_on", "accuracy", "runs")


def _file_part(name: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def matrices(results: list[dict[str, Any]]) -> dict[tuple, dict[Any, dict[str, dict[str, tuple[float, int]]]]]:
    """For each group of runs (GROUP_KEYS) and layer: {trained_on: {tested_on: (mean test accuracy, runs)}}; the
    diagonal is the run's own test accuracy, the rest its `eval_on` scores (runs of several seeds averaged)."""
    scores: dict[tuple, dict[Any, dict[str, dict[str, list[float]]]]] = {}
    for r in results:
        group = tuple(r.get(key) for key in GROUP_KEYS)
        row = scores.setdefault(group, {}).setdefault(r.get("layer"), {}).setdefault(r["data"], {})
        cells = {r["data"]: r["test"].get("accuracy"), **{name: other.get("accuracy")
                                                          for name, other in (r.get("eval_on") or {}).items()}}
        for name, accuracy in cells.items():
            if accuracy is not None:
                row.setdefault(name, []).append(accuracy)
    return {group: {layer: {train: {test: (_mean(values), len(values)) for test, values in row.items()}
                            for train, row in rows.items()}
                    for layer, rows in layers.items()}
            for group, layers in scores.items()}


def _layers(layers: dict) -> list:
    return sorted(layers, key=lambda layer: (not isinstance(layer, int), str(layer) if not isinstance(layer, int)
                                             else layer))


def _datasets(rows: dict[str, dict[str, tuple[float, int]]]) -> tuple[list[str], list[str]]:
    trained = list(rows)
    tested = trained + sorted({test for row in rows.values() for test in row} - set(trained))
    return trained, tested


def matrix_table(rows: dict[str, dict[str, tuple[float, int]]]) -> str:
    """Markdown: one row per training dataset, one column per test dataset, accuracy on its test split."""
    trained, tested = _datasets(rows)
    body = [[f"**{train}**", *(f"{rows[train][test][0]:.3f}" if test in rows[train] else "–" for test in tested)]
            for train in trained]
    return markdown(["trained on \\ tested on", *tested], body)


def panel_grid(count: int, width: float, height: float):
    """A figure of `count` panels, four to a row, each `width` x `height` inches; the unused cells hidden."""
    columns = min(count, 4)
    rows = math.ceil(count / columns)
    fig, axes = pyplot().subplots(rows, columns, squeeze=False, figsize=(width * columns, height * rows),
                                  layout="constrained")
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, axes


def plot_matrices(layers: dict, title: str, path: Path) -> bool:
    """One heatmap of the train x test accuracy per layer, side by side."""
    order = _layers(layers)
    fig, axes = panel_grid(len(order), 3.6, 3.2)
    for ax, layer in zip(axes.flat, order):
        trained, tested = _datasets(layers[layer])
        values = [[layers[layer][train].get(test, (math.nan, 0))[0] for test in tested] for train in trained]
        image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="RdBu_r")
        for i, row in enumerate(values):
            for j, value in enumerate(row):
                if not math.isnan(value):
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(tested)), tested, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(len(trained)), trained, fontsize=7)
        ax.set_title(f"layer {layer}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="test accuracy")
    fig.suptitle(f"{title}\nrows: trained on; columns: tested on", fontsize=9)
    return save_figure(fig, path)


def plot_curves(layers: dict, title: str, path: Path) -> bool:
    """Each training dataset's accuracy on its own test split, by layer (numeric layers only)."""
    order = [layer for layer in _layers(layers) if isinstance(layer, int)]
    trained = list(dict.fromkeys(train for layer in order for train in layers[layer]))
    if len(order) < 2:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for train in trained:
        points = [(layer, layers[layer][train][train][0]) for layer in order
                  if train in layers[layer] and train in layers[layer][train]]
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=train)
    layer_axis(ax)
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def plot_components(runs: dict[Any, dict[str, Any]], title: str, path: Path) -> bool:
    """Each layer's first two principal components of the statements' vectors, a point per statement coloured by
    its label (`runs`: layer -> the recorded components)."""
    order = _layers(runs)
    if not order:
        return False
    fig, axes = panel_grid(len(order), 3.2, 3.0)
    for ax, layer in zip(axes.flat, order):
        pca, labels = runs[layer]["components"], runs[layer]["labels"]
        for index, label in enumerate(labels):
            points = [point for point, y in zip(pca["points"], pca["labels"]) if y == index]
            ax.scatter([p[0] for p in points], [p[1] for p in points], s=4, alpha=0.6, label=label,
                       color=f"C{index}")
        ratio = pca["explained_variance_ratio"]
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel(f"PC1 ({ratio[0]:.0%})", fontsize=7)
        ax.set_ylabel(f"PC2 ({ratio[1]:.0%})" if len(ratio) > 1 else "PC2", fontsize=7)
        ax.tick_params(labelsize=6)
    axes.flat[0].legend(fontsize=7, title="label", title_fontsize=7)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def components_by_dataset(results: list[dict[str, Any]]) -> dict[tuple, dict[Any, dict[str, Any]]]:
    """(task, model, random_init, pooling, data) -> layer -> the first run's recorded components and labels (the
    vectors do not depend on the probe)."""
    found: dict[tuple, dict[Any, dict[str, Any]]] = {}
    for r in results:
        if r.get("principal_components"):
            key = (r.get("task"), r.get("model"), r.get("random_init"), r.get("pooling"), r["data"])
            found.setdefault(key, {}).setdefault(r.get("layer"), {"components": r["principal_components"],
                                                                  "labels": r.get("labels", [])})
    return found


def generalisation_section(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown of the matrices (for the groups with runs scored on other datasets), the curves and the
    components; (text, files written)."""
    parts, files, rows = [], [], []
    for group, layers in matrices(results).items():
        if not any(len(row) > 1 or set(row) != {train} for rows in layers.values() for train, row in rows.items()):
            continue  # no run of the group was scored on another dataset
        about = dict(zip(GROUP_KEYS, group))
        title = f"{about['task']} · {about['model']}{' (random init)' if about['random_init'] else ''} · " \
                f"{about['pooling']} · {about['probe']}"
        stem = _file_part("_".join(str(about[key]) for key in ("task", "model", "pooling", "probe")))
        parts.append(f"### Generalisation: {title}")
        for layer in _layers(layers):
            parts.append(f"Layer {layer}: test accuracy of the probe trained on each row's dataset.\n\n"
                         f"{matrix_table(layers[layer])}")
            rows += [{**about, "layer": layer, "trained_on": train, "tested_on": test, "accuracy": accuracy,
                      "runs": runs} for train, row in layers[layer].items() for test, (accuracy, runs) in row.items()]
        drawn = [name for name, plot in ((f"statement_generalisation_{stem}.png", plot_matrices),
                                         (f"statement_accuracy_by_layer_{stem}.png", plot_curves))
                 if plot(layers, title, out_dir / name)]
        files += drawn
        parts.append(f"The matrices as heatmaps, and each dataset's own test accuracy by layer: "
                     f"{', '.join(f'`{name}`' for name in drawn)}.")
    if rows:
        with open_atomically(out_dir / CSV_FILE, newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        files.insert(0, CSV_FILE)
    for key, runs in components_by_dataset(results).items():
        name = f"statement_pca_{_file_part('_'.join(str(part) for part in (key[0], key[1], key[3], key[4])))}.png"
        title = f"{key[4]}: first two principal components by layer ({key[1]}, {key[3]})"
        if plot_components(runs, title, out_dir / name):
            files.append(name)
    return "\n\n".join(parts), files
