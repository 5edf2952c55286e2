"""results.json files of `analyze.py analysis=neurons` -> where in a layer a word task's labels are (Dalvi et al. 2019;
Antverg & Belinkov 2022; Gurnee et al. 2023): per run, the curves against k (the number of neurons, log2 axis) as
plots and as a table, the k a ranking needs to reach 95% of the same probe's test accuracy on every neuron, the
k-sparse probes' F1 per label and, when the run computed them, each label's top neurons.

See docs/neurons.md, 'What a run computes' and 'Choices where the papers leave room'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.report.aggregate import is_kind
from probing.report.plots import pyplot, save_figure
from probing.report.runs import compared_values, differing_values
from probing.report.tables import markdown
from probing.results import load
from probing.results.kinds import NeuronsResults

# The analysis whose runs this section renders: its config's `analysis.name`, the "analysis" of its results.json and
# the `name` of its component (probing.analysis.Analysis).
ANALYSIS = NeuronsResults.KIND

ABLATION_FIGURE = "neurons_ablation.png"
RETRAINED_FIGURE = "neurons_retrained.png"
CONTROL = "random"
SHARE = 0.95  # of the full probe's test accuracy: what `k_to_reach_table` asks of a retrained probe
GROUPS = {"retrained": "linear, retrained", "cross_check": "MLP-1, retrained (cross-check)"}
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown")


def is_neurons(result: dict[str, Any]) -> bool:
    """A result of analyze.py's neuron analysis."""
    return is_kind(result, ANALYSIS)


def run_of(result: dict[str, Any]) -> NeuronsResults:
    """A run's results (a results.json, or the job's own before they are written) as their type."""
    return load(result, kind=ANALYSIS)


def curve(result: dict[str, Any], group: str, name: str) -> list[float]:
    """A group's (GROUPS) test accuracies of the probes retrained on the top-k neurons of ranking `name`, by k."""
    return getattr(run_of(result), group)[name]


def ranked(result: dict[str, Any]) -> list[str]:
    """The run's rankings, the random control last."""
    return [name for name in run_of(result).rankings if name != CONTROL] + [CONTROL]


def run_label(result: dict[str, Any]) -> str:
    """"minilm, upos, layer 3" ("minilm (random init), ner, layer 3"), then what tells the run apart from others of
    the same model, task and layer in a report (`with_run_labels`: `[<key>=<value>]`, e.g. the key analysis.ranking
    at probeless)."""
    run = run_of(result)
    init = " (random init)" if run.random_init else ""
    apart = f" [{result['apart']}]" if result.get("apart") else ""
    return f"{run.model or '?'}{init}, {run.task}, layer {run.layer}{apart}"


