"""Collect the results.json files of a sweep into tables (printed, CSV, Markdown) and plots.

One row per setting (model, random_init, data, level, probe, pooling, context_size, representation, and any other
config value that differs between runs other than by seed, e.g. `probe.mix.lr=0.1`), mean ± std over seeds of
dev/test micro-F1 and, when the control task ran, of selectivity (Hewitt & Liang 2019; on the seen split too when
there is one). report.md adds "paper-shaped" tables laid out like Zhao et al. (2020): one column per representation
in the paper's order (Tables 5/6), and micro-F1 by context size (Fig. 5). Plots: micro-F1 by layer (baselines as
horizontal lines), by context size, the learned scalar-mix weights (Peters et al. 2018) and per-class test F1 by layer.

Runs automatically at the end of every Hydra multirun (see conf/hydra/default.yaml) and by hand on any folder:

    python -m probing.report logs/probe/multiruns/2026-11-22_10-00-00
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from probing.errors import DataFormatError

RESULTS_FILE = "results.json"
# A row of the table is one setting; runs that differ only in their seed are aggregated (mean ± std). `variant`
# holds any other config value that tells runs of the same setting apart (see `with_variants`).
SETTING_KEYS = ("model", "random_init", "data", "level", "probe", "pooling", "context_size", "variant",
                "representation")
# Columns of the Markdown tables: random_init is shown inside the model name ("minilm (random init)").
DISPLAY_KEYS = tuple(k for k in SETTING_KEYS if k != "random_init")
SPLITS = ("dev", "test")
# Averaged too: "seen" (held-out contexts of training words, probe.control_task.seen_fraction > 0; the name is
# probing.datamodule.SEEN, spelled out here so that the report does not import torch and Lightning).
SCORED_SPLITS = (*SPLITS, "seen")
# Scores averaged over seeds; selectivity = micro_f1 - control_micro_f1 (present when the control task ran).
METRICS = ("micro_f1", "selectivity", "control_micro_f1")
# Zhao et al. (2020) Tables 5/6 put the non-layer baselines first, in this order; None is the slot of the static
# embeddings (GloVe, fastText, ...), which are not known in advance.
BASELINE_ORDER = ("Rand", "P-Rand", None, "P-static", "BERTw", "P-BERT")
# Then AVG-l by l, the contextual layers by number, and the scalar mix last.
KIND_ORDER = ("baseline", "avg", "layer", "mix")
CSV_FIELDS = (
    "model", "random_init", "data", "level", "probe", "pooling", "context_size", "variant", "layer", "representation",
    "seeds",
    "dev_micro_f1", "dev_micro_f1_std", "test_micro_f1", "test_micro_f1_std",
    "test_selectivity", "test_selectivity_std", "dev_selectivity", "test_control_micro_f1",
    "seen_micro_f1", "seen_control_micro_f1", "seen_selectivity", "seen_selectivity_std",
    "test_combinations", "test_contexts", "mix_weights", "gamma",
)


# --- reading and aggregating -----------------------------------------------------------------------------------


def find_results(folder: Path) -> list[dict[str, Any]]:
    """Every results.json below `folder`, each with the file it came from."""
    results = []
    for path in sorted(Path(folder).rglob(RESULTS_FILE)):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise DataFormatError(path, error.lineno, f"not valid JSON ({error.msg})",
                                  "delete the file (the run did not finish) or re-run that job") from error
        record["_file"] = str(path)
        results.append(record)
    return results


def with_defaults(result: dict[str, Any]) -> dict[str, Any]:
    """Fill the keys that results written before baselines and controls existed lack: those runs all probed one
    layer of a pretrained encoder in context, so representation = the layer, level = context, random_init = False."""
    return {"level": "context", "random_init": False, **result,
            "representation": result.get("representation") or str(result.get("layer"))}


def config_values(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as {"probe.mix.lr": 0.001, ...}."""
    values = {}
    for key, value in config.items():
        if isinstance(value, dict):
            values |= config_values(value, f"{prefix}{key}.")
        else:
            values[f"{prefix}{key}"] = value
    return values


def _run_specific(key: str, value: Any, result: dict[str, Any]) -> bool:
    """The seed and the run folder (and every value holding the folder's path) differ between any two runs."""
    run_dir = (result.get("config") or {}).get("paths", {}).get("output_dir")
    return key == "seed" or key.startswith("paths.") or (isinstance(value, str) and bool(run_dir) and run_dir in value)


