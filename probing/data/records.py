"""The word-in-context record every reader produces and every later stage consumes, and the compact table of them.

Readers append records to a `RecordTableBuilder` and hand on a `RecordTable`: a `Sequence[WordInContext]` held as
numpy columns (sentences stored once as interned token ids, strings interned), so that reading a corpus of millions
of contexts costs tens of bytes per record instead of a Python object graph per record. A record is built as a
`WordInContext` only when it is looked at.
"""

from __future__ import annotations

import operator
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class WordInContext:
    """One annotated occurrence of a word (or multiword name) in a sentence.

    tokens:  the sentence, whitespace tokens as in the source file.
    target:  sorted positions in `tokens` of the annotated word (several for a multiword name).
    word:    the word type used for word-s-class combinations and word-disjoint splits
             (lower-cased; multiword names joined by "_", as in Wiki-PSE).
    sclass:  the semantic class of this occurrence.
    source:  "file:line" of the occurrence, for error messages and provenance.
    """

    tokens: tuple[str, ...]
    target: tuple[int, ...]
    word: str
    sclass: str
    source: str = ""

    def __post_init__(self) -> None:
        check_record(self.tokens, self.target, self.source)

    @property
    def combination(self) -> tuple[str, str]:
        """The word-s-class combination (Zhao et al. 2020 §3.1), e.g. ("apple", "organization")."""
        return (self.word, self.sclass)


def check_record(tokens: Sequence[str], target: Sequence[int], source: str) -> None:
    """Refuse an empty sentence, and target positions that are not a non-empty sorted set inside the sentence."""
    if not tokens:
        raise ValueError(f"{source}: empty sentence")
    if not target or list(target) != sorted(set(target)):
        raise ValueError(f"{source}: target positions must be a non-empty sorted set, got {tuple(target)}")
    if target[0] < 0 or target[-1] >= len(tokens):
        raise ValueError(f"{source}: target {tuple(target)} outside sentence of {len(tokens)} tokens")


@dataclass(frozen=True)
class Strings:
    """Interned strings: `names[i]` is string i; the columns of a RecordTable hold the ids."""

    names: list[str]

    def __getitem__(self, index: int) -> str:
        return self.names[index]

    def __len__(self) -> int:
        return len(self.names)


class Interner:
    """Gives each distinct string an id, in order of first appearance."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        return self.ids.setdefault(name, len(self.ids))

    def strings(self) -> Strings:
        return Strings(list(self.ids))


@dataclass(frozen=True)
class Sentences:
    """Every distinct sentence once: tokens of sentence s are `vocabulary[ids[offsets[s]:offsets[s + 1]]]`."""

    vocabulary: Strings
    ids: np.ndarray  # int32
    offsets: np.ndarray  # int64, one more than sentences

    def tokens(self, sentence: int) -> tuple[str, ...]:
        names, ids = self.vocabulary.names, self.ids[self.offsets[sentence]:self.offsets[sentence + 1]].tolist()
        # from a list, made at its length: a tuple built from an iterator is resized, and the tuples it replaces are
        # kept by CPython for reuse at their own length, never reused (0.9 MB after fingerprinting 10k statements)
        return tuple([names[i] for i in ids])


class RecordTable(Sequence[WordInContext]):
    """Records as columns, one entry per record: `sentence` (into `sentences`), the target positions
    (`positions[target_start[i]:target_start[i] + target_length[i]]`), `word_ids` and `sclass_ids` (into `words` and
    `sclasses`), and the source as `source_ids` (into `source_names`) plus `source_lines` ("name:line"; -1: the name
    alone). Tables made by `take` share the sentences, positions and strings of the table they come from."""

    COLUMNS = ("sentence", "target_start", "target_length", "word_ids", "sclass_ids", "source_ids", "source_lines")

    def __init__(self, sentences: Sentences, positions: np.ndarray, words: Strings, sclasses: Strings,
                 source_names: Strings, columns: dict[str, np.ndarray]):
        self.sentences, self.positions = sentences, positions
        self.words, self.sclasses, self.source_names = words, sclasses, source_names
        lengths = {len(columns[name]) for name in self.COLUMNS}
        if len(lengths) != 1:
            raise ValueError(f"record columns of different lengths {sorted(lengths)}")
        self.columns = columns
        self._cached: tuple[int, tuple[str, ...]] = (-1, ())

    @property
    def word_ids(self) -> np.ndarray:
        """The word of each record, as an index into `words`."""
        return self.columns["word_ids"]

    @property
    def sclass_ids(self) -> np.ndarray:
        """The s-class of each record, as an index into `sclasses`."""
        return self.columns["sclass_ids"]

    def __len__(self) -> int:
        return len(self.columns["sentence"])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.take(np.arange(len(self))[index])
        index = operator.index(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"record {index} of a table of {len(self)}")
        return self._record(index % len(self))

    def __iter__(self) -> Iterator[WordInContext]:
        for index in range(len(self)):
            yield self._record(index)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(mine == theirs for mine, theirs in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordTable({len(self)} records, {len(self.sentences.offsets) - 1} sentences)"

    def tokens(self, index: int) -> tuple[str, ...]:
        """The sentence of record `index` (consecutive records of one sentence share one tuple)."""
        sentence, cached = int(self.columns["sentence"][index]), self._cached
        if cached[0] != sentence:
            cached = self._cached = (sentence, self.sentences.tokens(sentence))
        return cached[1]

    def target(self, index: int) -> tuple[int, ...]:
        start = int(self.columns["target_start"][index])
        return tuple(self.positions[start:start + int(self.columns["target_length"][index])].tolist())

    def word(self, index: int) -> str:
        return self.words[int(self.columns["word_ids"][index])]

    def sclass(self, index: int) -> str:
        return self.sclasses[int(self.columns["sclass_ids"][index])]

    def source(self, index: int) -> str:
        name, line = self.source_names[int(self.columns["source_ids"][index])], int(self.columns["source_lines"][index])
        return name if line < 0 else f"{name}:{line}"

    def _record(self, index: int) -> WordInContext:
        return WordInContext(self.tokens(index), self.target(index), self.word(index), self.sclass(index),
                             self.source(index))

    def fields(self, block: int = 4096) -> Iterator[tuple[tuple[str, ...], list[int], str, str]]:
        """(tokens, target, word, sclass) of each record in order, read from the columns without building records
        (records of one sentence in a row share one tokens tuple), `block` rows at a time (five lists of that many
        Python ints are held: about 0.5 MB at 4,096 rows, where 65,536 held 8 MB)."""
        words, sclasses, positions = self.words.names, self.sclasses.names, self.positions
        last, tokens = -1, ()
        for first in range(0, len(self), block):
            part = {name: self.columns[name][first:first + block].tolist() for name in
                    ("sentence", "target_start", "target_length", "word_ids", "sclass_ids")}
            for sentence, start, length, word, sclass in zip(*part.values()):
                if sentence != last:
                    last, tokens = sentence, self.sentences.tokens(sentence)
                yield tokens, positions[start:start + length].tolist(), words[word], sclasses[sclass]

    def take(self, indices) -> RecordTable:
        """The records at `indices` (in that order), sharing this table's sentences, positions and strings."""
        indices = np.asarray(indices, dtype=np.int64)
        columns = {name: column[indices] for name, column in self.columns.items()}
        return RecordTable(self.sentences, self.positions, self.words, self.sclasses, self.source_names, columns)

    @classmethod
    def from_records(cls, records: Iterable[WordInContext]) -> RecordTable:
        """A table of any records (a table is returned as it is)."""
        if isinstance(records, RecordTable):
            return records
        builder = RecordTableBuilder()
        for record in records:
            builder.add(record.tokens, record.target, record.word, record.sclass, record.source)
        return builder.build()


