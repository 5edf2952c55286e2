"""Collect the results.json files of a sweep into a per-layer table (printed, CSV, Markdown) and plots
(micro-F1 by layer; per-class test F1 by layer as a heatmap).

Runs automatically at the end of every Hydra multirun (see conf/hydra/default.yaml) and by hand on any folder:

    python -m probing.report logs/probe/multiruns/2026-11-22_10-00-00
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

RESULTS_FILE = "results.json"
# A row of the table is one setting; runs that differ only in their seed are aggregated (mean ± std).
SETTING_KEYS = ("model", "data", "probe", "pooling", "context_size", "layer")
SPLITS = ("dev", "test")


def find_results(folder: Path) -> list[dict[str, Any]]:
    """Every results.json below `folder`, each with the file it came from."""
    results = []
    for path in sorted(Path(folder).rglob(RESULTS_FILE)):
        record = json.loads(path.read_text(encoding="utf-8"))
        record["_file"] = str(path)
        results.append(record)
    return results


def _layer_sort_key(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int) else (1, str(value))


def _row_sort_key(row: dict) -> tuple:
    return tuple(_layer_sort_key(row[k]) if k == "layer" else str(row[k]) for k in SETTING_KEYS)


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting with mean/std over seeds of dev/test micro-F1 and the test sizes."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for result in results:
        groups[tuple(result.get(k) for k in SETTING_KEYS)].append(result)
    rows = []
    for key, runs in groups.items():
        row = dict(zip(SETTING_KEYS, key))
        row["seeds"] = sorted(r.get("seed") for r in runs)
        for split in SPLITS:
            scores = [r[split]["micro_f1"] for r in runs if split in r]
            row[f"{split}_micro_f1"] = statistics.fmean(scores) if scores else None
            row[f"{split}_micro_f1_std"] = statistics.stdev(scores) if len(scores) > 1 else None
        test = runs[0].get("test", {})
        row["test_combinations"] = test.get("n_combinations")
        row["test_contexts"] = test.get("n_contexts")
        rows.append(row)
    return sorted(rows, key=_row_sort_key)


def _varying(rows: list[dict], keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if len({str(r[k]) for r in rows}) > 1]


def _format_score(row: dict, split: str) -> str:
    mean, std = row[f"{split}_micro_f1"], row[f"{split}_micro_f1_std"]
    if mean is None:
        return "-"
    return f"{mean:.3f} ± {std:.3f}" if std is not None else f"{mean:.3f}"


def table_columns(rows: list[dict]) -> list[str]:
    """Setting columns that vary across rows (layer always shown), then the scores."""
    setting = [k for k in SETTING_KEYS if k == "layer" or k in _varying(rows, SETTING_KEYS)]
    return setting + ["dev micro-F1", "test micro-F1", "seeds", "test comb.", "test contexts"]


def table_cells(row: dict, columns: list[str]) -> list[str]:
    derived = {
        "dev micro-F1": _format_score(row, "dev"),
        "test micro-F1": _format_score(row, "test"),
        "seeds": str(len(row["seeds"])),
        "test comb.": str(row["test_combinations"]),
        "test contexts": str(row["test_contexts"]),
    }
    return [derived[c] if c in derived else str(row[c]) for c in columns]


def markdown_table(rows: list[dict]) -> str:
    columns = table_columns(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(table_cells(row, columns)) + " |" for row in rows]
    return "\n".join(lines)


def fixed_settings(rows: list[dict]) -> str:
    fixed = [k for k in SETTING_KEYS if k != "layer" and k not in _varying(rows, SETTING_KEYS)]
    return ", ".join(f"{k}={rows[0][k]}" for k in fixed)


def write_csv(rows: list[dict], path: Path) -> None:
    fields = list(SETTING_KEYS) + [
        "seeds", "dev_micro_f1", "dev_micro_f1_std", "test_micro_f1", "test_micro_f1_std",
        "test_combinations", "test_contexts",
    ]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({**{k: row[k] for k in fields}, "seeds": " ".join(map(str, row["seeds"]))})


def plot_by_layer(rows: list[dict], path: Path) -> bool:
    """Micro-F1 by layer, one line per setting (other than layer); False if no integer layers to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        if isinstance(row["layer"], int):
            curves[tuple(row[k] for k in SETTING_KEYS if k != "layer")].append(row)
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    varying = [k for k in _varying(rows, SETTING_KEYS) if k != "layer"]
    for key, points in sorted(curves.items(), key=lambda item: str(item[0])):
        setting = dict(zip([k for k in SETTING_KEYS if k != "layer"], key))
        label = ", ".join(f"{k}={setting[k]}" for k in varying) or f"{setting['model']} / {setting['data']}"
        points.sort(key=lambda r: r["layer"])
        layers = [p["layer"] for p in points]
        color = None  # dev (dashed) in the colour of its test curve
        for split, style in (("test", "-o"), ("dev", "--")):
            means = [p[f"{split}_micro_f1"] for p in points]
            if any(m is None for m in means):
                continue
            stds = [p[f"{split}_micro_f1_std"] or 0.0 for p in points]
            bars = ax.errorbar(layers, means, yerr=stds if any(stds) else None, fmt=style, capsize=3, color=color,
                               label=f"{label} ({split})", alpha=1.0 if split == "test" else 0.6)
            color = bars[0].get_color()
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel("micro-F1 (Zhao et al. 2020)")
    ax.set_title(f"S-class probing by layer\n{fixed_settings(rows)}", fontsize=9)
    ax.set_xticks(sorted({r["layer"] for r in rows if isinstance(r["layer"], int)}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def per_class_by_layer(results: list[dict[str, Any]]) -> tuple[list[str], list[int], list[list[float | None]]] | None:
    """Mean test F1 of each class at each integer layer, when the results differ only in layer and seed."""
    layered = [r for r in results if isinstance(r.get("layer"), int) and "per_class_f1" in r.get("test", {})]
    settings = {tuple(str(r.get(k)) for k in SETTING_KEYS if k != "layer") for r in layered}
    class_lists = {tuple(r.get("classes", ())) for r in layered}
    if len(settings) != 1 or len(class_lists) != 1 or not next(iter(class_lists)):
        return None
    classes = list(next(iter(class_lists)))
    layers = sorted({r["layer"] for r in layered})
    grid = []
    for k in range(len(classes)):
        row = []
        for layer in layers:
            scores = [r["test"]["per_class_f1"][k] for r in layered if r["layer"] == layer]
            scores = [x for x in scores if x is not None]
            row.append(statistics.fmean(scores) if scores else None)
        grid.append(row)
    return classes, layers, grid


def plot_per_class(results: list[dict[str, Any]], path: Path) -> bool:
    """Heatmap of per-class test F1 (rows: classes, columns: layers); False if the sweep is not a layer sweep."""
    table = per_class_by_layer(results)
    if table is None:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    classes, layers, grid = table
    values = np.array([[np.nan if x is None else x for x in row] for row in grid], dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 + 0.55 * len(layers), 1.0 + 0.28 * len(classes)))
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(layers)), [str(layer) for layer in layers])
    ax.set_yticks(range(len(classes)), classes, fontsize=7)
    ax.set_xlabel("layer")
    ax.set_title("test F1 per class (blank: undefined)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.05)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_report(folder: Path, out_dir: Path | None = None) -> list[dict] | None:
    """Aggregate the results below `folder`; write report.csv, report.md and the plots; print the table."""
    folder = Path(folder)
    out_dir = Path(out_dir or folder)
    results = find_results(folder)
    if not results:
        print(f"No {RESULTS_FILE} found below {folder}.")
        return None
    rows = aggregate(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows)
    write_csv(rows, out_dir / "report.csv")
    heading = f"# S-class probing report\n\n{len(results)} runs from `{folder}`; {fixed_settings(rows)}.\n\n"
    (out_dir / "report.md").write_text(heading + table + "\n", encoding="utf-8")
    plots = [name for name, plot, data in (("micro_f1_by_layer.png", plot_by_layer, rows),
                                           ("per_class_f1_by_layer.png", plot_per_class, results))
             if plot(data, out_dir / name)]
    print(f"\nS-class probing, {len(results)} runs ({fixed_settings(rows)}):\n{table}\n")
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
