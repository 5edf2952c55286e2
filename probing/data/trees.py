"""Dependency trees for the structural probes (Hewitt & Manning 2019, "A Structural Probe for Finding Syntax in Word
Representations"): each sentence's words, heads and XPOS tags, and what the probes learn from them, the tree
distance between every two words (distance probe) and each word's depth (depth probe).

See docs/structural.md, 'Data'.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from probing.data.conllu import read_conllu_sentences, sentence_heads, treebank_files
from probing.data.records import SkipCounter
from probing.data.settings import path_list, require_int
from probing.data.splits import SPLIT_NAMES
from probing.data.task_sources import bundled_pos_paths, files_by_split, split_map
from probing.data.text import hashable_files, note_data_files
from probing.data.word_tasks.records import carve, require_fraction
from probing.errors import ConfigError, DataFormatError, setting

log = logging.getLogger(__name__)

# The punctuation tags of the reference's metrics (john-hewitt/structural-probes, reporter.py).
PUNCTUATION_XPOS = frozenset({"''", ",", ".", ":", "``", "-LRB-", "-RRB-"})
# Which files go to which split, as file-name patterns (fnmatch): UD's <corpus>-<split>.conllu and the reference's
# ptb3-wsj-<split>.conllx alike.
TREE_SPLITS = {split: f"*-{split}.conll*" for split in SPLIT_NAMES}
NO_TREES_FIX = ("give data.source.paths with CoNLL-U or CoNLL-X files whose names match the train pattern and the dev "
                "or test pattern of data.source.splits (default: <corpus>-train/-dev/-test.conllu, .conllx or .conll)")
# Control behaviours (`control_heads`): attach to nothing, to the sentence's first word, to its last word.
ATTACH_NOTHING, ATTACH_FIRST, ATTACH_LAST = 0, 1, 2


@dataclass(frozen=True, eq=False)
class TreeSplit:
    """The sentences of one split with their dependency trees, in file order.

    sentences: the words (FORM) of each sentence.
    sources:   "file:line" of each sentence's first word line.
    heads:     per sentence, (n,) int64: the 0-based index of each word's head, -1 for the root.
    xpos:      per sentence, the XPOS (CoNLL-X: POSTAG) of each word, "_" where missing.
    """

    sentences: tuple[tuple[str, ...], ...]
    sources: tuple[str, ...]
    heads: tuple[np.ndarray, ...]
    xpos: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if not len(self.sources) == len(self.heads) == len(self.xpos) == len(self.sentences):
            raise ValueError("a TreeSplit needs one source, heads and XPOS tags per sentence")

    def __len__(self) -> int:
        return len(self.sentences)

    def distances(self, index: int) -> np.ndarray:
        """(n, n) int64: the tree distance between every two words of sentence `index`."""
        return tree_distances(self.heads[index])

    def depths(self, index: int) -> np.ndarray:
        """(n,) int64: the depth of each word of sentence `index` (its root word 0)."""
        return tree_depths(self.heads[index])

    def punctuation(self, index: int) -> np.ndarray:
        """(n,) bool: which words of sentence `index` are punctuation (XPOS in PUNCTUATION_XPOS)."""
        return np.array([tag in PUNCTUATION_XPOS for tag in self.xpos[index]], dtype=bool)


@dataclass
class TreeData:
    """A tree task ready for feature extraction.

    name:   the data ("trees").
    splits: "train", "dev", "test", always all three.
    files:  every data file read (for hashing).
    skips:  what the readers skipped, with counts (multiword-token lines, empty nodes, files in no split).
    """

    name: str
    splits: dict[str, TreeSplit]
    files: list[Path]
    skips: SkipCounter

    def __post_init__(self) -> None:
        note_data_files(self.files)  # recorded, hashed, in the job's results.json


def tree_distances(heads: np.ndarray) -> np.ndarray:
    """(n, n) int64: the number of edges on the path between every two words of the tree (or forest) of `heads`
    (0-based head index per word, -1 for a root); roots are joined through a virtual root node."""
    return _path_lengths(heads)[:-1, :-1]


def tree_depths(heads: np.ndarray) -> np.ndarray:
    """(n,) int64: the number of edges from each word up to its root (a root word: 0)."""
    return _path_lengths(heads, from_virtual_root=True) - 1


def _path_lengths(heads: np.ndarray, from_virtual_root: bool = False) -> np.ndarray:
    """Path lengths in the undirected graph of the words plus a virtual root node (the last node) above every root
    word: all pairs, (n + 1, n + 1), or with `from_virtual_root` from that node to each word, (n,). Heads that are
    not a forest (out of range, a word headed by itself, a cycle) are a ValueError: the caller's bug, as files are
    checked when read."""
    heads = np.asarray(heads)
    n_words = heads.size
    integers = np.issubdtype(heads.dtype, np.integer) or not n_words
    if heads.ndim != 1 or not integers or (n_words and (heads.min() < -1 or heads.max() >= n_words)):
        raise ValueError(f"heads must be 1-D integers in -1..n-1 (-1: a root), got {heads!r}")
    virtual_root = n_words
    parents = np.where(heads < 0, virtual_root, heads)
    graph = csr_matrix((np.ones(n_words), (np.arange(n_words), parents)), shape=(n_words + 1, n_words + 1))
    lengths = shortest_path(graph, directed=False, unweighted=True,
                            indices=virtual_root if from_virtual_root else None)
    if from_virtual_root:
        lengths = lengths[:-1]
    if np.isinf(lengths).any():  # n words, n edges: a word off the virtual root's component lies on a cycle
        raise ValueError(f"heads {heads.tolist()} do not form a forest: a word is headed by itself or on a cycle")
    return lengths.astype(np.int64)


def control_heads(behaviours: np.ndarray) -> np.ndarray:
    """The heads of a sentence's control tree (Hewitt & Liang 2019's control task, adapted to trees) from the
    behaviour of each word's type (drawn elsewhere): ATTACH_NOTHING (a root), ATTACH_FIRST (headed by word 0),
    ATTACH_LAST (headed by the last word). Word 0 is always a root, whatever its behaviour, and the last word with
    ATTACH_LAST is a root too: every head is then a root or headed by a root, so the graph has no cycle. Several
    roots are usual; `tree_distances` and `tree_depths` join them through a virtual root."""
    behaviours = np.asarray(behaviours)
    known = (ATTACH_NOTHING, ATTACH_FIRST, ATTACH_LAST)
    if behaviours.ndim != 1 or not np.isin(behaviours, known).all():
        raise ValueError(f"control behaviours must be 1-D, each one of {known}, got {behaviours!r}")
    if not len(behaviours):
        return np.zeros(0, dtype=np.int64)
    last = len(behaviours) - 1
    heads = np.select([behaviours == ATTACH_FIRST, behaviours == ATTACH_LAST], [0, last], -1).astype(np.int64)
    heads[0] = -1
    if behaviours[last] == ATTACH_LAST:
        heads[last] = -1
    return heads


class _Sentence(NamedTuple):
    """A sentence while reading: its words, source, heads (0-based, -1 root) and XPOS tags."""

    words: tuple[str, ...]
    source: str
    heads: np.ndarray
    xpos: tuple[str, ...]


@runtime_checkable
class TreeTaskSource(Protocol):
    """What a tree task's `data.source` gives: its sentences' dependency trees, split into train, dev and test."""

    def load_trees(self) -> TreeData: ...


def read_trees(source: object, data_name: str = "data") -> TreeData:
    """The trees of `source` (a `TreeTaskSource`; any other source is refused, naming `data=<data_name>`), with the
    split sizes logged and what was skipped logged as a warning."""
    if not isinstance(source, TreeTaskSource):
        raise ConfigError(f"data={data_name} is not the data of a tree task. Fix: leave data= out, as each tree task "
                          "reads its own treebank (data.data_dir=... for other files)")
    data = source.load_trees()
    for split, trees in data.splits.items():
        log.info("%s %s: %d sentences, %d words", data.name, split, len(trees),
                 sum(len(words) for words in trees.sentences))
    if data.skips.total():
        log.warning("%s: skipped while reading: %s", data.name, data.skips.summary())
    return data


class TreeSource:
    """Dependency trees from CoNLL-U or CoNLL-X files (`paths`: files or folders of *.conllu, *.conllx, *.conll;
    None reads the bundled UD English-EWT sample, a train and a dev file). `splits` maps train/dev/test to fnmatch
    patterns of file names (default TREE_SPLITS). Without test files the dev files are the test split, and without
    dev files then a seeded `dev_fraction` of the training sentences is dev (`seed`: the same sentences each time)."""

    name = "trees"

    def __init__(
        self,
        paths: str | Sequence[str] | None = None,
        splits: Mapping[str, str | Sequence[str]] | None = None,
        dev_fraction: float = 0.2,
        seed: int = 0,
    ):
        self.paths = path_list(setting("paths"), paths) if paths is not None else bundled_pos_paths()
        self.splits = split_map("data.source.splits", TREE_SPLITS if splits is None else splits)
        self.dev_fraction = require_fraction(setting("dev_fraction"), dev_fraction)
        self.seed = require_int(setting("seed"), seed)

    def load_trees(self) -> TreeData:
        skips = SkipCounter()
        chosen = files_by_split(treebank_files(self.paths, "data.source.paths"), self.splits, "data.source.splits",
                                skips)
        read = {split: [sentence for path in paths for sentence in read_trees_of_file(path, skips)]
                for split, paths in chosen.items()}
        origin = ", ".join(str(path) for path in self.paths)
        splits = complete_splits(read, self.dev_fraction, self.seed, origin)
        files = hashable_files([path for paths in chosen.values() for path in paths])
        return TreeData(self.name, {split: _tree_split(sentences) for split, sentences in splits.items()}, files,
                        skips)


def read_trees_of_file(path: Path, skips: SkipCounter) -> Iterator[_Sentence]:
    """Each sentence of a CoNLL-U or CoNLL-X file with its heads (0-based, -1 for the root), checked to be a tree
    with one root; multiword-token lines and empty nodes are counted in `skips`, no words."""
    for words in read_conllu_sentences(path, skips, "data.source.paths"):
        heads = np.asarray(sentence_heads(words, path, single_root=True), dtype=np.int64) - 1
        yield _Sentence(tuple(word.form for word in words), f"{path}:{words[0].line}", heads,
                        tuple(word.xpos or "_" for word in words))


def complete_splits(read: Mapping[str, list], dev_fraction: float, seed: int, origin: str) -> dict[str, list]:
    """Train, dev and test from the sentences read per split: without test, dev becomes test; without dev then, a
    seeded `dev_fraction` of train is carved off as dev. No train, no dev or test, or too few training sentences to
    carve from are DataFormatErrors at `origin`."""
    train, dev, test = (list(read.get(split, [])) for split in SPLIT_NAMES)
    if not train:
        raise DataFormatError(origin, None, "no training sentences: no file matches the train pattern", NO_TREES_FIX)
    if not test:
        if not dev:
            raise DataFormatError(origin, None, "no dev or test sentences: only training files match", NO_TREES_FIX)
        test, dev = dev, []
    if not dev:
        train, dev = carve(train, dev_fraction, seed)
        if not train:
            problem = (f"no dev files, and carving dev (data.source.dev_fraction={dev_fraction:g}) from the "
                       f"{len(dev)} training sentence{'s' * (len(dev) != 1)} leaves none to train on")
            raise DataFormatError(origin, None, problem, "give more training sentences, a smaller "
                                  "data.source.dev_fraction, or dev files")
    return {"train": train, "dev": dev, "test": test}


def _tree_split(sentences: Sequence[_Sentence]) -> TreeSplit:
    return TreeSplit(tuple(sentence.words for sentence in sentences), tuple(sentence.source for sentence in sentences),
                     tuple(sentence.heads for sentence in sentences), tuple(sentence.xpos for sentence in sentences))