def variant_keys(runs: list[dict[str, Any]]) -> list[str]:
    """Config keys whose values differ among runs of one setting, apart from the seed, the run folder and values
    that follow from the seed (the control task's seed, a run name holding it)."""
    configs = [{key: json.dumps(value, sort_keys=True) for key, value in config_values(r.get("config") or {}).items()
                if not _run_specific(key, value, r)} for r in runs]
    seeds = [json.dumps(r.get("seed")) for r in runs]

    def tells_runs_apart(key: str) -> bool:
        column = [config.get(key) for config in configs]
        return len(set(column)) > 1 and len(set(zip(seeds, column))) > len(set(seeds))

    return sorted(key for key in set().union(*configs) if tells_runs_apart(key))


def with_variants(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each result (with its defaults filled) gains `variant`: the config values that set it apart from runs of the
    same setting ("probe.mix.lr=0.1"), so that a sweep over a hyper-parameter is never averaged as if it were seeds."""
    records = [with_defaults(r) for r in results]
    base_keys = [k for k in SETTING_KEYS if k != "variant"]
    for runs in group_by(records, base_keys).values():
        keys = variant_keys(runs)
        for run in runs:
            values = config_values(run.get("config") or {})
            run["variant"] = ", ".join(f"{key}={values.get(key)}" for key in keys)
    return records


def representation_layer(name: str) -> int | None:
    """The layer index of a layer ("3") or of a type-level layer average ("AVG-3"); None otherwise."""
    match = re.fullmatch(r"(?:AVG-)?(\d+)", name)
    return int(match.group(1)) if match else None


def representation_kind(name: str) -> str:
    """"layer", "avg" (AVG-l), "mix" (scalar mix) or "baseline" (Rand, P-BERT, GloVe, ...)."""
    if name == "mix":
        return "mix"
    if representation_layer(name) is None:
        return "baseline"
    return "avg" if name.startswith("AVG-") else "layer"


def representation_sort_key(name: str) -> tuple:
    """Zhao et al.'s column order: Rand, P-Rand, static names, P-static (P-<file>, e.g. P-GloVe), BERTw, P-BERT,
    AVG-l, layers, mix."""
    kind = representation_kind(name)
    if kind == "baseline":
        slot = name if name in BASELINE_ORDER else "P-static" if name.startswith("P-") else None
        return (0, BASELINE_ORDER.index(slot), name.lower())
    return (KIND_ORDER.index(kind), representation_layer(name) or 0, "")


def of_kind(records: Iterable[dict], *kinds: str) -> list[dict]:
    """The records whose representation is of one of `kinds` (see representation_kind)."""
    return [r for r in records if representation_kind(r["representation"]) in kinds]


def _value_sort_key(value: Any) -> tuple:
    """Numbers numerically, then strings, then None last (context_size None is the whole sentence: "all")."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, (int, float)):
        return (0, value, "")
    return (1, 0, str(value))


def _row_sort_key(row: dict) -> tuple:
    return tuple(representation_sort_key(row[k]) if k == "representation" else _value_sort_key(row[k])
                 for k in SETTING_KEYS)


def group_by(records: Iterable[dict], keys: Iterable[str]) -> dict[tuple, list[dict]]:
    """Records with equal values of `keys`, in first-seen order."""
    keys = tuple(keys)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        groups[tuple(record.get(k) for k in keys)].append(record)
    return groups


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample std of the values present; std is None for fewer than two (no spread to report)."""
    present = [v for v in values if v is not None]
    mean = statistics.fmean(present) if present else None
    return mean, statistics.stdev(present) if len(present) > 1 else None


def _aggregate_mix(runs: list[dict]) -> dict[str, Any]:
    """Mean (std) over seeds of each softmax-normalised mix weight and of gamma, for scalar-mix runs."""
    weights = [r["mix_weights"] for r in runs if r.get("mix_weights")]
    if not weights:
        return {"mix_weights": None, "mix_weights_std": None, "gamma": None, "gamma_std": None}
    per_layer = [mean_std(column) for column in zip(*weights)]
    gamma, gamma_std = mean_std(r.get("gamma") for r in runs)
    return {"mix_weights": [m for m, _ in per_layer], "mix_weights_std": [s or 0.0 for _, s in per_layer],
            "gamma": gamma, "gamma_std": gamma_std}


def _aggregate_setting(key: tuple, runs: list[dict]) -> dict[str, Any]:
    row = dict(zip(SETTING_KEYS, key))
    row["layer"] = runs[0].get("layer")
    row["seeds"] = sorted((r.get("seed") for r in runs), key=_value_sort_key)
    for split, metric in itertools.product(SCORED_SPLITS, METRICS):
        row[f"{split}_{metric}"], row[f"{split}_{metric}_std"] = mean_std(r.get(split, {}).get(metric) for r in runs)
    test = runs[0].get("test", {})
    row["test_combinations"] = test.get("n_combinations")
    row["test_contexts"] = test.get("n_contexts")
    return {**row, **_aggregate_mix(runs)}


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting with mean/std over seeds of the scores, sorted by setting (representations in the
    paper's order, context size "all" last)."""
    groups = group_by(with_variants(results), SETTING_KEYS)
    return sorted((_aggregate_setting(key, runs) for key, runs in groups.items()), key=_row_sort_key)


# --- Markdown tables -------------------------------------------------------------------------------------------


def context_label(size: int | None) -> str:
    return "all" if size is None else str(size)


def display_value(row: dict, key: str) -> str:
    value = row[key]
    if key == "model" and row.get("random_init"):
        return f"{value} (random init)"
    return context_label(value) if key == "context_size" else str(value)


def _varying(rows: list[dict], keys: Iterable[str]) -> list[str]:
    return [k for k in keys if len({display_value(r, k) for r in rows}) > 1]


def setting_label(row: dict, keys: Iterable[str]) -> str:
    """"model=minilm, context_size=all, probe.mix.lr=0.1": a variant is shown as its own config values."""
    parts = (display_value(row, k) if k == "variant" else f"{k}={display_value(row, k)}" for k in keys)
    return ", ".join(part for part in parts if part)


def fixed_settings(rows: list[dict]) -> str:
    varying = _varying(rows, DISPLAY_KEYS)
    return setting_label(rows[0], [k for k in DISPLAY_KEYS if k != "representation" and k not in varying])


def format_score(row: dict | None, name: str, number: str = "{:.3f}", spread: str = "{} ± {}") -> str:
    """`row[name]` with its std over seeds when there is one; "-" when missing."""
    mean, std = (row[name], row[f"{name}_std"]) if row else (None, None)
    if mean is None:
        return "-"
    return spread.format(number.format(mean), number.format(std)) if std is not None else number.format(mean)


def paper_score(row: dict | None, name: str) -> str:
    """Zhao et al.'s style: three decimals without the leading zero (".653"), the std in parentheses."""
    return re.sub(r"(?<![\d.])0\.", ".", format_score(row, name, spread="{} (± {})"))


def _has(rows: list[dict], name: str) -> bool:
    return any(r[name] is not None for r in rows)


def markdown(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])


