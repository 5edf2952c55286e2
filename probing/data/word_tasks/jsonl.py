"""A user's own word task in JSON lines, one sentence per line (the format and its errors: docs/word_tasks.md):
    {"tokens": ["The", "cat", "sat"], "labels": ["DET", "NOUN", null]}    one label (or null) per token
    {"tokens": ["The", "cat", "sat"], "targets": [[1, "animal"]]}         word index, label
    {"tokens": ["The", "cat", "sat"], "targets": [[1, 2, "nsubj"]]}       word pair (i, j), label
A line that does not fit is a DataFormatError naming the file and line."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from probing.data.records import SkipCounter
from probing.data.settings import optional_path, require_int
from probing.data.splits import SPLIT_NAMES
from probing.data.text import json_lines
from probing.data.word_tasks.records import NO_SECOND, RawSentence, WordTaskData, build_word_task, require_fraction
from probing.errors import ConfigError, DataFormatError, setting

JSONL_FIX = ('one JSON object per line: {"tokens": [...], "labels": [label or null per token]} or '
             '{"tokens": [...], "targets": [[i, label], ...]} or [[i, j, label], ...]; see docs/word_tasks.md')
JSONL_FILES = {split: f"{split}.jsonl" for split in SPLIT_NAMES}
JSONL_LABELS_FIX = "give the training sentences at least two different labels: a probe learns to tell labels apart"


class JsonlWordTask:
    """A user's own word task in JSON lines (the format and its errors: this module's docstring, docs/word_tasks.md).

    `path` is a folder with train.jsonl, dev.jsonl and optionally test.jsonl, or one .jsonl file whose every line
    has "split". Without test data, dev becomes test and dev is a seeded `dev_fraction` of the training sentences.
    """

    name = "jsonl"

    def __init__(self, path: str | None = None, dev_fraction: float = 0.2, seed: int = 0):
        self.path = optional_path(setting("path"), path)
        if self.path is None:
            key = setting("path")
            raise ConfigError(f"{key} is not set. Fix: {key}=/path/to/folder (train.jsonl, dev.jsonl, "
                              f"test.jsonl) or {key}=/path/to/task.jsonl (a \"split\" on every line)")
        self.dev_fraction = require_fraction(setting("dev_fraction"), dev_fraction)
        self.seed = require_int(setting("seed"), seed)

    def load_word_task(self) -> WordTaskData:
        shape = _PairShape()
        raw: dict[str, list[RawSentence]] = {split: [] for split in SPLIT_NAMES}
        if self.path.is_dir():
            files = []
            for split, name in JSONL_FILES.items():
                path = self.path / name
                if not path.is_file() and split != "test":
                    raise DataFormatError(self.path, None, f"no {name} in the folder", JSONL_FIX)
                if path.is_file():
                    files.append(path)
                    read = list(_read_jsonl(path, shape, split))
                    if split == "test" and not any(sentence.examples for _, sentence in read):
                        raise DataFormatError(path, None, "no labelled word in the test file", "label its words, or "
                                              f"remove {name} (dev then becomes the test split, and dev is carved "
                                              "from train)")
                    for line_split, sentence in read:
                        raw[line_split].append(sentence)
            origin = str(self.path)
        elif self.path.is_file():
            files = [self.path]
            for line_split, sentence in _read_jsonl(self.path, shape, None):
                raw[line_split].append(sentence)
            origin = str(self.path)
        else:
            raise DataFormatError(self.path, None, "no such file or folder", "set task.path to an existing path")
        fix = "give train and dev sentences with at least one label each: " + JSONL_FIX
        train_file = self.path / JSONL_FILES["train"] if self.path.is_dir() else self.path
        return build_word_task(self.name, bool(shape.pair), raw, files, SkipCounter(), self.dev_fraction, self.seed,
                               origin, fix, partial(DataFormatError, train_file, None, fix=JSONL_LABELS_FIX))


@dataclass
class _PairShape:
    """Whether the task's targets are word pairs, and where that was first seen."""

    pair: bool | None = None
    where: str = ""

    def agree(self, pair: bool, path: Path, number: int) -> None:
        if self.pair is None:
            self.pair, self.where = pair, f"{path}:{number}"
        elif pair != self.pair:
            kinds = ("single-word targets [i, label]", "word-pair targets [i, j, label]")
            problem = f"{kinds[pair]} after {kinds[self.pair]} at {self.where}"
            raise DataFormatError(path, number, problem, "give all targets of a task the same shape")


