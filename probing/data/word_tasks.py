"""Word-level probing tasks: does a layer know each word's UPOS tag, its dependency label, its entity type, or a label
of the user's own? One compact record type (`WordTaskData` of `WordTaskSplit`s) for every source.

A task labels single words (one example per labelled word) or word pairs (`pair=True`, e.g. a dependent and its
head). A split stores each sentence once and the examples as int64 columns (sentence, word, second, label).

Sources, each built by Hydra from a `_target_` config with plain YAML values, `load_word_task() -> WordTaskData`:
- `ConlluWordTask`: CoNLL-U columns UPOS, XPOS, DEPREL (word pairs: dependent, head) or one FEATS feature.
  DEPREL reads the heads as trees (probing.data.conllu.sentence_heads: a word headed by itself or a cycle of heads
  is refused at its line), and a file whose every HEAD is 0 (no arc, so no word pair) is refused by name.
- `Conll2003WordTask`: CoNLL-2003 entity types per token (PER, LOC, ORG, MISC from B-X/I-X, else O).
- `StreusleWordTask`: STREUSLE supersense units (the data of the s-class task) as one multi-class task.
- `JsonlWordTask`: a user's own task in JSON lines, one sentence per line (docs/word_tasks.md):
    {"tokens": ["The", "cat", "sat"], "labels": ["DET", "NOUN", null]}    one label (or null) per token
    {"tokens": ["The", "cat", "sat"], "targets": [[1, "animal"]]}         word index, label
    {"tokens": ["The", "cat", "sat"], "targets": [[1, 2, "nsubj"]]}       word pair (i, j), label
  Indices are 0-based. All targets of a task are single words or all are pairs ("labels" lines count as single);
  a pair joins two different words.
  `path` is a folder with train.jsonl, dev.jsonl and optionally test.jsonl, or one file whose every line has
  "split": "train", "dev" or "test". Other keys of a line are ignored. A line that is not valid JSON, an object
  without a non-empty "tokens" list of strings, labels not one per token, an index that is not an integer inside
  the sentence, a label that is not a string, a word paired with itself, a pair among single targets (or the
  reverse), an unknown split, and a task without train or dev data are DataFormatErrors naming the file and line.

Choices where the data leaves room (the same for every source):
- Splits. Probing needs a held-out dev split (to pick the epoch) and a test split (to report). A corpus with its own
  train, dev and test keeps them. A corpus without test data (the bundled EWT sample, a JSONL task without test, a
  CoNLL-2003 folder without test.txt) uses its dev data as the probing test split, and a seeded `dev_fraction` of
  the training sentences (whole sentences, at least one, chosen by `random.Random(seed)`) becomes dev. STREUSLE has
  no split of its own: its sentences are split `test_fraction` / `dev_fraction` / rest, seeded, whole sentences.
- Labels are the labels of the train split, sorted, at least two: a training split with one label (a FEATS feature
  with one value, such as Poss=Yes) leaves a probe nothing to tell apart, so it is refused when the task is loaded,
  before any extraction (for FEATS, naming the features of the training files that have two or more values), and so
  is a training split left with one label once dev is carved from it. A dev or test example whose label train never
  saw cannot be predicted by any probe: it is left out of its split and counted in `WordTaskData.unseen_labels`
  (`unseen_label_summary`, logged as a warning by `read_word_task`).
- A split keeps only the sentences that hold at least one example, in file order. Dev (carved) and the STREUSLE
  splits are drawn over every sentence read, labelled or not, so that the tasks of one corpus (upos, deprel, feats
  of a treebank) share their split sentences for a seed.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from probing.data import streusle
from probing.data.conll2003 import load_conll2003_sentences_from_hub, read_conll2003_sentences
from probing.data.conllu import ROOT, ConlluWord, conllu_files, read_conllu_sentences, sentence_heads
from probing.data.records import SkipCounter
from probing.data.settings import choose, optional_path, path_list, require_bool, require_int, require_number
from probing.data.sources import packaged_streusle_paths
from probing.data.splits import SPLIT_NAMES
from probing.data.task_records import TaggedSentence, TaskData
from probing.data.task_sources import (
    CONLLU_SPLITS,
    NerSource,
    PosSource,
    bundled_pos_paths,
    check_splits,
    files_by_split,
    labels_in_order,
    ner_files,
    split_map,
)
from probing.data.text import hashable_files, note_data_files, read_lines
from probing.errors import ConfigError, DataFormatError, ProbingError

log = logging.getLogger(__name__)

CONLLU_COLUMNS = ("upos", "xpos", "deprel", "feats")
NO_SECOND = -1
TAGGING_COLUMNS = ("upos", "xpos")  # the columns train.py fine-tunes a tagger on
SKIP_UNTAGGED_SENTENCE = "sentence with an untagged word (\"_\"), left out of fine-tuning"
SKIP_ROOT = "root arc (HEAD 0): no head word, not a word-pair example"
NO_ARCS = "every word's HEAD is 0, so every arc is a root and there are no word pairs: the file has no dependency trees"
NO_ARCS_FIX = ("give a treebank with heads (HEAD, column 7: the ID of each word's head), or probe a single-word task "
               "such as task=upos")
ONE_LABEL_FIX = "give training data with at least two different labels"
NER_ONE_LABEL_FIX = "give training sentences with entity mentions (B-X, I-X tags), not only O"
CARVED = "after carving dev from the training sentences (data.source.dev_fraction, data.source.seed), "
FEATS_FIX = "FEATS (column 6) must be '_' or Name=Value pairs joined by '|', e.g. Number=Sing|Person=3"
JSONL_FIX = ('one JSON object per line: {"tokens": [...], "labels": [label or null per token]} or '
             '{"tokens": [...], "targets": [[i, label], ...]} or [[i, j, label], ...]; see docs/word_tasks.md')
JSONL_FILES = {split: f"{split}.jsonl" for split in SPLIT_NAMES}
JSONL_LABELS_FIX = "give the training sentences at least two different labels: a probe learns to tell labels apart"


def skip_no_tag(column: str) -> str:
    """The skip reason of a word whose `column` is "_"."""
    return f"word without {column.upper()} ('_'), not an example"


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
                          "reads its own data (data.source.paths=... for other files)")
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
        if not _labelled(splits[split]):
            raise DataFormatError(origin, None, f"no {split} data: no labelled word in the {split} split", fix)
    if not _labelled(splits["test"]):
        if len(splits["train"]) < 2:
            problem = "no test data, and too few training sentences to carve a dev split from (need 2)"
            raise DataFormatError(origin, None, problem, fix)
        splits["test"] = splits["dev"]
        splits["train"], splits["dev"] = carve(splits["train"], dev_fraction, seed)
        for split in ("train", "dev"):
            if not _labelled(splits[split]):
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


def _labelled(sentences: list[RawSentence]) -> bool:
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


def _fraction(key: str, value: object) -> float:
    """A fraction in (0, 1): zero would leave a split empty."""
    fraction = require_number(key, value, 0.0, 1.0, "0.2")
    if fraction == 0.0:
        raise ConfigError(f"{key}=0 leaves its split empty. Fix: e.g. {key}=0.2")
    return fraction


class ConlluWordTask:
    """Word-level tasks from the columns of CoNLL-U files (Universal Dependencies).

    column="upos" / "xpos": one example per word, label = that column's tag; a word with "_" is skipped (counted).
    column="deprel": a word-PAIR task: one example per arc, word = the dependent, second = its head (HEAD is 1-based,
    0 = root), label = DEPREL as written (subtypes such as nmod:poss kept). Root arcs have no head word: they are
    left out and counted under SKIP_ROOT. Each sentence's heads must form a tree (`sentence_heads`: HEAD 0 or a word
    ID of the sentence, no word headed by itself, no cycle), and a file must hold at least one arc (a file whose
    every HEAD is 0 has no word pairs): otherwise a DataFormatError names the file (and the line).
    column="feats": `feature` must be set (e.g. Number): one example per word whose FEATS has that feature, label =
    its value as written (Sing, Plur; "Int,Rel" for a multi-valued one); other words are no examples. A feature with
    one value in the training files (Poss, Abbr, Typo... in English-EWT) is a ConfigError naming the features of the
    training files that have two or more.
    Multiword-token lines and empty nodes are skipped and counted (probing.data.conllu).

    `paths`: CoNLL-U files or folders of them; None reads the bundled UD English-EWT sample (a train and a dev file,
    no test). `splits` maps each split to file-name patterns (default CONLLU_SPLITS: UD's <corpus>-<split>.conllu).
    Without test data, the corpus's dev becomes the probing test split and dev is a seeded `dev_fraction` of the
    training sentences (whole sentences, the same for the same `seed`): probing needs a held-out dev to pick epochs
    and a test to report, and the sample has no test file.
    """

    def __init__(
        self,
        column: str = "upos",
        feature: str | None = None,
        paths: str | Sequence[str] | None = None,
        splits: Mapping[str, str | Sequence[str]] | None = None,
        dev_fraction: float = 0.2,
        seed: int = 0,
    ):
        self.column = choose("data.source.column", column, CONLLU_COLUMNS)
        if self.column == "feats":
            if not isinstance(feature, str) or not feature or any(char in feature for char in "=|\t "):
                raise ConfigError(f"task.feature={feature!r} is not a feature name, and column=feats needs one. "
                                  "Fix: task.feature=Number (a name of the FEATS column)")
        elif feature is not None:
            raise ConfigError(f"task.feature={feature!r} only applies to data.source.column=feats, not {column!r}. "
                              "Fix: data.source.column=feats, or task.feature=null")
        self.feature = feature
        self.name = f"feats-{feature}" if self.column == "feats" else self.column
        self.pair = self.column == "deprel"
        self.paths = path_list("data.source.paths", paths) if paths is not None else bundled_pos_paths()
        self.splits = split_map("data.source.splits", CONLLU_SPLITS if splits is None else splits)
        self.dev_fraction = _fraction("data.source.dev_fraction", dev_fraction)
        self.seed = require_int("data.source.seed", seed)

    def load_word_task(self) -> WordTaskData:
        skips = SkipCounter()
        chosen = files_by_split(conllu_files(self.paths, "data.source.paths"), self.splits, "data.source.splits", skips)
        feature_values: defaultdict[str, set[str]] = defaultdict(set)  # of the training files (column feats)
        raw = {split: [sentence for path in paths
                       for sentence in self._read(path, skips, feature_values if split == "train" else None)]
               for split, paths in chosen.items()}
        files = hashable_files([path for paths in chosen.values() for path in paths])
        origin = ", ".join(str(path) for path in self.paths)
        fix = ("give data.source.paths with CoNLL-U files whose names match the train and dev patterns of "
               f"data.source.splits, with {self.column.upper()} filled in")
        return build_word_task(self.name, self.pair, raw, files, skips, self.dev_fraction, self.seed, origin, fix,
                               self._one_label_error(origin, feature_values))

    def _one_label_error(self, origin: str, feature_values: Mapping[str, set[str]]) -> Callable[[str], ProbingError]:
        """The error of a training split with one label: for FEATS a ConfigError naming task.feature and the features
        of the training files with two or more values (what the user can pick instead), else a DataFormatError."""
        if self.column != "feats":
            fix = f"give data.source.paths whose training files hold at least two different {self.column.upper()} " \
                  "labels"
            return partial(DataFormatError, origin, None, fix=fix)
        several = sorted(name for name, values in feature_values.items() if len(values) >= 2)
        example = "Number" if "Number" in several or not several else several[0]
        others = (f"; the features with two or more values in the training files: {', '.join(several)}" if several
                  else "; no feature of the training files has two values: give a treebank with richer FEATS")
        return lambda problem: ConfigError(f"task.feature={self.feature}: {problem}. Fix: a feature with at least two "
                                           f"values, e.g. task.feature={example}{others}")

    def load(self) -> TaskData:
        """The fine-tuning view (train.py task=upos or xpos): every sentence tagged with the column's tags, in the
        corpus's own train/dev(/test) files; a sentence with an untagged word is left out (counted)."""
        if self.column not in TAGGING_COLUMNS:
            raise ConfigError(f"task={self.name} is a probing task (probe.py); train.py tags words with UPOS or XPOS. "
                              "Fix: task=upos or task=xpos")
        skips = SkipCounter()
        chosen = files_by_split(conllu_files(self.paths, "data.source.paths"), self.splits, "data.source.splits", skips)
        splits = {split: self._tagged([sentence for path in paths for sentence in self._read(path, skips)], skips)
                  for split, paths in chosen.items() if paths}
        check_splits(splits, ", ".join(str(path) for path in self.paths),
                     "give data.source.paths with CoNLL-U files matching the train and dev patterns of "
                     "data.source.splits")
        files = hashable_files([path for paths in chosen.values() for path in paths])
        return TaskData(self.name, labels_in_order(splits), splits, files, skips)

    @staticmethod
    def _tagged(sentences: list[RawSentence], skips: SkipCounter) -> list[TaggedSentence]:
        tagged = []
        for sentence in sentences:
            if len(sentence.examples) != len(sentence.tokens):
                skips.skip(SKIP_UNTAGGED_SENTENCE, sentence.source)
                continue
            tagged.append(TaggedSentence(sentence.tokens, tuple(label for _, _, label in sentence.examples),
                                         sentence.source))
        return tagged

    def _read(self, path: Path, skips: SkipCounter, feature_values: defaultdict[str, set[str]] | None = None):
        """The file's sentences with this column's examples; `feature_values`, when given, collects the values of
        every FEATS feature (column feats). For DEPREL, a file without any arc is refused."""
        n_arcs = 0
        for words in read_conllu_sentences(path, skips, "data.source.paths"):
            if self.pair:
                heads = sentence_heads(words, path)
                n_arcs += sum(head != ROOT for head in heads)
                examples = self._arcs(words, heads, path, skips)
            else:
                examples = self._examples(words, path, skips, feature_values)
            yield RawSentence(tuple(word.form for word in words), f"{path}:{words[0].line}", examples)
        if self.pair and not n_arcs:
            raise DataFormatError(path, None, NO_ARCS, NO_ARCS_FIX)

    @staticmethod
    def _arcs(words: list[ConlluWord], heads: list[int], path: Path, skips: SkipCounter) -> list[tuple[int, int, str]]:
        """(dependent, head, DEPREL) of each arc, 0-based positions; root arcs and arcs without DEPREL counted."""
        examples = []
        for position, (word, head) in enumerate(zip(words, heads)):
            if head == ROOT:
                skips.skip(SKIP_ROOT, f"{path}:{word.line}")
            elif word.deprel in ("", "_"):
                skips.skip(skip_no_tag("deprel"), f"{path}:{word.line}")
            else:
                examples.append((position, head - 1, word.deprel))
        return examples

    def _examples(self, words: list[ConlluWord], path: Path, skips: SkipCounter,
                  feature_values: defaultdict[str, set[str]] | None) -> list[tuple[int, int, str]]:
        """(word, NO_SECOND, label) of each word with this column's tag (or FEATS feature)."""
        examples = []
        if self.column == "feats":
            for position, word in enumerate(words):
                features = _features(word, path)
                if feature_values is not None:
                    for name, value in features.items():
                        feature_values[name].add(value)
                if self.feature in features:
                    examples.append((position, NO_SECOND, features[self.feature]))
        else:
            for position, word in enumerate(words):
                tag = word.upos if self.column == "upos" else word.xpos
                if tag in ("", "_"):
                    skips.skip(skip_no_tag(self.column), f"{path}:{word.line}")
                else:
                    examples.append((position, NO_SECOND, tag))
        return examples


def _features(word: ConlluWord, path: Path) -> dict[str, str]:
    if word.feats in ("", "_"):
        return {}
    features = {}
    for entry in word.feats.split("|"):
        name, equals, value = entry.partition("=")
        if not (name and equals and value):
            raise DataFormatError(path, word.line, f"FEATS entry {entry!r} is not Name=Value", FEATS_FIX)
        features[name] = value
    return features


class Conll2003WordTask:
    """CoNLL-2003 NER as a word task: every token, label = its entity type (PER, LOC, ORG, MISC from B-X or I-X)
    or "O". The official train/valid/test split, from `data_dir`'s files (`files` maps each split to its file
    names, each of them required; unset: train.txt, valid.txt and test.txt where the folder has it, as
    probing.data.task_sources.ner_files reads them for train.py too) or, when `data_dir` is None, the Hugging Face
    dataset `hub_name`. Without test data (a folder without test.txt), dev (valid.txt) becomes test and dev is a
    seeded `dev_fraction` of the training sentences."""

    name = "ner"
    pair = False

    def __init__(
        self,
        data_dir: str | None = None,
        files: Mapping[str, str | Sequence[str]] | None = None,
        hub_name: str = "conll2003",
        dev_fraction: float = 0.2,
        seed: int = 0,
    ):
        self.data_dir = optional_path("data.data_dir", data_dir)
        self.files = None if files is None else split_map("data.source.files", files)  # None: the official names
        if not isinstance(hub_name, str) or not hub_name:
            raise ConfigError(f"data.source.hub_name={hub_name!r} is not a dataset name. "
                              "Fix: data.source.hub_name=conll2003")
        self.hub_name = hub_name
        self.dev_fraction = _fraction("data.source.dev_fraction", dev_fraction)
        self.seed = require_int("data.source.seed", seed)

    def load_word_task(self) -> WordTaskData:
        skips = SkipCounter()
        if self.data_dir is None:
            tagged, files, origin = load_conll2003_sentences_from_hub(self.hub_name, skips), [], self.hub_name
        else:
            paths = ner_files(self.data_dir, self.files)
            tagged = {split: read_conll2003_sentences(found, skips, "data.data_dir") for split, found in paths.items()}
            files, origin = [path for found in paths.values() for path in found], str(self.data_dir)
        raw = {split: [_entity_types(sentence) for sentence in sentences] for split, sentences in tagged.items()}
        fix = "give data.source.files for train and dev (test optional), or a hub dataset with train and validation"
        return build_word_task(self.name, False, raw, files, skips, self.dev_fraction, self.seed, origin, fix,
                               partial(DataFormatError, origin, None, fix=NER_ONE_LABEL_FIX))

    def load(self) -> TaskData:
        """The fine-tuning view (train.py task=ner): IOB2-tagged sentences of the same files (NerSource)."""
        return NerSource(None if self.data_dir is None else str(self.data_dir), self.files, self.hub_name).load()


class PosWordTask(PosSource):
    """Part-of-speech tagging (`PosSource`: the PTB tags of the EWT sample or of WSJ) that probe.py also probes as a
    word task (task=pos): every word, its tag the label (`tagging_word_task`)."""

    def load_word_task(self) -> WordTaskData:
        return tagging_word_task(self.load())


def tagging_word_task(data: TaskData, dev_fraction: float = 0.2, seed: int = 0) -> WordTaskData:
    """A tagging task of train.py (TaskData of TaggedSentence: task=pos, the PTB tags of the EWT sample or of WSJ) as
    a word task: every word, its tag the label. Without test data, dev becomes test and dev is carved from train."""
    raw = {split: [RawSentence(sentence.tokens, sentence.source,
                               [(position, NO_SECOND, tag) for position, tag in enumerate(sentence.tags)])
                   for sentence in sentences] for split, sentences in data.splits.items()}
    origin = ", ".join(str(path) for path in data.files) or data.name
    fix = "give data.source.paths with train and dev files"
    return build_word_task(data.name, False, raw, list(data.files), data.skips, dev_fraction, seed, origin, fix)


def _entity_types(sentence: TaggedSentence) -> RawSentence:
    examples = [(position, NO_SECOND, "O" if tag == "O" else tag[2:]) for position, tag in enumerate(sentence.tags)]
    return RawSentence(sentence.tokens, sentence.source, examples)


class StreusleWordTask:
    """STREUSLE supersenses (the units of the default s-class task: noun supersenses, and verb ones with
    `include_verbs`) as one multi-class word task: one example per supersense unit, label = its supersense.

    word = the LAST word of a multiword unit ("salad bar" -> "bar"; for a discontinuous unit, its last word): the
    English head of a nominal compound is usually last. `paths`: STREUSLE .conllulex files; None uses the packaged
    ones. STREUSLE has no split here: its sentences are split at random (seeded) into `test_fraction` test,
    `dev_fraction` dev and the rest train, whole sentences.
    """

    name = "supersense"
    pair = False

    def __init__(
        self,
        paths: str | Sequence[str] | None = None,
        include_verbs: bool = False,
        dev_fraction: float = 0.2,
        test_fraction: float = 0.2,
        seed: int = 0,
    ):
        self.paths = path_list("data.source.paths", paths) if paths is not None else packaged_streusle_paths()
        self.include_verbs = require_bool("data.source.include_verbs", include_verbs)
        self.dev_fraction = _fraction("data.source.dev_fraction", dev_fraction)
        self.test_fraction = _fraction("data.source.test_fraction", test_fraction)
        if self.dev_fraction + self.test_fraction >= 1.0:
            total = self.dev_fraction + self.test_fraction
            raise ConfigError(f"data.source.dev_fraction + data.source.test_fraction = {total:g} leaves no training "
                              "data. Fix: data.source.dev_fraction=0.2 data.source.test_fraction=0.2")
        self.seed = require_int("data.source.seed", seed)

    def load_word_task(self) -> WordTaskData:
        skips = SkipCounter()
        targets = set(streusle.streusle_classes(self.include_verbs))
        sentences = [sentence for path in self.paths for sentence in self._read(path, targets, skips)]
        origin = ", ".join(str(path) for path in self.paths)
        fix = "give more STREUSLE sentences with n.* (or v.*) supersenses in SS, or other data.source.dev_fraction / " \
              "data.source.test_fraction / data.source.seed"
        order = list(range(len(sentences)))
        random.Random(self.seed).shuffle(order)
        n_test = max(1, round(self.test_fraction * len(order)))
        n_dev = max(1, round(self.dev_fraction * len(order)))
        chosen = {index: "test" for index in order[:n_test]} | {index: "dev" for index in order[n_test:n_test + n_dev]}
        raw: dict[str, list[RawSentence]] = {split: [] for split in SPLIT_NAMES}
        for index, sentence in enumerate(sentences):
            raw[chosen.get(index, "train")].append(sentence)
        empty = [split for split in SPLIT_NAMES if not _labelled(raw[split])]
        if empty:
            raise DataFormatError(origin, None, f"no supersense unit in the {empty[0]} sentences of the split", fix)
        return build_word_task(self.name, False, raw, list(self.paths), skips, self.dev_fraction, self.seed, origin,
                               fix)

    def _read(self, path: Path, targets: set[str], skips: SkipCounter):
        n_sentences = 0
        # The reader of probing.data.streusle, so that the units are exactly those of the s-class task.
        for tokens in streusle._read_sentences(path, "data.source.paths", skips):
            n_sentences += 1
            units = _Units()
            streusle._add_sentence_records(units, tokens, targets, path, skips)
            forms = tuple(token.form for token in tokens)
            yield RawSentence(forms, f"{path}:{tokens[0].line}", units.examples)
        if not n_sentences:
            problem = "no token lines: the file is empty or holds only comments and blank lines"
            raise DataFormatError(path, None, problem, streusle.EMPTY_FILE_FIX)


class _Units:
    """Takes the units the STREUSLE reader adds (its RecordTableBuilder.add) as examples: last word, supersense."""

    def __init__(self) -> None:
        self.examples: list[tuple[int, int, str]] = []

    def add(self, tokens: Sequence[str], target: Sequence[int], word: str, sclass: str, source: str = "") -> None:
        self.examples.append((max(target), NO_SECOND, sclass))


class JsonlWordTask:
    """A user's own word task in JSON lines (the format and its errors: this module's docstring, docs/word_tasks.md).

    `path` is a folder with train.jsonl, dev.jsonl and optionally test.jsonl, or one .jsonl file whose every line
    has "split". Without test data, dev becomes test and dev is a seeded `dev_fraction` of the training sentences.
    """

    name = "jsonl"

    def __init__(self, path: str | None = None, dev_fraction: float = 0.2, seed: int = 0):
        self.path = optional_path("task.path", path)
        if self.path is None:
            raise ConfigError("task.path is not set. Fix: task.path=/path/to/folder (train.jsonl, dev.jsonl, "
                              "test.jsonl) or task.path=/path/to/task.jsonl (a \"split\" on every line)")
        self.dev_fraction = _fraction("data.source.dev_fraction", dev_fraction)
        self.seed = require_int("data.source.seed", seed)

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
    for number, line in read_lines(path, "task.path"):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, number, f"invalid JSON ({error.msg} at column {error.colno})",
                                  JSONL_FIX) from None
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
