"""Collect the results.json files of a sweep into tables (printed, CSV, Markdown) and plots.

See docs/outputs.md, 'Outputs and tracking' (the report) and each analysis's page.
"""


from __future__ import annotations

import importlib
import pkgutil
import tempfile
from pathlib import Path
from types import ModuleType

from hydra.experimental.callback import Callback

from probing.data.files import write_atomically
from probing.errors import DataFormatError
from probing.report import statement_probes, tree_probes, word_probes
from probing.report.aggregate import RESULTS_FILE, RESULTS_FIX, aggregate, find_results, require
from probing.report.finetuned_probing import has_finetuned_runs, write_finetuned_probing_report
from probing.report.finetuning import is_finetuning, write_finetuning_report
from probing.report.plots import write_plots
from probing.report.runs import distinct_runs
from probing.report.tables import fixed_settings, summary, write_csv
from probing.results.kinds import SClassProbeResults


def analysis_section_modules() -> list[ModuleType]:
    """The modules of this package that render an analysis's runs (they declare its name, `ANALYSIS`, beside their
    `SECTION`), in name order: a new analysis's section module is found here, not listed anywhere."""
    modules = [importlib.import_module(f"{__name__}.{found.name}") for found in pkgutil.iter_modules(__path__)
               if not found.name.startswith("_")]
    return [module for module in modules if hasattr(module, "ANALYSIS")]


# The results of the other jobs (train.py, analyze.py) and of probe.py on the tree and word tasks: which runs are of
# their kind, the writer of their section (returns its Markdown and the files written), its heading, and what the writer
# reads of every run beyond what every results.json is checked for (probing.report.aggregate.check_result): a run
# lacking it is refused, naming its results.json. An analysis's section is the SECTION of its report module, found by
# `analysis_section_modules`. In the order of their sections in report.md.
OTHER_SECTIONS = (
    tree_probes.SECTION,
    word_probes.SECTION,
    statement_probes.SECTION,
    (is_finetuning, write_finetuning_report, "Fine-tuning report", ("epochs_trained", "duration_s")),
    *(module.SECTION for module in analysis_section_modules()),
)


def write_report(folder: Path, out_dir: Path | None = None) -> list[dict] | None:
    """Aggregate the results below `folder`; write report.md, the CSV files and the plots; print the tables.
    Probe runs and fine-tuning runs (train.py) get a section each. Returns the probe rows (None without any run)."""
    folder = Path(folder)
    out_dir = Path(out_dir or folder)
    results, repeats = distinct_runs(find_results(folder))
    if repeats:
        print(f"Counted once: {len(repeats)} results.json of runs found twice (same configuration and seed; a "
              "baseline= run does not read layer=, so a sweep over layers repeats it): "
              + ", ".join(repeats))
    if not results:
        print(f"No {RESULTS_FILE} found below {folder}.")
        return None
    for is_kind, _, heading, needs in OTHER_SECTIONS:
        for result in filter(is_kind, results):
            require(result, needs, heading)
    out_dir.mkdir(parents=True, exist_ok=True)
    probes = [result for result in results if result["kind"] == SClassProbeResults.KIND]
    sections, files, rows = [], [], []
    if probes:
        rows = aggregate(probes)
        write_csv(rows, out_dir / "report.csv")
        files += ["report.csv", *write_plots(rows, probes, out_dir)]
        sections.append(f"# S-class probing report\n\n{len(probes)} runs from `{folder}`; {fixed_settings(rows)}."
                        f"\n\n{summary(rows)}")
    if has_finetuned_runs(probes):
        text, written = write_finetuned_probing_report(probes, out_dir)
        files += written
        sections.append(f"# Probing fine-tuned encoders (Zhao et al. 2020, Fig. 6)\n\n{text}")
    for is_kind, write_section, heading, _ in OTHER_SECTIONS:
        chosen = [result for result in results if is_kind(result)]
        if chosen:
            text, written = written_section(write_section, heading, chosen, out_dir)
            files += written
            sections.append(f"# {heading}\n\n{len(chosen)} runs from `{folder}`.\n\n{text}")
    report = "\n\n".join(sections)
    write_atomically(out_dir / "report.md", report + "\n")
    print(f"\n{report}\n")
    print(f"Report written to {out_dir}: " + ", ".join(["report.md", *files]))
    return rows


# What a section's writer raises on a results.json whose values are not what its run writes (a string for a score, a
# list cut short, a null): the keys themselves are checked first (`require`).
UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def written_section(write_section, heading: str, results: list[dict], out_dir: Path) -> tuple[str, list[str]]:
    """`write_section(results, out_dir)`; a value it cannot read is one DataFormatError naming the results.json (the
    first that fails alone; where each reads alone, the section's files, which fail together) rather than a
    traceback."""
    try:
        return write_section(results, out_dir)
    except UNREADABLE as error:
        problem = f"a value that the report's section \"{heading}\" cannot read ({type(error).__name__}: {error})"
        culprit = next((result["_file"] for result in results if not section_reads(write_section, result)), None)
        if culprit is not None:
            raise DataFormatError(culprit, None, problem, RESULTS_FIX) from None
        first, *others = [result["_file"] for result in results]
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise DataFormatError(first, None, f"{problem}, read beside {shown}, though each of them reads alone",
                              "delete the results.json among these whose value differs in kind from the others' (a "
                              "string where they hold a number, ...) or rerun its job") from None


def section_reads(write_section, result: dict) -> bool:
    """Whether the section's writer reads `result` alone (into a folder of its own, dropped after)."""
    with tempfile.TemporaryDirectory() as scratch:
        try:
            write_section([result], Path(scratch))
        except UNREADABLE:
            return False
    return True


class ReportCallback(Callback):
    """Hydra callback: write the report into the sweep folder when a multirun ends."""

    def on_multirun_end(self, config, **kwargs) -> None:
        write_report(Path(config.hydra.sweep.dir))
