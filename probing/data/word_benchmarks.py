"""Word benchmarks: word-similarity files (SimLex-999, MEN, WordSim353, Stanford Rare Words, ...) and the analogy and
categorisation sets, read into plain records. The user names the files (`analysis.benchmarks`); none is bundled
(see the README: the datasets keep their original authors' terms, which the copies in shared/data do not state).

See docs/data.md, 'Word benchmark files'.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from probing.data.text import read_lines
from probing.errors import DataFormatError

BENCHMARKS_KEY = "analysis.benchmarks"


@dataclass(frozen=True)
class SimilarityBenchmark:
    """Word pairs with human similarity (or relatedness) scores; `name` is the file's stem (e.g. EN-SIMLEX-999)."""

    name: str
    pairs: list[tuple[str, str, float]] = field(default_factory=list)
    path: str = ""


@dataclass(frozen=True)
class AnalogyBenchmark:
    """Analogy questions a : b :: c : target, each with its section (`types[i]`, e.g. capital-common-countries)."""

    name: str
    questions: list[tuple[str, str, str, str]] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    path: str = ""


@dataclass(frozen=True)
class CategorizationBenchmark:
    """(category, word) rows of a concept-categorisation set (AP, BLESS, Battig, ESSLLI-2008)."""

    name: str
    items: list[tuple[str, str]] = field(default_factory=list)
    path: str = ""


def read_similarity(path: str | Path) -> SimilarityBenchmark:
    """A word-similarity file, faruqui .txt (tab-separated, no header) or vecto .csv (with a header)."""
    path = Path(path).expanduser()
    rows = _csv_rows(path, ("word1", "word2", "score")) if path.suffix.lower() == ".csv" else _tab_rows(path)
    pairs = [(first, second, _score(path, number, score)) for number, (first, second, score) in rows]
    if not pairs:
        raise DataFormatError(path, None, "holds no word pairs", "point analysis.benchmarks at a word-similarity "
                              "file (word1 TAB word2 TAB score per line)")
    return SimilarityBenchmark(name=path.stem, pairs=pairs, path=str(path))


def read_analogies(path: str | Path) -> AnalogyBenchmark:
    """A vecto analogy CSV (",type,word1,word2,word3,target")."""
    path = Path(path).expanduser()
    rows = _csv_rows(path, ("type", "word1", "word2", "word3", "target"))
    return AnalogyBenchmark(name=path.stem, questions=[tuple(row[1:]) for _, row in rows],
                            types=[row[0] for _, row in rows], path=str(path))


def read_categorization(path: str | Path) -> CategorizationBenchmark:
    """A vecto categorisation CSV (",category,word"). vecto's AP and BLESS files close each category with a row
    without a word ("11,water_animal,"): such rows are skipped."""
    path = Path(path).expanduser()
    rows = _csv_rows(path, ("category", "word"), empty_last=True)
    return CategorizationBenchmark(name=path.stem, items=[(row[0], row[1]) for _, row in rows if row[1]],
                                   path=str(path))


def _tab_rows(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """(line number, the three columns) of a faruqui file."""
    rows = []
    for number, line in read_lines(path, BENCHMARKS_KEY):
        if not line.strip():
            continue
        columns = line.strip().split("\t") if "\t" in line else line.split()
        columns = [column.strip() for column in columns]
        _check_columns(path, number, columns, 3, "word1 TAB word2 TAB score")
        rows.append((number, tuple(columns)))
    return rows


def _csv_rows(path: Path, names: tuple[str, ...], empty_last: bool = False) -> list[tuple[int, tuple[str, ...]]]:
    """(line number, the columns `names`) of a vecto CSV: its header line is skipped, and a leading index column
    (the header's first field empty or "index"/"id") dropped. `empty_last`: the last column may be empty."""
    rows, width, indexed = [], None, False
    for number, line in read_lines(path, BENCHMARKS_KEY):
        if not line.strip():
            continue
        columns = [column.strip() for column in next(csv.reader([line]))]
        if width is None:  # the header
            indexed = len(columns) == len(names) + 1 and columns[0].lower() in ("", "index", "id")
            width = len(names) + indexed
            if len(columns) != width:
                layout = "a header line " + ",".join(("", *names))
                raise DataFormatError(path, number, f"has {len(columns)} columns, expected {width} ({layout})",
                                      f"start the file with {layout}")
            continue
        _check_columns(path, number, columns, width, ",".join(("<index>",) * indexed + names), empty_last)
        rows.append((number, tuple(columns[indexed:])))
    return rows


def _check_columns(path: Path, number: int, columns: list[str], expected: int, layout: str,
                   empty_last: bool = False) -> None:
    if len(columns) != expected:
        raise DataFormatError(path, number, f"has {len(columns)} columns, expected {expected} ({layout})",
                              f"write each line as {layout}")
    if not all(columns[:-1] if empty_last else columns):
        raise DataFormatError(path, number, "has an empty column", f"write each line as {layout}")


def _score(path: Path, number: int, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DataFormatError(path, number, f"the score {text!r} is not a finite number",
                              "put the human score (a number such as 7.35) in the last column")
    return value
