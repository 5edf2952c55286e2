"""Semantic Textual Similarity sentences (SemEval STS 2012-2016, STS-B) as a sentence corpus, and the word splitter
for raw text that the geometry analyses use.

See docs/data.md, 'STS sentence files'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probing.data.records import SkipCounter
from probing.data.task_records import TaskData, TextExample
from probing.data.text import note_data_files
from probing.errors import ConfigError, DataFormatError, setting

STS_SPLIT = "all"
DEFAULT_PATTERNS = ("semeval_sts/*/*.tsv",)
SEMEVAL_FIELDS = 3
STSB_FIELDS = 7
SKIP_EMPTY = "empty sentence"
# Raw text -> words: runs of letters/digits (inner apostrophes, hyphens and periods kept: "don't", "3.5",
# "well-known"; a final period is punctuation, so "U.S." gives "U.S" and "."), every other non-space character
# alone. A plain, documented rule instead of a tokenizer package; the encoder re-tokenises each word anyway.
WORD_PATTERN = re.compile(r"\w+(?:['’.\-]\w+)*|[^\w\s]")


def split_words(text: str) -> tuple[str, ...]:
    """The words of a raw sentence (WORD_PATTERN)."""
    return tuple(WORD_PATTERN.findall(text))


@dataclass(frozen=True)
class StsPair:
    """One sentence pair; `score` None where the file gives no gold score. source: "file:line"."""

    sentence1: str
    sentence2: str
    score: float | None
    source: str


def read_sts_file(path: Path) -> list[StsPair]:
    """The pairs of one SemEval `.tsv` (3 fields) or STS-B `.csv` (7 fields, more ignored) file."""
    stsb = path.suffix == ".csv"
    expected = STSB_FIELDS if stsb else SEMEVAL_FIELDS
    pairs = []
    note_data_files([path])
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.rstrip("\r\n").split("\t")
            if fields == [""]:
                continue
            if len(fields) < expected or (not stsb and len(fields) > expected):
                raise DataFormatError(path, number, f"{len(fields)} tab-separated fields, expected {expected}",
                                      "give SemEval STS files as score<TAB>sentence1<TAB>sentence2 (.tsv) or STS-B "
                                      "files as genre, file, years, id, score, sentence1, sentence2 (.csv)")
            score, first, second = fields[4:7] if stsb else fields
            pairs.append(StsPair(first.strip(), second.strip(), parse_score(score, path, number), f"{path}:{number}"))
    return pairs


def parse_score(text: str, path: Path, line: int) -> float | None:
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        raise DataFormatError(path, line, f"the score {text!r} is not a number",
                              "the score field must be a number or empty") from None


def sts_files(data_dir: Path, patterns: Sequence[str]) -> list[Path]:
    """The files below `data_dir` matching `patterns` (globs relative to it), sorted, each once."""
    if not data_dir.is_dir():
        raise ConfigError(f"{setting('data_dir')}={data_dir} is not a folder. Fix: point it (or STS_DIR) at the "
                          "folder holding semeval_sts/ and stsbenchmark/")
    files = sorted({path for pattern in patterns for path in data_dir.glob(pattern) if path.is_file()})
    if not files:
        raise ConfigError(f"no file below {data_dir} matches {list(patterns)}. Fix: {setting('patterns')}="
                          "['semeval_sts/*/*.tsv'] (SemEval STS 2012-2016) or ['stsbenchmark/sts-*.csv']")
    return files


class StsSource:
    """STS sentences from `data_dir` (the folder of semeval_sts/ and stsbenchmark/), files chosen by `patterns`."""

    name = "sts"

    def __init__(self, data_dir: str | None = None, patterns: Sequence[str] | str = DEFAULT_PATTERNS):
        if data_dir is None:
            raise ConfigError(f"{setting('data_dir')} is not set: the STS data is not bundled (per-source "
                              f"licences). Fix: {setting('data_dir')}=/path/to/sts (or STS_DIR), or the "
                              "bundled sentences with analysis/sentences=pos")
        self.data_dir = Path(data_dir).expanduser()
        self.patterns = [patterns] if isinstance(patterns, str) else list(patterns)

    def load(self) -> TaskData:
        files = sts_files(self.data_dir, self.patterns)
        skips, records = SkipCounter(), []
        for path in files:
            for pair in read_sts_file(path):
                label = "" if pair.score is None else str(pair.score)
                for text in (pair.sentence1, pair.sentence2):
                    if text:
                        records.append(TextExample(text=text, label=label, source=pair.source))
                    else:
                        skips.skip(SKIP_EMPTY, pair.source)
        return TaskData(self.name, [], {STS_SPLIT: records}, files, skips)
