"""results.json files of `analyze.py analysis=lens` -> a table per run (one row per layer: the logit lens's and the
tuned lens's cross-entropy of the next token and KL from the model's own prediction, in bits per token, as the
probes' V-information; the model's own cross-entropy as the last row) and one plot of bits per token by layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.report.aggregate import is_kind
from probing.report.plots import layer_axis, pyplot, save_figure
from probing.report.tables import markdown
from probing.results.kinds import LensResults

# The analysis whose runs this section renders: its config's `analysis.name`, the "analysis" of its results.json and
# the `name` of its component (probing.analysis.Analysis).
ANALYSIS = LensResults.KIND

FIGURE = "lens_bits_by_layer.png"
COLUMNS = (("logit lens bits", "logit_lens_bits"), ("tuned lens bits", "tuned_lens_bits"),
           ("logit lens KL bits", "logit_lens_kl_bits"), ("tuned lens KL bits", "tuned_lens_kl_bits"))


def is_lens(result: dict[str, Any]) -> bool:
    """A result of analyze.py's lens analysis."""
    return is_kind(result, ANALYSIS)


def run_label(result: dict[str, Any]) -> str:
    """"smollm2, 5 held-out sentences (ud_ewt train)" (", random init" for the control)."""
    split = result["split"]
    return (f"{result.get('model') or '?'}{', random init' if result.get('random_init') else ''}, "
            f"{split['held_out_sentences']} held-out sentences ({result['sentence_source']})")


def table(result: dict[str, Any]) -> str:
    """One row per layer, then the model's own cross-entropy."""
    body = [[str(row["layer"]), *(f"{row[key]:.3f}" for _, key in COLUMNS)] for row in result["layers"]]
    body.append(["model", f"{result['model_bits']:.3f}", "", "", ""])
    return markdown(["layer", *(header for header, _ in COLUMNS)], body)


def summary_line(result: dict[str, Any]) -> str:
    """"lens of gpt2 on 1,234 held-out tokens: model 4.120 bits per token; layer 6 logit lens 7.8, tuned lens 5.1"."""
    middle = result["layers"][len(result["layers"]) // 2]
    return (f"lens of {result.get('model')} on {result['split']['held_out_tokens']:,} held-out tokens: the model "
            f"{result['model_bits']:.3f} bits per token; layer {middle['layer']}: logit lens "
            f"{middle['logit_lens_bits']:.3f}, tuned lens {middle['tuned_lens_bits']:.3f} ({FIGURE})")


def plot_bits(results: list[dict[str, Any]], path: Path) -> bool:
    """Bits per token by layer (a log scale), one colour per run: the logit lens dashed, the tuned lens solid, the
    model's own cross-entropy dotted."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for index, result in enumerate(results):
        colour = f"C{index % 10}"
        layers = [row["layer"] for row in result["layers"]]
        label = run_label(result)
        ax.plot(layers, [row["logit_lens_bits"] for row in result["layers"]], "--o", color=colour, markersize=3,
                label=f"{label}: logit lens")
        ax.plot(layers, [row["tuned_lens_bits"] for row in result["layers"]], "-o", color=colour, markersize=3,
                label=f"{label}: tuned lens")
        ax.axhline(result["model_bits"], color=colour, linestyle=":", linewidth=1, label=f"{label}: the model")
    layer_axis(ax)
    ax.set_yscale("log")  # the embedding output read as a prediction can cost ten times the top layer's bits
    ax.set_ylabel("cross-entropy of the next token (bits per token, log scale)")
    ax.set_title("Logit lens and tuned lens on held-out text", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def write_lens_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the lens runs (a table each) and their plot; returns (text, files)."""
    results = sorted(results, key=lambda result: (str(result.get("model")), bool(result.get("random_init"))))
    plot_bits(results, out_dir / FIGURE)
    intro = ("Each layer's residual stream read through the model's final norm and unembedding, as it is (the logit "
             "lens) and through a trained affine map (the tuned lens, Belrose et al. 2023): the cross-entropy of "
             "the actual next token on held-out sentences and the KL from the model's own next-token distribution, "
             "in bits per token (the probes' V-information's unit); the last row is the model's own cross-entropy, "
             "which the top layer's lenses equal.")
    tables = [f"**{run_label(result)}** ({result['split']['held_out_tokens']:,} tokens)\n\n{table(result)}"
              for result in results]
    return "\n\n".join([intro, *tables, f"Bits per token by layer: `{FIGURE}`."]), [FIGURE]


# This analysis's section of report.md (probing.report finds it by its ANALYSIS): which results are its runs, the writer
# of the section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_lens, write_lens_report, "Logit lens and tuned lens (Belrose et al. 2023)",
           ("sentence_source", "split", "layers", "model_bits"))
