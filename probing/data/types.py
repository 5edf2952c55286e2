"""Type-level (uncontextualized) probing data: each word has a set of s-classes, one binary decision per class.

Zhao et al. (2020) §3.2.1 and Fig. 1 follow Yaghoobzadeh et al. (2019): for each s-class S a binary classifier
sees one vector per word (no context) and predicts whether S is one of the word's s-classes; the measure is
micro F1 over all (word, class) decisions. `WordTypes.targets[i, k]` is the gold label of word i for class k.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from probing.data.records import SkipCounter, WordInContext, as_table
from probing.data.splits import SPLIT_NAMES, SplitConfig
from probing.data.wikipse import read_disjoint_lists, read_sclasses
from probing.errors import ConfigError, ProbingError, setting

WIKIPSE_LIST_FILES = ("semantic_classes.txt", "train.tsv", "test.tsv")
# The distributed train.tsv lists the empty name once ("@@<TAB>-location=109 ..."); Zhao et al.'s Table 2
# (35,399 train + 8,850 dev = 44,249 words) shows it was dropped, and the corpus reader reads "@@-..." as plain text.


@dataclass
class WordTypes:
    """The words of one split and their gold s-class sets: targets (N, C) bool, targets[i, k] = class k is one
    of word i's s-classes."""

    words: list[str]
    targets: np.ndarray

    def __post_init__(self) -> None:
        if self.targets.ndim != 2 or self.targets.shape[0] != len(self.words) or self.targets.dtype != np.bool_:
            raise ValueError(f"targets must be bool (N={len(self.words)}, C), got {self.targets.dtype} "
                             f"{self.targets.shape}")


@dataclass
class TypeLevelData:
    """A type-level probing data set: class inventory, word-disjoint "train"/"dev"/"test" splits, files read,
    and the lines the readers skipped (with counts)."""

    name: str
    classes: list[str]
    splits: dict[str, WordTypes]
    files: list[Path]
    skips: SkipCounter = field(default_factory=SkipCounter)


def types_from_records(
    name: str, classes: Sequence[str], splits: Mapping[str, Sequence[WordInContext]], files: Sequence[str | Path]
) -> TypeLevelData:
    """Per split, each word with the union of the s-classes of its records (words in first-seen order).

    The splits must already be word-disjoint (make_splits guarantees it); a word in two splits is refused."""
    split_of: dict[str, str] = {}
    word_types = {}
    for split, records in splits.items():
        table = as_table(records)
        classes_of: dict[str, set[str]] = {}
        for word_id, sclass_id in _distinct_pairs(table.word_ids, table.sclass_ids, len(table.sclasses)):
            classes_of.setdefault(table.words[word_id], set()).add(table.sclasses[sclass_id])
        for word in classes_of:
            _check_disjoint(word, split, split_of)
        word_types[split] = _word_types(classes_of, classes, where=f"{name} split {split!r}")
    return TypeLevelData(name, list(classes), word_types, [Path(f) for f in files])


def _distinct_pairs(word_ids: np.ndarray, sclass_ids: np.ndarray, n_sclasses: int) -> list[tuple[int, int]]:
    """The distinct (word id, s-class id) pairs in order of first occurrence."""
    keys = word_ids.astype(np.int64) * max(n_sclasses, 1) + sclass_ids
    distinct, first = np.unique(keys, return_index=True)
    pairs = np.divmod(distinct[np.argsort(first)], max(n_sclasses, 1))
    return list(zip(pairs[0].tolist(), pairs[1].tolist()))


def _check_disjoint(word: str, split: str, split_of: dict[str, str]) -> None:
    previous = split_of.setdefault(word, split)
    if previous != split:
        raise ProbingError(f"word {word!r} is in both the {previous!r} and {split!r} splits. Fix: split the records "
                           "word-disjointly (probing.data.splits.make_splits) before building type-level data")


def _word_types(classes_of: Mapping[str, Iterable[str]], classes: Sequence[str], where: str) -> WordTypes:
    """WordTypes of word -> its s-classes, in the mapping's order; an s-class outside `classes` is refused."""
    index = {sclass: k for k, sclass in enumerate(classes)}
    targets = np.zeros((len(classes_of), len(classes)), dtype=bool)
    for row, (word, sclasses) in enumerate(classes_of.items()):
        for sclass in sclasses:
            if sclass not in index:
                raise ProbingError(f"{where}: s-class {sclass!r} of word {word!r} is not in the class inventory "
                                   f"{list(classes)}. Fix: use the inventory the records were read with")
            targets[row, index[sclass]] = True
    return WordTypes(list(classes_of), targets)


def wikipse_types(lists_dir: str | Path, dev_fraction: float = 0.2, seed: int = 0) -> TypeLevelData:
    """Wiki-PSE type-level data from its word lists alone (semantic_classes.txt, train.tsv, test.tsv; no corpus).

    test = the test.tsv words; dev = round(dev_fraction * n) of the n train.tsv words, drawn with
    random.Random(seed) from the sorted words as make_splits draws dev words (Zhao et al. 2020 §3.1: 20% of
    the training set); train = the rest. Each split keeps file order. The class frequencies of the lists are
    ignored: a class is either listed for a word or not. The line of the empty name is skipped and counted in
    `skips`, which reproduces Table 2 on the distributed lists: 35,399 train, 8,850 dev, 44,250 test words.
    """
    if not lists_dir:
        raise ConfigError(f"{setting('lists_dir')} is not set. Fix: pass {setting('lists_dir')}=/path/to/the folder "
                          "with semantic_classes.txt, train.tsv and test.tsv")
    split = SplitConfig(seed=seed, dev_fraction=dev_fraction)
    files = [Path(lists_dir) / name for name in WIKIPSE_LIST_FILES]
    classes = read_sclasses(files[0], config_key="data.lists_dir")
    skips = SkipCounter()
    train_words, test_words = read_disjoint_lists(files[1], files[2], classes, skips)
    dev_words = set(random.Random(split.seed).sample(sorted(train_words), round(split.dev_fraction * len(train_words))))
    splits = {
        "train": {word: sclasses for word, sclasses in train_words.items() if word not in dev_words},
        "dev": {word: sclasses for word, sclasses in train_words.items() if word in dev_words},
        "test": test_words,
    }
    word_types = {name: _word_types(splits[name], classes, where=f"wikipse {name}") for name in SPLIT_NAMES}
    return TypeLevelData("wikipse", classes, word_types, files, skips)


def type_summary(data: TypeLevelData) -> dict[str, dict[str, int]]:
    """Per split: number of words and of gold (word, class) pairs (cf. Zhao et al. 2020 Table 2, column words)."""
    return {
        name: {"words": len(split.words), "decisions_gold": int(split.targets.sum())}
        for name, split in data.splits.items()
    }