def _read_jsonl(path: Path, shape: _PairShape, file_split: str | None):
    """(split, sentence) of each non-blank line; `file_split` is the split of a folder's file, None for one file
    whose lines name their split."""
    for number, item in json_lines(path, "task.path", JSONL_FIX):
        if not isinstance(item, dict):
            raise DataFormatError(path, number, f"a JSON {type(item).__name__}, not an object", JSONL_FIX)
        yield _line_split(item, path, number, file_split), _jsonl_sentence(item, path, number, shape)


def _line_split(item: dict, path: Path, number: int, file_split: str | None) -> str:
    split = item.get("split", file_split)
    if file_split is None and "split" not in item:
        raise DataFormatError(path, number, 'no "split" (one file holds every split)',
                              'add "split": "train", "dev" or "test" to every line, or give a folder with '
                              "train.jsonl, dev.jsonl (and test.jsonl)")
    if split not in SPLIT_NAMES:
        raise DataFormatError(path, number, f"unknown split {split!r}", 'use "split": "train", "dev" or "test"')
    if file_split is not None and split != file_split:
        raise DataFormatError(path, number, f'"split": {split!r} in {path.name}',
                              f'drop "split" or move the line to {JSONL_FILES[split]}')
    return split


def _jsonl_sentence(item: dict, path: Path, number: int, shape: _PairShape) -> RawSentence:
    def refuse(problem: str) -> DataFormatError:
        return DataFormatError(path, number, problem, JSONL_FIX)

    tokens = item.get("tokens")
    if "tokens" not in item:
        raise refuse('no "tokens"')
    if not isinstance(tokens, list) or not tokens:
        raise refuse(f'"tokens" must be a non-empty list of strings, got {tokens!r}')
    if not all(isinstance(token, str) and token for token in tokens):
        wrong = next(token for token in tokens if not isinstance(token, str) or not token)
        raise refuse(f'"tokens" must be non-empty strings, got {wrong!r}')
    if ("labels" in item) == ("targets" in item):
        raise refuse('give either "labels" (one per token) or "targets", not ' + ("both" if "labels" in item
                                                                                  else "neither"))
    source = f"{path}:{number}"
    if "labels" in item:
        labels = item["labels"]
        if not isinstance(labels, list) or len(labels) != len(tokens):
            size = f"{len(labels)} labels" if isinstance(labels, list) else f"labels {labels!r}"
            raise refuse(f"{size} for {len(tokens)} tokens: give one label (or null) per token")
        for position, label in enumerate(labels):
            if label is not None and (not isinstance(label, str) or not label):
                raise refuse(f"label {label!r} of token {position} is not a non-empty string (or null)")
        shape.agree(False, path, number)
        examples = [(position, NO_SECOND, label) for position, label in enumerate(labels) if label is not None]
        return RawSentence(tuple(tokens), source, examples)
    targets = item["targets"]
    if not isinstance(targets, list):
        raise refuse(f'"targets" must be a list of [i, label] or [i, j, label], got {targets!r}')
    examples = []
    for target in targets:
        if not isinstance(target, list) or len(target) not in (2, 3):
            raise refuse(f"target {target!r} is not [i, label] or [i, j, label]")
        *indices, label = target
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int):
                raise refuse(f"word index {index!r} in target {target!r} is not an integer")
            if not 0 <= index < len(tokens):
                raise refuse(f"word index {index} in target {target!r} is outside the sentence's {len(tokens)} "
                             f"tokens (0 to {len(tokens) - 1})")
        if len(indices) == 2 and indices[0] == indices[1]:
            raise DataFormatError(path, number, f"target {target!r} pairs word {indices[0]} with itself",
                                  "give a pair two different word indices, [i, j, label] with i != j (one word alone "
                                  "is a single-word target [i, label], in a task of single-word targets)")
        if not isinstance(label, str) or not label:
            raise refuse(f"label {label!r} in target {target!r} is not a non-empty string")
        shape.agree(len(indices) == 2, path, number)
        examples.append((indices[0], indices[1] if len(indices) == 2 else NO_SECOND, label))
    return RawSentence(tuple(tokens), source, examples)
