"""results.json files of `analyze.py analysis=isotropy` -> Bis et al. 2021-shaped tables and plots: Table 1 (I(W)
before and after each transformation, the mean norm, the norm of the mean vector and their ratio), Table 2 (the word
benchmarks' average correlation x 100 with cosine and with the inner product, change against the original in
brackets) with the per-benchmark scores and their coverage (Appendix C's Table 3), and Fig. 3 (the cosine between
the `[unused*]` tokens, or the last 1,000 ids of a vocabulary without them, and each bin of 1,000 vocabulary ids; one
line per run and transformation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.report.aggregate import is_kind
from probing.report.plots import pyplot, save_figure
from probing.report.tables import markdown
from probing.results import load
from probing.results.kinds import IsotropyResults

# The analysis whose runs this section renders: its config's `analysis.name`, the "analysis" of its results.json and
# the `name` of its component (probing.analysis.Analysis).
ANALYSIS = IsotropyResults.KIND

FIGURE = "isotropy_unused_cosine.png"
TRANSFORM_LABELS = {"original": "original", "centered": "+ Centered", "scaled_centered": "+ Centered-Scaled",
                    "postprocessed": "+ Post-Process"}
MEASURE_LABELS = {"cosine": "CosSim", "dot": "⟨·,·⟩"}


def is_isotropy(result: dict[str, Any]) -> bool:
    """A result of analyze.py's isotropy analysis."""
    return is_kind(result, ANALYSIS)


def run_of(result: dict[str, Any]) -> IsotropyResults:
    """A run's results (a results.json, or the job's own before they are written) as their type."""
    return load(result, kind=ANALYSIS)


def run_label(result: dict[str, Any]) -> str:
    """"minilm, input embeddings" or "minilm, layer 3" (", random init" for the control)."""
    run = run_of(result)
    where = "input embeddings" if run.layer is None else f"layer {run.layer}"
    return f"{run.model or '?'}, {where}" + (", random init" if run.random_init else "")


def table1(results: list[dict[str, Any]]) -> str:
    header = ["model", "vectors", "I(W)", "I(W_c)", "I(W_sc)", "I(W_r)", "D", "avg ‖e(w)‖", "‖μ‖", "‖μ‖/avg ‖e(w)‖"]
    body = []
    for result in results:
        block = run_of(result).isotropy
        ratio = block["mean_vector_norm_ratio"]
        body.append([run_label(result), str(block["vectors"]),
                     *(f"{block[key]:.3f}" for key in ("I_W", "I_W_centered", "I_W_scaled_centered",
                                                       "I_W_postprocessed")),
                     str(block["pc_removed"]), f"{block['mean_norm']:.3f}", f"{block['mean_vector_norm']:.3f}",
                     "-" if ratio is None else f"{ratio:.3f}"])
    return markdown(header, body)


def scaled(score: float | None) -> str:
    return "-" if score is None else f"{100 * score:.2f}"


def table2(results: list[dict[str, Any]]) -> str:
    """Average over the benchmarks x 100, and its change against the original matrix."""
    measures = list(dict.fromkeys(measure for result in results for by in run_of(result).benchmark_average.values()
                                  for measure in by))
    body = []
    for result in results:
        averages = run_of(result).benchmark_average
        for transform, by_measure in averages.items():
            cells = []
            for measure in measures:
                score, base = by_measure.get(measure), averages.get("original", {}).get(measure)
                change = "" if score is None or base is None else f" ({100 * (score - base):+.2f})"
                cells.append(scaled(score) + change)
            body.append([run_label(result), TRANSFORM_LABELS.get(transform, transform), *cells])
    return markdown(["model", "transformation", *(MEASURE_LABELS.get(m, m) for m in measures)], body)


def table3(results: list[dict[str, Any]]) -> str:
    """Per benchmark: "⟨·,·⟩ / cos" x 100, and the pairs covered."""
    names = list(dict.fromkeys(row["benchmark"] for result in results for row in run_of(result).benchmarks))
    body = []
    for result in results:
        cells: dict[tuple[str, str], dict[str, float | None]] = {}
        coverage = {}
        benchmarks = run_of(result).benchmarks
        for row in benchmarks:
            cells.setdefault((row["transform"], row["benchmark"]), {})[row["measure"]] = row["score"]
            coverage[row["benchmark"]] = f"{row['covered']}/{row['pairs']} pairs, {row['missing_words']} words missing"
        for transform in dict.fromkeys(row["transform"] for row in benchmarks):
            by = [cells.get((transform, name), {}) for name in names]
            body.append([run_label(result), TRANSFORM_LABELS.get(transform, transform),
                         *(f"{scaled(cell.get('dot'))} / {scaled(cell.get('cosine'))}" for cell in by)])
        body.append([run_label(result), "coverage", *(coverage.get(name, "-") for name in names)])
    return markdown(["model", "transformation", *names], body)


def token_label(unused: dict[str, Any]) -> str:
    """What Fig. 3 compares with: the [unused] tokens, or the last ids of a vocabulary without them."""
    return "last vocabulary ids" if unused.get("selection") == "last_ids" else "[unused] tokens"


def plot_unused_cosine(results: list[dict[str, Any]], path: Path) -> bool:
    """Fig. 3: mean cosine between the unused tokens and each bin of vocabulary ids, per run and transformation."""
    drawn = [result for result in results if (run_of(result).unused_tokens or {}).get("bins")]
    if not drawn:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for result in drawn:
        bins = run_of(result).unused_tokens["bins"]
        for transform in TRANSFORM_LABELS:
            if transform in bins[0]:
                label = f"{run_label(result)}: {TRANSFORM_LABELS[transform].removeprefix('+ ')}"
                ax.plot([row["bin_start"] for row in bins], [row[transform] for row in bins], marker=".",
                        label=label, linestyle="-" if transform == "original" else "--")
    unused = run_of(drawn[0]).unused_tokens
    ax.set_xlabel(f"vocabulary ids, bins of {unused['bin_size']} (bin start)")
    what = token_label(unused)
    ax.set_ylabel(f"mean cosine with the {what}")
    ax.set_title(f"Cosine between the {unused['count']} {what} and the vocabulary "
                 "(Bis et al. 2021, Fig. 3)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def write_isotropy_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the isotropy runs and the Fig. 3 plot; returns (text, files)."""
    results = sorted(results, key=run_label)
    sections = ["Table 1: isotropy I(W) of the vectors as they are, centred (W_c), scaled-centred (W_sc) and "
                "post-processed (W_r: centred, top D principal components removed).\n\n" + table1(results)]
    with_benchmarks = [result for result in results if run_of(result).benchmarks]
    if with_benchmarks:
        correlations = sorted({row["correlation"] for result in with_benchmarks for row in run_of(result).benchmarks})
        sections.append(f"Table 2: mean {'/'.join(correlations)} correlation x 100 over the word benchmarks (change "
                        f"against the original in brackets).\n\n{table2(with_benchmarks)}")
        sections.append(f"Per benchmark (⟨·,·⟩ / cos, x 100) and coverage:\n\n{table3(with_benchmarks)}")
    files = [FIGURE] if plot_unused_cosine(results, out_dir / FIGURE) else []
    if files:
        sections.append(f"Fig. 3: `{FIGURE}`.")
    return "\n\n".join(sections), files


# This analysis's section of report.md (probing.report finds it by its ANALYSIS): which results are its runs, the writer
# of the section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_isotropy, write_isotropy_report, "Isotropy (Bis et al. 2021)", ("isotropy",))
