"""results.json files of probe.py on statement tasks (task=truth, statements) -> tables and plots by layer x probe
family, as the word tasks' (their scores are the same: accuracy, selectivity, MDL, bits, guardedness).

See docs/statements.md, 'Results and report'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probing.report.aggregate import is_kind
from probing.report.generalisation import generalisation_section
from probing.report.word_probes import write_word_probe_report
from probing.results.kinds import StatementProbeResults

CSV_FILE = "statement_probes.csv"
INTRO = ("One probe per representation on one vector of each whole text (features.pooling: last, the text's last "
         "token, as Marks & Tegmark 2024; or mean): linear, MLP-1, MLP-2 trained by gradient steps, mass_mean "
         "(_iid: whitened) fitted in closed form. Selectivity = accuracy - control-task accuracy (the control task: "
         "each split's labels shuffled, its class balance kept). Dev scores, macro-F1 and per-label F1: `{csv}`.")


def is_statement_probe_run(result: dict[str, Any]) -> bool:
    """A result of probe.py on a statement task."""
    return is_kind(result, StatementProbeResults.KIND)


def write_statement_probe_report(results: list[dict[str, Any]], out_dir: Path) -> tuple[str, list[str]]:
    """The Markdown section of the statement probe runs, statement_probes.csv and the plots per task."""
    text, files = write_word_probe_report(results, out_dir, CSV_FILE, "statement_probes", INTRO)
    across, written = generalisation_section(results, out_dir)
    pictures = [name for name in written if name.startswith("statement_pca_")]
    if across:
        text += f"\n\n{across}"
    if pictures:
        text += ("\n\nThe first two principal components of every statement's vector, by layer, coloured by label "
                 f"(Marks & Tegmark 2024, Fig. 1): {', '.join(f'`{name}`' for name in pictures)}.")
    return text, files + written


# This job's section of report.md (probing.report.OTHER_SECTIONS): which results are its runs, the writer of the
# section, its heading, and what the writer reads of every run (a results.json lacking it is refused, named).
SECTION = (is_statement_probe_run, write_statement_probe_report, "Statement probing report", ("representation",))
