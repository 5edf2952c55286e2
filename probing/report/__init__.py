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

from pathlib import Path

from hydra.experimental.callback import Callback

from probing.report.aggregate import RESULTS_FILE, aggregate, distinct_runs, find_results
from probing.report.plots import write_plots
from probing.report.tables import fixed_settings, summary, write_csv


def write_report(folder: Path, out_dir: Path | None = None) -> list[dict] | None:
    """Aggregate the results below `folder`; write report.csv, report.md and the plots; print the tables."""
    folder = Path(folder)
    out_dir = Path(out_dir or folder)
    results, repeats = distinct_runs(find_results(folder))
    if repeats:
        print(f"Counted once: {len(repeats)} results.json of runs found twice (same configuration and seed): "
              + ", ".join(repeats))
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
