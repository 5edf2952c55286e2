"""Aggregated rows -> Markdown tables (the long one and the paper-shaped ones) and CSV."""


from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from probing.data.files import open_atomically
from probing.report.aggregate import DISPLAY_KEYS, SETTING_KEYS, SPLITS, representation_sort_key, value_sort_key
from probing.report.runs import DATA_VERSION, group_by

CSV_FIELDS = (
    "model", "random_init", "data", "level", "probe", "pooling", "context_size", "variant", "layer", "representation",
    "seeds",
    "dev_micro_f1", "dev_micro_f1_std", "test_micro_f1", "test_micro_f1_std",
    "test_selectivity", "test_selectivity_std", "dev_selectivity", "test_control_micro_f1",
    "seen_micro_f1", "seen_control_micro_f1", "seen_selectivity", "seen_selectivity_std",
    "test_combinations", "test_contexts", "mix_weights", "gamma",
)





def context_label(size: int | None) -> str:
    return "all" if size is None else str(size)


def display_value(row: dict, key: str) -> str:
    value = row[key]
    if key == "model" and row.get("random_init"):
        return f"{value} (random init)"
    return context_label(value) if key == "context_size" else str(value)


def varying_keys(rows: list[dict], keys: Iterable[str]) -> list[str]:
    return [k for k in keys if len({display_value(r, k) for r in rows}) > 1]


def setting_label(row: dict, keys: Iterable[str]) -> str:
    """"model=minilm, context_size=all, <key>=<value>" (a key such as probe.mix.lr): a variant is shown as its own
    config values, a data version as its files."""
    parts = (display_value(row, k) if k in ("variant", DATA_VERSION) else f"{k}={display_value(row, k)}" for k in keys)
    return ", ".join(part for part in parts if part)


def fixed_settings(rows: list[dict]) -> str:
    varying = varying_keys(rows, DISPLAY_KEYS)
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
    setting = [k for k in DISPLAY_KEYS if k == "representation" or k in varying_keys(rows, DISPLAY_KEYS)]
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
    title_keys = [k for k in varying_keys(rows, DISPLAY_KEYS) if k not in apart]
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


def context_sizes(rows: list[dict]) -> list[int | None]:
    return sorted({r["context_size"] for r in rows}, key=value_sort_key)


def _context_size_table(group: list[dict]) -> list[str]:
    sizes = context_sizes(group)
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


def number_list(values: Iterable[float] | None) -> str:
    """"0.1000 0.9000": a list of numbers in one CSV cell."""
    return " ".join(f"{v:.4f}" for v in values or ())


def write_rows_csv(rows: list[dict], path: Path, fields: Iterable[str],
                   cells: Callable[[dict], dict] = lambda row: {}) -> None:
    """The aggregated rows of a report section as a CSV file (written atomically): `fields` of each row, its seeds
    and scalar-mix weights as number lists, and the section's own `cells` of a row."""
    fields = list(fields)
    with open_atomically(path, newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({**{k: row[k] for k in fields}, "seeds": " ".join(map(str, row["seeds"])),
                             "mix_weights": number_list(row["mix_weights"]), **cells(row)})


def write_csv(rows: list[dict], path: Path) -> None:
    write_rows_csv(rows, path, CSV_FIELDS)
