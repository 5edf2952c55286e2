"""The records of a word-level probing task, one compact type for every source: `WordTaskData` of `WordTaskSplit`s
(each sentence stored once, the examples as int64 columns: sentence, word, second word of a pair, label), the
`WordTaskSource` protocol that every source follows, and `build_word_task`, which turns a source's sentences into the
records by the same rules for every source (splits completed, labels from train, unseen labels left out and counted;
see docs/word_tasks.md, Splits and labels)."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from probing.data.records import SkipCounter
from probing.data.settings import require_number
from probing.data.splits import SPLIT_NAMES
from probing.data.text import note_data_files
from probing.errors import ConfigError, DataFormatError, ProbingError, setting, settings_under

log = logging.getLogger(__name__)


NO_SECOND = -1
ONE_LABEL_FIX = "give training data with at least two different labels"
CARVED = "after carving dev from the training sentences (data.source.dev_fraction, data.source.seed), "


@dataclass(frozen=True, eq=False)
class WordTaskSplit:
    """The examples of one split. Example i labels word `word[i]` (and `second[i]` for pair tasks) of sentence
    `sentences[sentence[i]]` with label `label[i]` (an index into WordTaskData.labels).

    sentences: every sentence of the split that holds at least one example, in file order.
    sources:   "file:line" of each sentence's first word line (JSONL: its line; hub: "name:split:row").
    """

    sentences: tuple[tuple[str, ...], ...]
    sources: tuple[str, ...]
    sentence: np.ndarray
    word: np.ndarray
    second: np.ndarray | None
    label: np.ndarray

    def __len__(self) -> int:
        return len(self.label)

    def word_types(self) -> list[str]:
        """The form of each example's (first) word, exactly as written (the keys of a control task)."""
        sentences = self.sentences
        return [sentences[s][w] for s, w in zip(self.sentence.tolist(), self.word.tolist())]

    def offsets(self) -> np.ndarray:
        """(sentences,) int64: the row of each sentence's first word in the "every word" ordering."""
        lengths = np.fromiter((len(tokens) for tokens in self.sentences), dtype=np.int64, count=len(self.sentences))
        return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths

    def every_word_rows(self) -> np.ndarray:
        """(N,) int64: the row of each example's word in the "every word" ordering (all words of sentence 0, then
        of sentence 1, ...; see `every_word`)."""
        return self.offsets()[self.sentence] + self.word

    def every_second_rows(self) -> np.ndarray | None:
        """The same rows for `second` (pair tasks), None for single-word tasks."""
        return None if self.second is None else self.offsets()[self.sentence] + self.second

    def every_word(self) -> list[tuple[tuple[str, ...], int]]:
        """(sentence, position) of every word of every sentence, in the "every word" ordering."""
        return [(tokens, position) for tokens in self.sentences for position in range(len(tokens))]


@dataclass
class WordTaskData:
    """A word-level probing task ready for feature extraction.

    name:          the task ("upos", "xpos", "deprel", "feats-Number", "ner", "supersense", "jsonl").
    labels:        the label inventory: every label of the train split, sorted.
    pair:          True for word-pair tasks (deprel; JSONL [i, j, label] targets).
    splits:        "train", "dev", "test", always all three.
    files:         every data file read (for hashing); empty when loaded from the hub.
    skips:         what the readers skipped, with counts.
    unseen_labels: "dev" and "test" -> {label: count} of the examples left out because train never saw the label.
    """

    name: str
    labels: list[str]
    pair: bool
    splits: dict[str, WordTaskSplit]
    files: list[Path]
    skips: SkipCounter
    unseen_labels: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        note_data_files(self.files)  # recorded, hashed, in the job's results.json


def unseen_label_summary(data: WordTaskData) -> str:
    """One line: per split, how many examples were left out for a label unseen in train, and which labels."""
    parts = []
    for split, counts in data.unseen_labels.items():
        if counts:
            labels = ", ".join(f"{label} ({n})" for label, n in sorted(counts.items(), key=lambda item: -item[1]))
            parts.append(f"{split}: {sum(counts.values())} examples left out, label not in train: {labels}")
    return "; ".join(parts) if parts else "no unseen labels"


@runtime_checkable
class WordTaskSource(Protocol):
    """What every source of a word task gives (the `data.source` of conf/task/upos.yaml, deprel, feats, ner, pos,
    supersense, jsonl): the task's words and labels, split into train, dev and test."""

    def load_word_task(self) -> WordTaskData: ...


def read_word_task(source: object, data_name: str = "data") -> WordTaskData:
    """The word task of `source` (a `WordTaskSource`; any other source is refused, naming `data=<data_name>`), with
    the split sizes logged and what was skipped or left out logged as warnings."""
    if not isinstance(source, WordTaskSource):
        raise ConfigError(f"data={data_name} is not the data of a word task. Fix: leave data= out, as each word task "
                          f"reads its own data ({setting('source.paths')}=... for other files)")
    with settings_under("source"):  # what the source refuses while reading names its settings as the source's
        data = source.load_word_task()
    for split, examples in data.splits.items():
        log.info("%s %s: %d examples in %d sentences", data.name, split, len(examples), len(examples.sentences))
    if data.skips.total():
        log.warning("%s: skipped while reading: %s", data.name, data.skips.summary())
    if any(data.unseen_labels.values()):
        log.warning("%s: %s", data.name, unseen_label_summary(data))
    return data


