"""results.json files of `analyze.py analysis=attention_similarity` -> heatmaps laid out like Zhao et al. 2020,
Figure 7 (y: layer 1..L, x: head, darker = smaller similarity, i.e. larger change), one per run, and for a sweep one
figure with a panel per compared model on a shared colour scale, plus the per-layer means as a Markdown table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from probing.report.aggregate import is_kind
from probing.report.plots import pyplot, save_figure
from probing.report.tables import markdown
from probing.results import load
from probing.results.kinds import AttentionSimilarityResults

# The analysis whose runs this section renders: its config's `analysis.name`, the "analysis" of its results.json and
# the `name` of its component (probing.analysis.Analysis).
ANALYSIS = AttentionSimilarityResults.KIND

SIDE_BY_SIDE = "attention_similarity_by_model.png"
ANNOTATE_UP_TO = 144  # cells (Figure 7's 12 x 12): more would be unreadable
COLOURS = "viridis"   # dark = small


def is_attention_similarity(result: dict[str, Any]) -> bool:
    """A result of analyze.py's attention-map similarity."""
    return is_kind(result, ANALYSIS)


def model_label(name: str, task: str | None) -> str:
    """"POS-finetuned" for a model exported by train.py (its task known), else the name (a folder's last two
    parts: "<run>/model")."""
    if task:
        return f"{task.upper()}-finetuned"
    return "/".join(Path(name).parts[-2:]) if "/" in name else name


def run_of(result: dict[str, Any]) -> AttentionSimilarityResults:
    """A run's results (a results.json, or the job's own before they are written) as their type."""
    return load(result, kind=ANALYSIS)


def title(result: dict[str, Any]) -> str:
    run = run_of(result)
    first = model_label(run.model, run.model_task)
    second = model_label(run.compare_to, run.compare_to_task)
    return f"{first} vs {second}"


def colour_range(matrices: list[np.ndarray]) -> tuple[float, float]:
    """(low, 1.0): low = the smallest value rounded down to 0.05, at most 0.95 (identical models still get a scale)."""
    smallest = min(float(np.min(matrix)) for matrix in matrices)
    return min(math.floor(smallest * 20) / 20, 0.95), 1.0


def draw_heatmap(ax, matrix: np.ndarray, heading: str, low: float, high: float, ylabel: bool = True):
    """One Figure 7 panel on `ax`: layers 1..L bottom to top, heads 1..H left to right; returns the image."""
    layers, heads = matrix.shape
    image = ax.imshow(matrix, cmap=COLOURS, vmin=low, vmax=high, origin="lower", aspect="auto")
    ax.set_xticks(range(heads), [str(head + 1) for head in range(heads)], fontsize=7)
    ax.set_yticks(range(layers), [str(layer + 1) for layer in range(layers)], fontsize=7)
    ax.set_xlabel("head")
    if ylabel:
        ax.set_ylabel("layer")
    ax.set_title(heading, fontsize=9)
    if matrix.size <= ANNOTATE_UP_TO:
        middle = (low + high) / 2
        for layer in range(layers):
            for head in range(heads):
                value = matrix[layer, head]
                ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="black" if value > middle else "white")
    return image


def plot_heatmap(result: dict[str, Any], path: Path) -> bool:
    """The heatmap of one run (its own colour scale)."""
    run = run_of(result)
    matrix = np.asarray(run.cosine)
    low, high = colour_range([matrix])
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.2 + 0.45 * matrix.shape[1], 1.2 + 0.4 * matrix.shape[0]))
    image = draw_heatmap(ax, matrix, f"Attention-map cosine similarity: {title(result)}\n"
                                     f"{run.sentences} sentences ({run.sentence_source})", low, high)
    fig.colorbar(image, ax=ax, label="cosine similarity")
    return save_figure(fig, path)


def plot_side_by_side(results: list[dict[str, Any]], path: Path) -> bool:
    """One panel per result, on one colour scale (Figure 7's layout)."""
    matrices = [np.asarray(run_of(result).cosine) for result in results]
    low, high = colour_range(matrices)
    layers, heads = max(m.shape[0] for m in matrices), max(m.shape[1] for m in matrices)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(1.5 + len(results) * (0.8 + 0.32 * heads), 1.6 + 0.32 * layers),
                             squeeze=False, layout="constrained")  # room for the shared colour bar and the title
    for index, (ax, result, matrix) in enumerate(zip(axes[0], results, matrices)):
        image = draw_heatmap(ax, matrix, title(result), low, high, ylabel=index == 0)
    fig.colorbar(image, ax=axes[0].tolist(), label="cosine similarity")
    fig.suptitle("Cosine similarity of flattened self-attention weights (Zhao et al. 2020, Fig. 7)\n"
                 "darker = larger change", fontsize=9)
    return save_figure(fig, path)


def layer_means_table(results: list[dict[str, Any]]) -> str:
    """Rows: layers; columns: the compared models; cells: the mean similarity over a layer's heads."""
    means = [run_of(result).layer_means for result in results]
    body = [[str(layer + 1), *(f"{column[layer]:.3f}" if layer < len(column) else "-" for column in means)]
            for layer in range(max(len(column) for column in means))]
    body.append(["all", *(f"{float(np.mean(run_of(result).cosine)):.3f}" for result in results)])
    return markdown(["layer", *(title(result) for result in results)], body)


def write_attention_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the attention-similarity runs and their side-by-side figure; returns (text, files)."""
    results = sorted(results, key=title)
    sources = sorted({f"{run.sentences} sentences ({run.sentence_source})" for run in map(run_of, results)})
    text = (f"Mean cosine similarity of the attention maps over each layer's heads, on {', '.join(sources)}; "
            f"1 = unchanged.\n\n{layer_means_table(results)}")
    plot_side_by_side(results, out_dir / SIDE_BY_SIDE)
    return text, [SIDE_BY_SIDE]


# This analysis's section of report.md (probing.report finds it by its ANALYSIS): which results are its runs, the writer
# of the section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_attention_similarity, write_attention_report, "Attention-map similarity (Zhao et al. 2020, Fig. 7)",
           ("model", "compare_to", "cosine", "layer_means"))