def as_table(records: Iterable[WordInContext]) -> RecordTable:
    return RecordTable.from_records(records)


class RecordTableBuilder:
    """Collects records for a RecordTable in compact buffers; a record with the sentence of the record before it
    shares that sentence. `add` validates like WordInContext does."""

    def __init__(self) -> None:
        self.vocabulary, self.words, self.sclasses, self.source_names = Interner(), Interner(), Interner(), Interner()
        self.token_ids, self.offsets, self.positions = array("i"), array("q", [0]), array("i")
        self.columns = {name: array("q" if name in ("target_start", "source_lines") else "i")
                        for name in RecordTable.COLUMNS}
        self._last_tokens: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.columns["sentence"])

    def add(self, tokens: Sequence[str], target: Sequence[int], word: str, sclass: str, source: str = "") -> None:
        check_record(tokens, target, source)
        tokens = tuple(tokens)
        if tokens != self._last_tokens:
            ids = self.vocabulary.ids
            self.token_ids.extend([ids.setdefault(token, len(ids)) for token in tokens])
            self.offsets.append(len(self.token_ids))
            self._last_tokens = tokens
        name, line = split_source(source)
        columns = self.columns
        columns["sentence"].append(len(self.offsets) - 2)
        columns["target_start"].append(len(self.positions))
        columns["target_length"].append(len(target))
        self.positions.extend(target)
        columns["word_ids"].append(self.words(word))
        columns["sclass_ids"].append(self.sclasses(sclass))
        columns["source_ids"].append(self.source_names(name))
        columns["source_lines"].append(line)

    def build(self) -> RecordTable:
        sentences = Sentences(self.vocabulary.strings(), as_array(self.token_ids), as_array(self.offsets))
        columns = {name: as_array(values) for name, values in self.columns.items()}
        return RecordTable(sentences, as_array(self.positions), self.words.strings(), self.sclasses.strings(),
                           self.source_names.strings(), columns)


def as_array(values: array) -> np.ndarray:
    """The buffer as a numpy array without a copy."""
    return np.frombuffer(values, dtype=np.dtype(values.typecode)) if len(values) else np.zeros(0, values.typecode)


def split_source(source: str) -> tuple[str, int]:
    """("file", 12) for "file:12", so that the many sources of one file share one string; (source, -1) otherwise."""
    name, colon, line = source.rpartition(":")
    if colon and line.isascii() and line.isdigit() and (line == "0" or line[0] != "0"):
        return name, int(line)
    return source, -1


@dataclass
class SkipCounter:
    """Counts documented skips (reason -> count), and values read in a normalised form, so none is silent."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def skip(self, reason: str, where: str = "") -> None:
        self.counts[reason] += 1
        self.examples.setdefault(reason, where)

    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        counts = sorted(self.counts.items())
        return {reason: {"count": n, "first": self.examples.get(reason, "")} for reason, n in counts}

    def summary(self) -> str:
        if not self.counts:
            return "no skips"
        counts = sorted(self.counts.items())
        return ", ".join(f"{n} {reason} (first at {self.examples[reason]})" for reason, n in counts)
