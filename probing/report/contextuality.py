"""results.json files of `analyze.py analysis=contextuality` -> a table per run (one row per layer) and line plots
shaped like Ethayarajh 2019's Figures 1-4 (x: layer, one line per model): the anisotropy baseline (Fig. 1), and the
anisotropy-adjusted self-similarity (Fig. 2), intra-sentence similarity (Fig. 3) and MEV (Fig. 4).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from probing.data.files import open_atomically
from probing.report.aggregate import is_kind
from probing.report.plots import layer_axis, pyplot, save_figure
from probing.report.tables import markdown
from probing.results import load
from probing.results.kinds import ContextualityResults

# The analysis whose runs this section renders: its config's `analysis.name`, the "analysis" of its results.json and
# the `name` of its component (probing.analysis.Analysis).
ANALYSIS = ContextualityResults.KIND

FIGURE = "contextuality_by_model.png"
MEASURES = ("anisotropy", "self_similarity", "self_similarity_adjusted", "intra_similarity",
            "intra_similarity_adjusted", "mev", "mev_baseline", "mev_adjusted")
# (key, panel title) of Figures 1-4
PANELS = (("anisotropy", "Fig. 1: anisotropy (mean cosine of random words)"),
          ("self_similarity_adjusted", "Fig. 2: self-similarity, adjusted"),
          ("intra_similarity_adjusted", "Fig. 3: intra-sentence similarity, adjusted"),
          ("mev_adjusted", "Fig. 4: maximum explainable variance, adjusted"))


def is_contextuality(result: dict[str, Any]) -> bool:
    """A result of analyze.py's contextuality analysis."""
    return is_kind(result, ANALYSIS)


def run_of(result: dict[str, Any]) -> ContextualityResults:
    """A run's results (a results.json, or the job's own before they are written) as their type."""
    return load(result, kind=ANALYSIS)


def label(result: dict[str, Any]) -> str:
    """The model's name, its MEV variant when centred."""
    run = run_of(result)
    name = run.model or "?"
    if run.random_init:
        name += " (random init)"
    return name + (" (centred MEV)" if run.mev_centered else "")


def write_layer_csv(result: dict[str, Any], path: Path) -> None:
    """One row per layer: the layer and every measure."""
    with open_atomically(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", *MEASURES])
        writer.writerows([row["layer"], *(f"{row[key]:.6f}" for key in MEASURES)] for row in run_of(result).layers)


def plot_contextuality(results: list[dict[str, Any]], path: Path) -> bool:
    """Four panels (Figures 1-4), a line per result over its layers."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    for ax, (key, heading) in zip(axes, PANELS):
        for result in results:
            rows = run_of(result).layers
            ax.plot([row["layer"] for row in rows], [row[key] for row in rows], marker="o", label=label(result))
        ax.set_title(heading, fontsize=9)
        layer_axis(ax)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=8)
    return save_figure(fig, path)


def layer_table(result: dict[str, Any]) -> str:
    header = ["layer", "anisotropy", "self-sim", "self-sim adj.", "intra-sim", "intra-sim adj.", "MEV",
              "MEV baseline", "MEV adj."]
    body = [[str(row["layer"]), *(f"{row[key]:.3f}" for key in MEASURES)] for row in run_of(result).layers]
    return markdown(header, body)


def run_heading(result: dict[str, Any]) -> str:
    run = run_of(result)
    variant = "centred (PCA)" if run.mev_centered else "uncentred (Definition 3)"
    return (f"## {label(result)}\n\n{run.sentences} sentences ({run.sentence_source}), "
            f"{run.occurrences} occurrences; {run.words_sampled} of {run.words_available} words in "
            f">= {run.min_contexts} contexts, {run.sentences_sampled} of {run.sentences_available} "
            f"sentences, {run.baseline_occurrences} baseline occurrences; seed {run.seed}; MEV "
            f"{variant}.")


def write_contextuality_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the contextuality runs and their Figures 1-4; returns (text, files)."""
    results = sorted(results, key=label)
    sections = [f"{run_heading(result)}\n\n{layer_table(result)}" for result in results]
    plot_contextuality(results, out_dir / FIGURE)
    return "Adjusted = raw - anisotropy baseline of the layer (§3.4).\n\n" + "\n\n".join(sections), [FIGURE]


# This analysis's section of report.md (probing.report finds it by its ANALYSIS): which results are its runs, the writer
# of the section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_contextuality, write_contextuality_report, "Contextuality (Ethayarajh 2019)", ("layers",))
