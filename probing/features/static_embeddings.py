"""Word vectors that do not depend on context: seeded random vectors and static embedding files.

See docs/probing.md, 'Type-level probing' (and the baselines under 'What is probed').
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from probing.data.text import UTF8_FIX, sha256_file
from probing.errors import ConfigError, DataFormatError

log = logging.getLogger(__name__)

ROW_FIX = 'write one word per line as "word v1 ... vD" with the same D on every line; a word may not contain spaces'
HEADER_FIX = 'a word2vec header is one line "V D" of two positive integers (number of words, dimension)'
INITIAL_ROWS = 1 << 16
UTF8_BOM = b"\xef\xbb\xbf"


def word_seed(seed: int, word: str) -> int:
    """A 64-bit seed for `word`: the first 8 bytes of sha256("{seed}\\0{word}"), identical in every process.

    Python's hash() is salted per process, so it cannot make per-word vectors reproducible across runs."""
    digest = hashlib.sha256(f"{seed}\0{word}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def seeded_normal_vectors(words: Sequence[str], dim: int, seed: int) -> np.ndarray:
    """(N, dim) float32; row i is N(0, I_dim) drawn from a generator seeded with word_seed(seed, words[i]).

    Used for Zhao et al.'s Rand space, for P-Rand and for the OOV words of static files: because each row depends
    only on (seed, word, dim), a word gets the same vector in every split, batch order and run."""
    if dim < 1:
        raise ValueError(f"the vector dimension must be >= 1, got {dim}")
    vectors = np.empty((len(words), dim), dtype=np.float32)
    for row, word in enumerate(words):
        vectors[row] = np.random.default_rng(word_seed(seed, word)).standard_normal(dim)
    return vectors


@dataclass
class StaticEmbeddings:
    """A static embedding space read from a file: `vectors[i]` is the vector of `words[i]`.

    sha256 is the file's hash, for store metadata and provenance."""

    name: str
    path: Path
    words: list[str]
    vectors: np.ndarray
    sha256: str
    row_of: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or self.vectors.shape[0] != len(self.words):
            raise ValueError(f"vectors of shape {self.vectors.shape} do not match {len(self.words)} words")
        self.row_of = {word: row for row, word in enumerate(self.words)}
        if len(self.row_of) != len(self.words):
            raise ValueError("words must be distinct")

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def lookup(self, words: Sequence[str], oov_seed: int) -> tuple[np.ndarray, list[str]]:
        """(N, D) float32 vectors of `words` and the distinct OOV words in first-seen order.

        A word is looked up as given, then lower-cased (GloVe 6B is uncased). Nothing else is tried: a multiword
        name such as "new_york" is looked up as "new_york" only, never split into "new" and "york", so it is OOV
        in files without such entries. OOV words get seeded_normal_vectors(oov, D, oov_seed) keyed on the word as
        given (Zhao et al. 2020 §4.2.1: OOV vectors are drawn from N(0, I)), so a repeated OOV word gets one vector.
        """
        vectors = np.empty((len(words), self.dim), dtype=np.float32)
        oov_positions: dict[str, list[int]] = {}
        known_positions, known_rows = [], []
        for position, word in enumerate(words):
            row = self._row(word)
            if row is None:
                oov_positions.setdefault(word, []).append(position)
            else:
                known_positions.append(position)
                known_rows.append(row)
        vectors[known_positions] = self.vectors[known_rows]
        oov_words = list(oov_positions)
        for word, random_vector in zip(oov_words, seeded_normal_vectors(oov_words, self.dim, oov_seed)):
            vectors[oov_positions[word]] = random_vector
        return vectors, oov_words

    def _row(self, word: str) -> int | None:
        row = self.row_of.get(word)
        return self.row_of.get(word.lower()) if row is None else row


def read_static_embeddings(
    path: str | Path, name: str | None = None, config_key: str = "embeddings.path"
) -> StaticEmbeddings:
    """Read a word2vec-text or GloVe-text file (gzip when the name ends in ".gz"), streaming it line by line.

    `name` defaults to the file name without ".gz" and its last suffix ("glove.6B.300d.txt.gz" ->
    "glove.6B.300d"). `config_key` is the setting named when the file does not exist. Every format problem
    raises DataFormatError with the line and the fix. A 400k x 300 file takes tens of seconds (the float parsing
    dominates); with a header, the (V, D) array is allocated once.
    """
    path = Path(path)
    if not path.is_file():
        problem = "is a directory, not a file" if path.is_dir() else "file not found"
        raise ConfigError(
            f"{config_key}: {path} {problem}. Fix: set `{config_key}` to a word2vec or GloVe text file (.gz allowed)")
    start = time.perf_counter()
    with _numbered_lines(path) as lines:
        words, vectors = _parse_lines(lines, path)
    embeddings = StaticEmbeddings(name or _default_name(path), path, words, vectors, sha256_file(path))
    log.info("read %s from %s: %d words x %d dims in %.1fs", embeddings.name, path, len(words), embeddings.dim,
                time.perf_counter() - start)
    return embeddings


def _default_name(path: Path) -> str:
    return Path(path.name.removesuffix(".gz")).stem


@contextmanager
def _numbered_lines(path: Path) -> Iterator[Iterator[tuple[int, bytes]]]:
    """(1-based number, raw bytes) per line, gunzipped for ".gz"; a corrupt gzip stream becomes a DataFormatError.

    Lines stay bytes: only the word is decoded (strict UTF-8), numpy parses the values directly."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        try:
            yield _enumerate_lines(handle)
        except (OSError, EOFError) as error:
            if opener is open:
                raise
            problem = f"cannot be decompressed as gzip ({error})"
            raise DataFormatError(path, None, problem, 'compress it with gzip, or drop the ".gz" suffix') from None


def _enumerate_lines(handle: BinaryIO) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(handle, start=1):
        yield number, raw.removeprefix(UTF8_BOM) if number == 1 else raw


def _parse_lines(lines: Iterator[tuple[int, bytes]], path: Path) -> tuple[list[str], np.ndarray]:
    """Words and (V, D) float32 vectors of a numbered line stream (header detected on the first line)."""
    first = next(lines, None)
    if first is None:
        fix = 'use a word2vec ("V D" header, then "word v1 ... vD" lines) or GloVe (no header) text file'
        raise DataFormatError(path, None, "the file is empty", fix)
    header = _parse_header(first[1].split(), path)
    if header is None:
        rows = _RowReader(path, expected_words=None, dim=_first_row_dim(first, path))
        rows.add(*first)
    else:
        rows = _RowReader(path, expected_words=header[0], dim=header[1])
    for number, raw in lines:
        rows.add(number, raw)
    return rows.finish()


def _parse_header(fields: list[bytes], path: Path) -> tuple[int, int] | None:
    """(V, D) when the first line is a header (two numeric fields), None for a GloVe row."""
    if len(fields) != 2 or not all(_is_number(value) for value in fields):
        return None
    if not all(value.isdigit() and int(value) > 0 for value in fields):
        text = b" ".join(fields).decode("ascii")
        raise DataFormatError(path, 1, f"bad header {text!r}: V and D must be positive integers", HEADER_FIX)
    return int(fields[0]), int(fields[1])


def _first_row_dim(first: tuple[int, bytes], path: Path) -> int:
    number, raw = first
    fields = raw.split()
    if len(fields) < 2:
        problem = "is empty" if not fields else "has a word but no values"
        raise DataFormatError(path, number, f"line {number} {problem}", ROW_FIX)
    return len(fields) - 1


def _is_number(value: bytes) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


class _RowReader:
    """Accumulates "word v1 ... vD" rows into a growing float32 array, checking each row as it comes."""

    def __init__(self, path: Path, expected_words: int | None, dim: int):
        """`expected_words` is the header's V (None without a header); `dim` is the header's D or the first row's."""
        self.path, self.expected_words, self.dim = path, expected_words, dim
        self.vectors = np.empty((expected_words or INITIAL_ROWS, dim), dtype=np.float32)
        self.words: list[str] = []
        self.line_of: dict[str, int] = {}

    def add(self, number: int, raw: bytes) -> None:
        fields = raw.split()
        if not fields:
            raise DataFormatError(self.path, number, f"line {number} is empty", "remove empty lines")
        word = self._word(fields[0], number)
        self._check_count(len(fields) - 1, number)
        row = len(self.words)
        self._reserve(row + 1, number)
        try:
            self.vectors[row] = fields[1:]
        except ValueError:
            self._raise_non_numeric(word, fields[1:], number)
        self.words.append(word)
        self.line_of[word] = number

    def finish(self) -> tuple[list[str], np.ndarray]:
        count = len(self.words)
        if self.expected_words is not None and count != self.expected_words:
            problem = f"the header (line 1) says {self.expected_words} words but the file has {count} word lines"
            raise DataFormatError(self.path, None, problem, f"set the header's first number to {count}")
        self.vectors.resize((count, self.dim), refcheck=False)
        self._check_finite()
        return self.words, self.vectors

    def _word(self, raw_word: bytes, number: int) -> str:
        try:
            word = raw_word.decode("utf-8")
        except UnicodeDecodeError as error:
            problem = f"byte 0x{raw_word[error.start]:02x} of the word is not valid UTF-8"
            raise DataFormatError(self.path, number, problem, UTF8_FIX) from None
        if word in self.line_of:
            problem = f"{word!r} at line {number} was already defined at line {self.line_of[word]}"
            raise DataFormatError(self.path, number, problem, "keep one line per word")
        return word

    def _check_count(self, n_values: int, number: int) -> None:
        if n_values == self.dim:
            return
        if self.expected_words is None:
            problem = f"line {number} has {n_values} values, the first row (line 1) had {self.dim}"
            fix = ROW_FIX
            if self.dim == 1:
                fix += f"; line 1 was read as a word with 1 value, not as a header ({HEADER_FIX})"
        else:
            problem = f"line {number} has {n_values} values, the header (line 1) says {self.dim}"
            fix = ROW_FIX + "; or correct D in the header"
        raise DataFormatError(self.path, number, problem, fix)

    def _reserve(self, n_rows: int, number: int) -> None:
        capacity = self.vectors.shape[0]
        if n_rows <= capacity:
            return
        if self.expected_words is not None:
            problem = f"the header (line 1) says {self.expected_words} words but line {number} is word {n_rows}"
            raise DataFormatError(self.path, number, problem, "correct V in the header or remove the extra lines")
        self.vectors.resize((2 * capacity, self.dim), refcheck=False)

    def _raise_non_numeric(self, word: str, values: list[bytes], number: int) -> None:
        index = next(i for i, value in enumerate(values) if not _is_number(value))
        text = values[index].decode("utf-8", errors="replace")
        problem = f"value {index + 1} of {word!r} is not a number: {text!r}"
        raise DataFormatError(self.path, number, problem, ROW_FIX)

    def _check_finite(self) -> None:
        finite = np.isfinite(self.vectors).all(axis=1)
        if not finite.all():
            word = self.words[int(np.argmin(finite))]
            problem = f"the vector of {word!r} has a nan or infinite value"
            raise DataFormatError(self.path, self.line_of[word], problem, "replace it with finite numbers")
