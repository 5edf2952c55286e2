"""Probe runs of fine-tuned encoders beside the pretrained one: Zhao et al. 2020 §4.4.2, Figure 6.

See docs/probing.md, 'Probing fine-tuned encoders'.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

from probing.data.files import open_atomically
from probing.report.aggregate import SPLITS, mean_std, representation_layer, split_scores
from probing.report.plots import layer_axis, pyplot, save_figure
from probing.report.tables import markdown
from probing.results import load

SETUPS = ("pretrained", "(a)", "(b)")
SETUP_STYLE = {"pretrained": ("-o", "black"), "(a)": ("--s", "C3"), "(b)": (":^", "C2")}
CSV_FIELDS = ("finetuned", "task", "layer", "split", *SETUPS, "(a) - pretrained", "(b) - pretrained")
PLOT_FILE = "finetuned_probing_by_layer.png"
CSV_FILE = "finetuned_probing.csv"


def setup_of(result: dict[str, Any]) -> str | None:
    """pretrained | (a) | (b); None for runs outside the comparison (a baseline, the mix, probes reused on the
    model they were trained on)."""
    run = load(result)
    if (run.level or "context") != "context" or representation_layer(str(run.representation)) is None:
        return None
    finetuned, reused = run.finetuned_task is not None, bool(run.reused_probes)
    if not finetuned:
        return None if reused else "pretrained"
    return "(a)" if reused else "(b)"


def has_finetuned_runs(results: list[dict[str, Any]]) -> bool:
    return any(setup_of(result) in ("(a)", "(b)") for result in results)


def comparisons(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fine-tuned model: {"label", "task", "scores": {setup: {split: {layer: (mean, std)}}}}."""
    by_setup: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    tasks = {}
    for result in results:
        setup = setup_of(result)
        if setup is not None:
            run = load(result)
            by_setup[setup][run.weights_sha256].append(result)
            if setup != "pretrained":
                tasks[run.weights_sha256] = run.finetuned_task
    pretrained = by_setup["pretrained"]
    found = []
    for weights, task in tasks.items():
        runs_a, runs_b = by_setup["(a)"].get(weights, []), by_setup["(b)"].get(weights, [])
        sources = {load(run).reused_probes.get("weights_sha256") for run in runs_a}
        source = sources.pop() if len(sources) == 1 else (next(iter(pretrained)) if len(pretrained) == 1 else None)
        runs = {"pretrained": pretrained.get(source, []), "(a)": runs_a, "(b)": runs_b}
        found.append({"task": task, "weights": weights or "",
                      "scores": {setup: layer_scores(setup_runs) for setup, setup_runs in runs.items()}})
    shared = [item["task"] for item in found]
    for item in found:
        item["label"] = item["task"] if shared.count(item["task"]) == 1 else f"{item['task']} ({item['weights'][:8]})"
    return sorted(found, key=lambda item: item["label"])


def layer_scores(runs: list[dict[str, Any]]) -> dict[str, dict[int, tuple[float | None, float | None]]]:
    """{split: {layer: (mean, std) of micro-F1 over the runs (seeds) of that layer}}."""
    by_layer = defaultdict(list)
    for run in map(load, runs):
        by_layer[representation_layer(str(run.representation))].append(run)
    return {split: {layer: mean_std(split_scores(run, split).get("micro_f1") for run in layer_runs)
                    for layer, layer_runs in sorted(by_layer.items())}
            for split in SPLITS}


def layers_of(item: dict[str, Any]) -> list[int]:
    return sorted({layer for scores in item["scores"].values() for layer in scores["test"]})


def score(item: dict[str, Any], setup: str, layer: int, split: str = "test") -> float | None:
    return item["scores"][setup][split].get(layer, (None, None))[0]


def difference(item: dict[str, Any], setup: str, layer: int, split: str = "test") -> float | None:
    value, base = score(item, setup, layer, split), score(item, "pretrained", layer, split)
    return None if value is None or base is None else value - base


def shown(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else (f"{value:+.3f}" if signed else f"{value:.3f}")


def comparison_table(item: dict[str, Any]) -> str:
    header = ["layer", "pretrained", f"{item['label']} (a)", f"{item['label']} (b)", "(a) − pretrained",
              "(b) − pretrained"]
    body = [[str(layer), *(shown(score(item, setup, layer)) for setup in SETUPS),
             shown(difference(item, "(a)", layer), signed=True), shown(difference(item, "(b)", layer), signed=True)]
            for layer in layers_of(item)]
    return f"### Fine-tuned on {item['label']}\n\n" + markdown(header, body)


def plot_comparisons(items: list[dict[str, Any]], path: Path) -> bool:
    """One panel per fine-tuned model: test micro-F1 by layer of the pretrained probes, (a) and (b)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(items), figsize=(4.2 * len(items), 3.6), sharey=True, squeeze=False)
    for ax, item in zip(axes[0], items):
        for setup in SETUPS:
            points = [(layer, score(item, setup, layer)) for layer in layers_of(item)]
            points = [(layer, value) for layer, value in points if value is not None]
            if points:
                style, colour = SETUP_STYLE[setup]
                label = setup if setup == "pretrained" else f"{item['label']}-{setup}"
                ax.plot(*zip(*points), style, color=colour, label=label)
        ax.set_title(f"Fine-tuned on {item['label']}", fontsize=9)
        layer_axis(ax)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("s-class test micro-F1")
    fig.suptitle("Probing fine-tuned encoders (Zhao et al. 2020, Fig. 6): (a) pretrained probes, (b) new probes",
                 fontsize=9)
    return save_figure(fig, path)


def write_csv(items: list[dict[str, Any]], path: Path) -> None:
    with open_atomically(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for item in items:
            for layer in layers_of(item):
                for split in SPLITS:
                    writer.writerow({"finetuned": item["label"], "task": item["task"], "layer": layer, "split": split,
                                     **{setup: score(item, setup, layer, split) for setup in SETUPS},
                                     "(a) - pretrained": difference(item, "(a)", layer, split),
                                     "(b) - pretrained": difference(item, "(b)", layer, split)})


def write_finetuned_probing_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section, the CSV and the panel plot of the fine-tuned comparisons; returns (text, files)."""
    items = comparisons(results)
    write_csv(items, out_dir / CSV_FILE)
    files = [CSV_FILE]
    if plot_comparisons(items, out_dir / PLOT_FILE):
        files.append(PLOT_FILE)
    intro = ("Test micro-F1 by layer; (a) = the pretrained model's probes scored on the fine-tuned model's features, "
             "(b) = new probes trained on them (Zhao et al. 2020 §4.4.2).")
    return "\n\n".join([intro, *(comparison_table(item) for item in items)]), files
