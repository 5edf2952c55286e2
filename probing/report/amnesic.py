"""results.json files of `analyze.py analysis=amnesic` -> what each model's output loses when a concept is erased
from one of its hidden states (Elazar et al. 2021, amnesic probing): a table with one row per run and score (the
fine-tuned task's metrics, or the masked LM's word accuracy and KL divergence): no erasure, the concept erased, the
random controls of the same rank (mean ± sample std over their seeds) and the changes against no erasure; and a bar
plot of each run's headline score under the three conditions, the controls' std as error bars.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.report.aggregate import is_kind
from probing.report.plots import pyplot, save_figure
from probing.report.tables import markdown
from probing.results import load
from probing.results.kinds import AmnesicResults

# The analysis whose runs this section renders: its config's `analysis.name`, the "analysis" of its results.json and
# the `name` of its component (probing.analysis.Analysis).
ANALYSIS = AmnesicResults.KIND

FIGURE = "amnesic.png"
CONDITIONS = (("none", "none"), ("erased", "concept erased"), ("random", "random directions"))
COLOURS = {"none": "0.6", "erased": "tab:red", "random": "tab:blue"}


def is_amnesic(result: dict[str, Any]) -> bool:
    """A result of analyze.py's amnesic analysis."""
    return is_kind(result, ANALYSIS)


def run_of(result: dict[str, Any]) -> AmnesicResults:
    """A run's results (a results.json, or the job's own before they are written) as their type."""
    return load(result, kind=ANALYSIS)


def eraser_label(result: dict[str, Any]) -> str:
    """"leace, rank 16" ("inlp, rank 30, 16 iterations")."""
    eraser = run_of(result).eraser
    iterations = f", {eraser['iterations']} iterations" if eraser.get("iterations") is not None else ""
    return f"{eraser['method']}, rank {eraser['rank']}{iterations}"


def run_label(result: dict[str, Any]) -> str:
    """"minilm (pos), layer 3, upos erased"."""
    run = run_of(result)
    return f"{run.model or '?'} ({run.objective}), layer {run.layer}, {run.concept} erased"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def change(value: float | None, base: float | None) -> str:
    return "-" if value is None or base is None else f"{value - base:+.3f}"


def random_cell(result: dict[str, Any], metric: str) -> str:
    """"0.901 ± 0.004 (3 seeds)"."""
    random = run_of(result).scores["random"]
    mean, std = random["mean"].get(metric), random["std"].get(metric)
    seeds = len(random["per_seed"])
    spread = f" ± {std:.3f}" if std is not None else ""
    return f"{number(mean)}{spread} ({seeds} seed{'s' * (seeds != 1)})"


def table(results: list[dict[str, Any]]) -> str:
    header = ["model", "scored on", "layer", "concept", "eraser", "score", "none", "erased", "random",
              "erased - none", "random - none"]
    body = []
    for result in results:
        run = run_of(result)
        scores = run.scores
        for metric in scores["none"]:
            none, erased = scores["none"][metric], scores["erased"][metric]
            body.append([run.model or "?", f"{run.objective}, {run.data}", str(run.layer),
                         run.concept, eraser_label(result), metric, number(none), number(erased),
                         random_cell(result, metric), change(erased, none),
                         change(scores["random"]["mean"].get(metric), none)])
    return markdown(header, body)


def scores_text(result: dict[str, Any]) -> str:
    """One line: "accuracy: none 0.908, erased 0.512, random 0.900 ± 0.004 (3 seeds)", for each score."""
    scores = run_of(result).scores
    return "; ".join(f"{metric}: none {number(value)}, erased {number(scores['erased'][metric])}, random "
                     f"{random_cell(result, metric)}" for metric, value in scores["none"].items())


def plot_scores(results: list[dict[str, Any]], path: Path) -> bool:
    """Grouped bars, one group per run: its headline score with no erasure, the concept erased and the random
    controls' mean (their sample std as the error bar)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 2.2 * len(results) + 1.5), 3.6))
    width = 0.8 / len(CONDITIONS)
    for offset, (condition, label) in enumerate(CONDITIONS):
        heights, errors = [], []
        for result in results:
            scores, headline = run_of(result).scores, run_of(result).headline
            if condition == "random":
                heights.append(scores["random"]["mean"][headline])
                errors.append(scores["random"]["std"][headline] or 0.0)
            else:
                heights.append(scores[condition][headline])
        positions = [index + (offset - 1) * width for index in range(len(results))]
        ax.bar(positions, heights, width, yerr=errors or None, capsize=3, label=label, color=COLOURS[condition])
    ax.set_xticks(range(len(results)), [f"{run_label(result)}\n{run_of(result).headline}, {eraser_label(result)}"
                                        for result in results], fontsize=7)
    ax.set_ylabel("score")
    ax.set_ylim(0, 1.05 * max(1.0, *(run.scores["none"][run.headline] for run in map(run_of, results))))
    ax.set_title("Amnesic probing: the model's score with the concept erased at one layer", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def run_order(result: dict[str, Any]) -> tuple:
    """By model, objective, layer, concept and erasure method."""
    run = run_of(result)
    return (str(run.model), run.objective, run.layer, run.concept, run.eraser["method"])


def write_amnesic_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the amnesic runs and their bar plot; returns (text, files)."""
    results = sorted(results, key=run_order)
    plot_scores(results, out_dir / FIGURE)
    intro = ("The model's own scores with the concept erased from one hidden state inside its forward pass (the "
             "layers above run on the erased states), against no erasure and against removing as many random "
             "directions (the eraser's rank; mean ± sample std over the seeds). A masked LM is scored on each word "
             "masked in turn: accuracy, and the KL divergence from the unerased model's output (nats).")
    return f"{intro}\n\n{table(results)}\n\nHeadline scores: `{FIGURE}`.", [FIGURE]


# This analysis's section of report.md (probing.report finds it by its ANALYSIS): which results are its runs, the writer
# of the section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_amnesic, write_amnesic_report, "Amnesic probing (Elazar et al. 2021)",
           ("objective", "layer", "concept", "eraser", "data", "headline", "scores"))