def table_columns(rows: list[dict]) -> list[str]:
    """Setting columns that vary across rows (representation always shown), then the scores."""
    setting = [k for k in DISPLAY_KEYS if k == "representation" or k in _varying(rows, DISPLAY_KEYS)]
    selectivity = [f"{split} selectivity" for split in ("test", "seen") if _has(rows, f"{split}_selectivity")]
    return setting + ["dev micro-F1", "test micro-F1", *selectivity, "seeds", "test comb.", "test contexts"]


def table_cells(row: dict, columns: list[str]) -> list[str]:
    derived = {
        "dev micro-F1": format_score(row, "dev_micro_f1"),
        "test micro-F1": format_score(row, "test_micro_f1"),
        "test selectivity": format_score(row, "test_selectivity"),
        "seen selectivity": format_score(row, "seen_selectivity"),
        "seeds": str(len(row["seeds"])),
        "test comb.": str(row["test_combinations"]),
        "test contexts": str(row["test_contexts"]),
    }
    return [derived[c] if c in derived else display_value(row, c) for c in columns]


def markdown_table(rows: list[dict]) -> str:
    columns = table_columns(rows)
    return markdown(columns, [table_cells(row, columns) for row in rows])


def _titled_tables(rows: list[dict], apart: tuple[str, ...], table: Callable[[list[dict]], list[str]]) -> list[str]:
    """`table` of each group of rows equal in all settings but `apart`, titled by what tells the groups apart."""
    others = [k for k in SETTING_KEYS if k not in apart]
    title_keys = [k for k in _varying(rows, DISPLAY_KEYS) if k not in apart]
    sections = []
    for group in group_by(rows, others).values():
        tables = table(group)
        if title_keys and tables:
            tables[0] = f"**{setting_label(group[0], title_keys)}**\n\n{tables[0]}"
        sections += tables
    return sections