def with_run_labels(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results in report order, each with `apart`: the config values that differ among the runs of its model,
    task and layer (a sweep over analysis.ranking, the seed, analysis.l1, a jsonl task's file...), for `run_label`."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault(run_order(result), []).append(result)
    labelled = []
    for key in sorted(groups):
        runs = groups[key]
        differ = sorted(differing_values(runs))
        values = [compared_values(run) for run in runs]
        labelled += sorted(({**run, "apart": ", ".join(f"{name}={value.get(name)}" for name in differ)}
                            for run, value in zip(runs, values)), key=lambda run: run["apart"])
    return labelled


def k_to_reach(curve: list[float], ks: list[int], target: float) -> int | None:
    """The smallest k whose accuracy reaches `target`; None if none does."""
    return next((k for k, accuracy in zip(ks, curve) if accuracy >= target), None)


def full_accuracy(result: dict[str, Any], group: str) -> float:
    """The test accuracy of a group's probe family on every neuron: the elastic-net probe for the retrained linear
    probes, the MLP-1s on all D neurons (the mean of each ranking's, k = D) for the cross-check."""
    if group == "retrained":
        return run_of(result).probe["test_accuracy"]
    return sum(curve(result, group, name)[-1] for name in ranked(result)) / len(ranked(result))


def majority_accuracy(result: dict[str, Any]) -> float | None:
    """The test accuracy of always answering the most frequent training label (None in results of before it was
    recorded)."""
    majority = run_of(result).majority
    return None if majority is None and "majority" not in result else majority.get("test_accuracy")


def k_cell(k: int | None, result: dict[str, Any], group: str) -> str:
    """A k-to-95% cell; flagged where the majority label alone already reaches the target (an imbalanced task: the
    k then says nothing about the neurons)."""
    majority = majority_accuracy(result)
    trivial = majority is not None and majority >= SHARE * full_accuracy(result, group)
    return f"{k or '-'}{' (majority reaches it)' if trivial else ''}"


def k_to_reach_table(result: dict[str, Any]) -> dict[str, dict[str, int | None]]:
    """{group: {ranking: k}}: for the retrained linear probes and the MLP-1 cross-check, the k each ranking needs to
    reach SHARE of its family's accuracy on every neuron (`full_accuracy`)."""
    ks = run_of(result).ks
    return {group: {name: k_to_reach(curve(result, group, name), ks, SHARE * full_accuracy(result, group))
                    for name in ranked(result)} for group in GROUPS}


def curves(result: dict[str, Any]) -> dict[str, list[float]]:
    """Every curve of a run by a flat name (ablation/top_<ranking>, ablation/bottom_<ranking>, ablation/random,
    retrained/<ranking>, cross_check/<ranking>), each a test accuracy per k."""
    ablation = run_of(result).ablation
    flat = {f"ablation/{end}_{name}": ablation[name][end] for name in ranked(result)[:-1] for end in ("top", "bottom")}
    flat[f"ablation/{CONTROL}"] = ablation[CONTROL]
    return flat | {f"{group}/{name}": curve(result, group, name) for group in GROUPS for name in ranked(result)}


def summary_line(result: dict[str, Any]) -> str:
    """One line: the full probe's accuracy and each ranking's k to 95% (retrained, cross-check)."""
    ks = k_to_reach_table(result)
    per_ranking = ", ".join(f"{name} {k_cell(ks['retrained'][name], result, 'retrained')} / "
                            f"{k_cell(ks['cross_check'][name], result, 'cross_check')}" for name in ranked(result))
    majority = majority_accuracy(result)
    run = run_of(result)
    return (f"{run_label(result)}: the elastic-net probe's test accuracy {run.probe['test_accuracy']:.3f} on "
            f"{run.neurons} neurons (the majority label's {number(majority)}); k to reach 95% of it (linear / "
            f"MLP-1 retrained): {per_ranking}")


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def curve_table(result: dict[str, Any]) -> str:
    """One row per curve, one column per k."""
    header = ["curve", *(f"k={k}" for k in run_of(result).ks)]
    return markdown(header, [[name, *map(number, values)] for name, values in curves(result).items()])


def k_table(results: list[dict[str, Any]]) -> str:
    header = ["run", "neurons", "majority label", "linear, all neurons", "MLP-1, all neurons", "ranking",
              f"k to {SHARE:.0%}: linear", f"k to {SHARE:.0%}: MLP-1"]
    body = []
    for result in results:
        ks = k_to_reach_table(result)
        full = [number(majority_accuracy(result)), *(number(full_accuracy(result, group)) for group in GROUPS)]
        body += [[run_label(result), str(run_of(result).neurons), *full, name,
                  *(k_cell(ks[group][name], result, group) for group in GROUPS)] for name in ranked(result)]
    return markdown(header, body)


def sparse_table(result: dict[str, Any]) -> str:
    sparse = run_of(result).sparse
    header = ["label", "best neuron", *(f"F1 k={k}" for k in sparse["k"])]
    body = [[label, str(probes["best_neuron"]), *map(number, probes["f1"])]
            for label, probes in sparse["labels"].items()]
    return markdown(header, body)


def top_neuron_table(result: dict[str, Any]) -> str:
    per_label = run_of(result).per_label
    names = [name for name in ranked(result) if any(name in rows for rows in per_label.values())]
    header = ["label", *(f"top neurons: {name}" for name in names)]
    body = [[label, *(" ".join(map(str, rows[name]["neurons"])) if name in rows else "-" for name in names)]
            for label, rows in per_label.items()]
    return markdown(header, body)


def draw(ax, result: dict[str, Any], lines: list[tuple[str, list[float], str, str]]) -> None:
    """Curves (label, values, colour, line style) against the run's ks on a log2 axis, the full probe dotted and
    the majority label's rate dash-dotted."""
    for label, values, colour, style in lines:
        ax.plot(run_of(result).ks, values, style, color=colour, marker="o", markersize=3, label=label)
    ax.axhline(run_of(result).probe["test_accuracy"], color="0.5", linestyle=":", linewidth=1, label="full probe")
    if majority_accuracy(result) is not None:
        ax.axhline(majority_accuracy(result), color="0.75", linestyle="-.", linewidth=1, label="majority label")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (neurons)")
    ax.set_ylabel("test accuracy")
    ax.set_title(run_label(result), fontsize=8)
    ax.grid(alpha=0.3)


def plot_panels(results: list[dict[str, Any]], path: Path, title: str, lines_of) -> bool:
    """One panel per run, `lines_of(result, colours)` its curves, each ranking in its colour in every panel; one
    legend of every curve drawn."""
    plt = pyplot()
    names = sorted({name for result in results for name in ranked(result)[:-1]})
    colours = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(names)}
    columns = min(3, len(results))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    for ax, result in zip(axes.flat, results):
        draw(ax, result, lines_of(result, colours))
    for ax in list(axes.flat)[len(results):]:
        ax.set_visible(False)
    legend = {}
    for ax in axes.flat[:len(results)]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def ablation_lines(result: dict[str, Any], colours: dict[str, str]) -> list[tuple[str, list[float], str, str]]:
    ablation = run_of(result).ablation
    lines = [(f"{end} {name}", ablation[name][end], colours[name], style)
             for name in ranked(result)[:-1] for end, style in (("top", "-"), ("bottom", ":"))]
    return [*lines, (CONTROL, ablation[CONTROL], "0.3", "--")]


def retrained_lines(result: dict[str, Any], colours: dict[str, str]) -> list[tuple[str, list[float], str, str]]:
    return [(f"{name}, {GROUPS[group]}", curve(result, group, name), colours.get(name, "0.3"), style)
            for group, style in (("retrained", "-"), ("cross_check", "--")) for name in ranked(result)]


def plot_curves(results: list[dict[str, Any]], out_dir: Path) -> list[str]:
    """The ablation and retrained-probe plots of `results` into `out_dir`; the files written."""
    fill = "/".join(sorted({run_of(result).ablation["fill"] for result in results}))
    plot_panels(results, out_dir / ABLATION_FIGURE, f"The trained probe with k neurons replaced ({fill} fill)",
                ablation_lines)
    plot_panels(results, out_dir / RETRAINED_FIGURE, "Probes retrained on the top-k neurons of each ranking",
                retrained_lines)
    return [ABLATION_FIGURE, RETRAINED_FIGURE]


def run_order(result: dict[str, Any]) -> tuple:
    run = run_of(result)
    return str(run.model), bool(run.random_init), run.task, run.layer


def write_neurons_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the neuron-analysis runs and their plots; returns (text, files)."""
    results = with_run_labels(results)
    files = plot_curves(results, out_dir)
    intro = (f"Test accuracy against k, the number of neurons (plots: `{ABLATION_FIGURE}`, `{RETRAINED_FIGURE}`). "
             "Ablation: the elastic-net probe trained on every neuron, its input with the top-k, bottom-k or k random "
             "neurons of a ranking replaced. Retrained: probes trained on only the top-k neurons (linear; MLP-1 as the "
             "cross-check of a second probe).")
    parts = [intro, f"## k to reach {SHARE:.0%} of the same probe's test accuracy on every neuron",
             k_table(results)]
    for result in results:
        parts += [f"## {run_label(result)}: curves ({run_of(result).ablation['fill']} fill)", curve_table(result),
                  "k-sparse probes (one label against the rest; test F1):", sparse_table(result)]
        if run_of(result).per_label:
            parts += ["Top neurons of each label:", top_neuron_table(result)]
    return "\n\n".join(parts), files


# This analysis's section of report.md (probing.report finds it by its ANALYSIS): which results are its runs, the writer
# of the section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_neurons, write_neurons_report, "Neuron-level analysis (Dalvi et al. 2019; Antverg & Belinkov 2022)",
           ("task", "layer", "neurons", "ks", "probe", "rankings", "ablation", "retrained", "cross_check", "sparse"))