@dataclass
class RawSentence:
    """A sentence while reading: its examples as (word, second or NO_SECOND, label string)."""

    tokens: tuple[str, ...]
    source: str
    examples: list[tuple[int, int, str]]


def carve(sentences: list, fraction: float, seed: int) -> tuple[list, list]:
    """(rest, carved): a seeded `fraction` of the sentences (at least one, whole sentences), both in their order."""
    chosen = set(random.Random(seed).sample(range(len(sentences)), max(1, round(fraction * len(sentences)))))
    rest = [item for index, item in enumerate(sentences) if index not in chosen]
    return rest, [item for index, item in enumerate(sentences) if index in chosen]


def build_word_task(
    name: str, pair: bool, raw: Mapping[str, list[RawSentence]], files: list[Path], skips: SkipCounter,
    dev_fraction: float, seed: int, origin: str, fix: str,
    one_label: Callable[[str], ProbingError] | None = None,
) -> WordTaskData:
    """The task from the sentences read per split: the splits completed (no test data: dev becomes test and dev is
    carved from train), labels from train, dev/test examples with unseen labels left out and counted.

    Dev is carved from every training sentence read, labelled or not, so that tasks over one corpus (upos and
    deprel of a treebank) get the same sentences in each split for the same seed. A training split with one label,
    as read or once dev is carved from it, is refused with the error `one_label(problem)` gives (default: a
    DataFormatError at `origin`), before any other check of the data: it is what the user must change first."""
    refuse = one_label or partial(DataFormatError, origin, None, fix=ONE_LABEL_FIX)
    splits = {split: list(raw.get(split, [])) for split in SPLIT_NAMES}
    _require_two_labels(splits["train"], refuse, "")
    for split in ("train", "dev"):
        if not any_labelled(splits[split]):
            raise DataFormatError(origin, None, f"no {split} data: no labelled word in the {split} split", fix)
    if not any_labelled(splits["test"]):
        if len(splits["train"]) < 2:
            problem = "no test data, and too few training sentences to carve a dev split from (need 2)"
            raise DataFormatError(origin, None, problem, fix)
        splits["test"] = splits["dev"]
        splits["train"], splits["dev"] = carve(splits["train"], dev_fraction, seed)
        for split in ("train", "dev"):
            if not any_labelled(splits[split]):
                problem = f"no labelled word in the {split} sentences after carving dev from train"
                raise DataFormatError(origin, None, problem, f"set another dev_fraction or seed; {fix}")
        _require_two_labels(splits["train"], refuse, CARVED)
    labels = sorted({label for sentence in splits["train"] for *_, label in sentence.examples})
    ids = {label: index for index, label in enumerate(labels)}
    unseen: dict[str, dict[str, int]] = {}
    built = {}
    for split, sentences in splits.items():
        missing: Counter = Counter()
        built[split] = _build_split(sentences, ids, pair, missing)
        if split != "train":
            unseen[split] = dict(sorted(missing.items()))
            if not len(built[split]):
                problem = f"no {split} example has a label seen in train (left out: {dict(missing)})"
                raise DataFormatError(origin, None, problem, fix)
    return WordTaskData(name, labels, pair, built, files, skips, unseen)


def any_labelled(sentences: list[RawSentence]) -> bool:
    return any(sentence.examples for sentence in sentences)


def _require_two_labels(train: list[RawSentence], refuse: Callable[[str], ProbingError], context: str) -> None:
    """Refuse training sentences whose examples all have one label (no example at all is left to the caller)."""
    counts = Counter(label for sentence in train for *_, label in sentence.examples)
    if len(counts) == 1:
        ((label, n),) = counts.items()
        raise refuse(f"{context}the training split has only the label {label!r} ({n} example{'s' * (n != 1)}), so "
                     "there is nothing to tell apart")


def _build_split(sentences: list[RawSentence], ids: Mapping[str, int], pair: bool, missing: Counter) -> WordTaskSplit:
    kept_sentences, sources, columns = [], [], ([], [], [], [])
    for sentence in sentences:
        examples = [example for example in sentence.examples if example[2] in ids]
        missing.update(example[2] for example in sentence.examples if example[2] not in ids)
        if not examples:
            continue
        for word, second, label in examples:
            for column, value in zip(columns, (len(kept_sentences), word, second, ids[label])):
                column.append(value)
        kept_sentences.append(sentence.tokens)
        sources.append(sentence.source)
    index, word, second, label = (np.asarray(column, dtype=np.int64) for column in columns)
    return WordTaskSplit(tuple(kept_sentences), tuple(sources), index, word, second if pair else None, label)


def require_fraction(key: str, value: object) -> float:
    """A fraction in (0, 1): zero would leave a split empty."""
    fraction = require_number(key, value, 0.0, 1.0, "0.2")
    if fraction == 0.0:
        raise ConfigError(f"{key}=0 leaves its split empty. Fix: e.g. {key}=0.2")
    return fraction