def _representation_table(group: list[dict]) -> list[str]:
    body = [[split] + [paper_score(r, f"{split}_micro_f1") for r in group] for split in SPLITS]
    return [markdown(["micro-F1", *(r["representation"] for r in group)], body)]


def representation_tables(rows: list[dict]) -> list[str]:
    """Zhao et al. (2020) Tables 5/6: per setting, one column per representation, rows dev and test micro-F1."""
    if len({r["representation"] for r in rows}) < 2:
        return []
    return _titled_tables(rows, ("representation",), _representation_table)


def context_sweeps(rows: list[dict]) -> list[list[dict]]:
    """Rows grouped by every setting but the context size, keeping the groups probed at two or more context sizes:
    the lines of Zhao et al.'s Fig. 5 (a representation seen at one size only has nothing to show there)."""
    groups = group_by(rows, [k for k in SETTING_KEYS if k != "context_size"]).values()
    return [group for group in groups if len({r["context_size"] for r in group}) > 1]


def _context_sizes(rows: list[dict]) -> list[int | None]:
    return sorted({r["context_size"] for r in rows}, key=_value_sort_key)


def _context_size_table(group: list[dict]) -> list[str]:
    sizes = _context_sizes(group)
    names = sorted({r["representation"] for r in group}, key=representation_sort_key)
    cells = {(r["context_size"], r["representation"]): r for r in group}
    return [f"{split} micro-F1\n\n" + markdown(
        ["context size", *names],
        [[context_label(size)] + [paper_score(cells.get((size, n)), f"{split}_micro_f1") for n in names]
         for size in sizes]) for split in SPLITS]


def context_size_tables(rows: list[dict]) -> list[str]:
    """Zhao et al. (2020) Fig. 5 as numbers: one row per context size (0, 2, ..., all), one column per
    representation; dev micro-F1 (what the figure shows), then its test twin."""
    swept = [row for group in context_sweeps(rows) for row in group]
    return _titled_tables(swept, ("representation", "context_size"), _context_size_table)


def summary(rows: list[dict]) -> str:
    """The long table, then the paper-shaped tables that apply."""
    parts = [markdown_table(rows)]
    for heading, tables in (("By representation (Zhao et al. 2020, Tables 5/6)", representation_tables(rows)),
                            ("By context size (Zhao et al. 2020, Fig. 5)", context_size_tables(rows))):
        if tables:
            parts += [f"## {heading}", *tables]
    return "\n\n".join(parts)


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            weights = " ".join(f"{w:.4f}" for w in row["mix_weights"] or ())
            writer.writerow({**{k: row[k] for k in CSV_FIELDS}, "seeds": " ".join(map(str, row["seeds"])),
                             "mix_weights": weights})


# --- plots -----------------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> bool:
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # "tight" keeps the legend drawn beside the axes
    _pyplot().close(fig)
    return True


