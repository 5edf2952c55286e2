"""GLUE SST-2 (one sentence) and MRPC (a sentence pair) TSV files as labelled text examples.

See docs/data.md, 'GLUE TSV files (SST-2, MRPC)'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from probing.data.task_records import GLUE_LABELS, HUB_SPLITS, TextExample
from probing.data.text import read_lines
from probing.errors import DataFormatError

GLUE_FILES = {"train": "train.tsv", "dev": "dev.tsv"}
DATA_DIR_FIX = "set `data.data_dir` to the task's GLUE folder (SST-2/ or MRPC/) with train.tsv and dev.tsv"


@dataclass(frozen=True)
class GlueColumns:
    """The columns of one task, in the TSV header and in the Hugging Face dataset (`hub_*`)."""

    text: str
    label: str
    text_pair: str | None = None
    hub_text: str = "sentence"
    hub_text_pair: str | None = None


GLUE_COLUMNS = {
    "sst2": GlueColumns(text="sentence", label="label"),
    "mrpc": GlueColumns(text="#1 String", label="Quality", text_pair="#2 String", hub_text="sentence1",
                        hub_text_pair="sentence2"),
}


def read_glue_tsv(path: str | Path, task: str, config_key: str = "data.data_dir") -> list[TextExample]:
    """The examples of one GLUE TSV file of `task` ("sst2" or "mrpc"), in file order; source "file:line"."""
    columns = GLUE_COLUMNS[task]
    lines = read_lines(path, config_key)
    header = next(lines, None)
    if header is None:
        raise DataFormatError(path, None, "empty file, expected a header row", DATA_DIR_FIX)
    positions = _column_positions(header[1].split("\t"), columns, path)
    examples = [_example(line.split("\t"), positions, f"{path}:{number}", path, number) for number, line in lines]
    if not examples:
        raise DataFormatError(path, None, "no example rows after the header", DATA_DIR_FIX)
    return examples


def _column_positions(header: list[str], columns: GlueColumns, path: str | Path) -> dict[str, int]:
    """{"text"|"text_pair"|"label": position in a row}, from the header's column names."""
    wanted = {"text": columns.text, "label": columns.label}
    if columns.text_pair is not None:
        wanted["text_pair"] = columns.text_pair
    missing = [name for name in wanted.values() if name not in header]
    if missing:
        problem = f"the header has no column {missing[0]!r} (columns: {header})"
        raise DataFormatError(path, 1, problem, f"give a GLUE TSV whose header names {list(wanted.values())}")
    return {field: header.index(name) for field, name in wanted.items()}


def _example(row: list[str], positions: Mapping[str, int], source: str, path: str | Path, number: int) -> TextExample:
    needed = max(positions.values()) + 1
    if row == [""]:
        raise DataFormatError(path, number, "blank line", "remove blank lines: one example per row")
    if len(row) < needed:
        problem = f"{len(row)} tab-separated columns, the header needs {needed}"
        raise DataFormatError(path, number, problem, "one example per row, columns separated by single tabs")
    values = {field: row[position].strip() for field, position in positions.items()}
    if values["label"] not in GLUE_LABELS:
        raise DataFormatError(path, number, f"label {values['label']!r} is not 0 or 1", "label each row 0 or 1")
    empty = [field for field, value in values.items() if not value]
    if empty:
        raise DataFormatError(path, number, f"empty {empty[0]}", "give a non-empty text in each text column")
    return TextExample(values["text"], values["label"], values.get("text_pair"), source)


def load_glue_from_hub(name: str, task: str) -> dict[str, list[TextExample]]:
    """The labelled splits of the Hugging Face dataset `name` with config `task` (train, validation as dev).

    GLUE's test splits are unlabelled (label -1) and left out. Each example's source is "name/task:split:row"."""
    dataset = _load_hub_dataset(name, task)
    return {
        HUB_SPLITS[hub_split]: [_hub_example(row, task, f"{name}/{task}:{hub_split}:{i}") for i, row in enumerate(rows)]
        for hub_split, rows in dataset.items()
        if hub_split in HUB_SPLITS and HUB_SPLITS[hub_split] in GLUE_FILES
    }


def _hub_example(row: Mapping, task: str, source: str) -> TextExample:
    columns = GLUE_COLUMNS[task]
    label = str(row["label"])
    if label not in GLUE_LABELS:
        raise DataFormatError(source, None, f"label {row['label']!r} is not 0 or 1", DATA_DIR_FIX)
    pair = row[columns.hub_text_pair] if columns.hub_text_pair else None
    return TextExample(row[columns.hub_text].strip(), label, pair.strip() if pair is not None else None, source)


def _load_hub_dataset(name: str, task: str):
    import datasets

    try:
        return datasets.load_dataset(name, task)
    # RuntimeError: a repository that still holds a loading script, which `datasets` no longer runs
    except (OSError, ValueError, RuntimeError, datasets.exceptions.DatasetsError) as error:
        problem = f"cannot load the dataset {name!r} ({task}) from the Hugging Face hub ({error})"
        raise DataFormatError(f"{name}/{task}", None, problem, DATA_DIR_FIX) from None
