"""results.json files of `analyze.py analysis=static_pc` -> Ethayarajh 2019 Table 1-shaped tables (one row per model
and layer, one column per benchmark: the score and, beside it, the pairs/questions/words covered) and a line plot of
each benchmark's score by layer, one line per model and benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.report.aggregate import is_kind
from probing.report.plots import layer_axis, pyplot, save_figure
from probing.report.tables import markdown
from probing.results import load
from probing.results.kinds import StaticPCResults

# The analysis whose runs this section renders: its config's `analysis.name`, the "analysis" of its results.json and
# the `name` of its component (probing.analysis.Analysis).
ANALYSIS = StaticPCResults.KIND

FIGURE = "static_pc_by_layer.png"
KINDS = ("similarity", "analogy", "categorization")


def is_static_pc(result: dict[str, Any]) -> bool:
    """A result of analyze.py's static_pc analysis."""
    return is_kind(result, ANALYSIS)


def run_of(result: dict[str, Any]) -> StaticPCResults:
    """A run's results (a results.json) as their type."""
    return load(result, kind=ANALYSIS)


def model_label(result: dict[str, Any]) -> str:
    run = run_of(result)
    name = (run.model or "?") + (" (random init)" if run.random_init else "")
    return name + (" (centred PC)" if run.static_pc.get("centered") else "")


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for kind in KINDS for row in run_of(result).static_pc.get(kind, [])]


def cell(row: dict[str, Any] | None) -> str:
    """"0.315 (963/999)": the score and its coverage."""
    if row is None:
        return "-"
    total = row.get("pairs", row.get("questions", row.get("items")))
    score = "-" if row["score"] is None else f"{row['score']:.3f}"
    return f"{score} ({row['covered']}/{total})"


def layer_table(results: list[dict[str, Any]]) -> str:
    names = list(dict.fromkeys(row["benchmark"] for result in results for row in rows_of(result)))
    body = []
    for result in results:
        by_name = {row["benchmark"]: row for row in rows_of(result)}
        run = run_of(result)
        body.append([model_label(result), str(run.layer), str(run.static_pc["words"]),
                     *(cell(by_name.get(name)) for name in names)])
    return markdown(["model", "layer", "words", *names], body)


def plot_by_layer(results: list[dict[str, Any]], path: Path) -> bool:
    """Each benchmark's score by layer, a line per (model, benchmark)."""
    lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for result in results:
        for row in rows_of(result):
            if row["score"] is not None:
                lines.setdefault((model_label(result), row["benchmark"]), []).append((run_of(result).layer,
                                                                                      row["score"]))
    if not lines:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (model, benchmark), points in sorted(lines.items()):
        points.sort()
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=f"{model}: {benchmark}")
    layer_axis(ax)
    ax.set_ylabel("score (Spearman ρ / accuracy / purity)")
    ax.set_title("PC static embeddings by layer (Ethayarajh 2019, Table 1)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def write_static_pc_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the static PC runs and the plot by layer; returns (text, files)."""
    results = sorted(results, key=lambda result: (model_label(result), run_of(result).layer))
    correlations = sorted({run_of(result).static_pc.get("correlation", "spearman") for result in results})
    text = (f"Word similarity: {'/'.join(correlations)} correlation of cosine with the human scores; analogies: "
            "3CosAdd accuracy; categorisation: k-means purity. In brackets: pairs, questions or words covered (both "
            f"or all words with a static vector) of all.\n\n{layer_table(results)}")
    files = [FIGURE] if plot_by_layer(results, out_dir / FIGURE) else []
    return text + (f"\n\nScores by layer: `{FIGURE}`." if files else ""), files


# This analysis's section of report.md (probing.report finds it by its ANALYSIS): which results are its runs, the writer
# of the section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_static_pc, write_static_pc_report, "PC static embeddings (Ethayarajh 2019, §4.3)",
           ("layer", "static_pc"))