def _finish(fig, ax, path: Path, rows: list[dict], title: str, xlabel: str, ylabel: str) -> bool:
    """Label the axes, title the plot with the settings all rows share, add the legend and save."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{fixed_settings(rows)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


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
        style = ":" if row["representation"] == "mix" else "--"
        ax.axhline(row["test_micro_f1"], linestyle=style, color=next(colours),
                   label=_legend(label, f"{row['representation']}{_type_tag(row)} (test)"))


def _type_tag(row: dict) -> str:
    """Marks a type-level baseline (Rand, BERTw, a static file) drawn beside the context-level ones."""
    return ", type level" if row.get("level") == "type" else ""


def _draw_layer_group(ax, group: list[dict], label: str, colours: Iterator[str]) -> None:
    group = sorted(group, key=lambda r: representation_sort_key(r["representation"]))
    _draw_layer_curve(ax, of_kind(group, "layer"), _legend(label, "layers"), colours)
    _draw_layer_curve(ax, of_kind(group, "avg"), _legend(label, "AVG-l"), colours)
    for row in of_kind(group, "baseline", "mix"):
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
    fig, ax = _pyplot().subplots(figsize=(7.5, 4.5))
    colours = _colours()
    label_keys = [k for k in _varying(drawn, DISPLAY_KEYS) if k not in ("representation", "level")]
    for group in sweeps:
        _draw_layer_group(ax, group, setting_label(group[0], label_keys), colours)
    ax.set_xticks(sorted({representation_layer(r["representation"]) for r in drawn} - {None}))
    return _finish(fig, ax, path, drawn, "S-class probing by layer", "layer (0 = embeddings)",
                   "micro-F1 (Zhao et al. 2020)")


def plot_by_context_size(rows: list[dict], path: Path) -> bool:
    """Zhao et al. (2020) Fig. 5: dev micro-F1 (test dashed) by context size, one line per representation probed
    at two or more context sizes; False if there is none."""
    sweeps = context_sweeps(rows)
    if not sweeps:
        return False
    drawn = [row for group in sweeps for row in group]
    sizes = _context_sizes(drawn)
    fig, ax = _pyplot().subplots(figsize=(7.5, 4.5))
    colours = _colours()
    label_keys = [k for k in _varying(drawn, DISPLAY_KEYS) if k not in ("representation", "context_size")]
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
    fig, ax = _pyplot().subplots(figsize=(7.5, 4.2))
    width = 0.8 / len(mixed)
    label_keys = [k for k in _varying(mixed, DISPLAY_KEYS) if k != "representation"]
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
    layered = [r for r in of_kind(with_variants(results), "layer") if "per_class_f1" in r.get("test", {})]
    settings = group_by(layered, [k for k in SETTING_KEYS if k != "representation"])
    class_lists = {tuple(r.get("classes", ())) for r in layered}
    if len(settings) != 1 or len(class_lists) != 1 or not next(iter(class_lists)):
        return None
    classes = list(next(iter(class_lists)))
    by_layer = defaultdict(list)
    for result in layered:
        by_layer[representation_layer(result["representation"])].append(result["test"]["per_class_f1"])
    layers = sorted(by_layer)
    grid = [[mean_std(scores[k] for scores in by_layer[layer])[0] for layer in layers] for k in range(len(classes))]
    return classes, layers, grid


def plot_per_class(results: list[dict[str, Any]], path: Path) -> bool:
    """Heatmap of per-class test F1 (rows: classes, columns: layers); False if the sweep is not a layer sweep."""
    table = per_class_by_layer(results)
    if table is None:
        return False
    import numpy as np

    plt = _pyplot()
    classes, layers, grid = table
    values = np.array([[np.nan if x is None else x for x in row] for row in grid], dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 + 0.55 * len(layers), 1.0 + 0.28 * len(classes)))
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(layers)), [str(layer) for layer in layers])
    ax.set_yticks(range(len(classes)), classes, fontsize=7)
    ax.set_xlabel("layer")
    ax.set_title("test F1 per class (blank: undefined)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.05)
    return _save(fig, path)


def write_plots(rows: list[dict], results: list[dict[str, Any]], out_dir: Path) -> list[str]:
    """Every plot that applies to this sweep; returns the file names written."""
    plots = (("micro_f1_by_layer.png", plot_by_layer, rows),
             ("micro_f1_by_context_size.png", plot_by_context_size, rows),
             ("mix_weights.png", plot_mix_weights, rows),
             ("per_class_f1_by_layer.png", plot_per_class, results))
    return [name for name, plot, data in plots if plot(data, out_dir / name)]


# --- entry points ----------------------------------------------------------------------------------------------


def write_report(folder: Path, out_dir: Path | None = None) -> list[dict] | None:
    """Aggregate the results below `folder`; write report.csv, report.md and the plots; print the tables."""
    folder = Path(folder)
    out_dir = Path(out_dir or folder)
    results = find_results(folder)
    if not results:
        print(f"No {RESULTS_FILE} found below {folder}.")
        return None
    rows = aggregate(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = summary(rows)
    write_csv(rows, out_dir / "report.csv")
    heading = f"# S-class probing report\n\n{len(results)} runs from `{folder}`; {fixed_settings(rows)}.\n\n"
    (out_dir / "report.md").write_text(heading + text + "\n", encoding="utf-8")
    plots = write_plots(rows, results, out_dir)
    print(f"\nS-class probing, {len(results)} runs ({fixed_settings(rows)}):\n{text}\n")
    print(f"Report written to {out_dir}: " + ", ".join(["report.csv", "report.md", *plots]))
    return rows


class ReportCallback(Callback):
    """Hydra callback: write the report into the sweep folder when a multirun ends."""

    def on_multirun_end(self, config, **kwargs) -> None:
        write_report(Path(config.hydra.sweep.dir))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a multirun folder (or any folder containing results.json files)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the report (default: the folder)")
    args = parser.parse_args(argv)
    if write_report(args.folder, args.out) is None:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
