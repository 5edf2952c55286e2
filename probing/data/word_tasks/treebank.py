"""Word tasks from the columns of CoNLL-U files (Universal Dependencies): UPOS, XPOS, DEPREL (word pairs: dependent,
head) or one FEATS feature, and the tagging view of UPOS/XPOS that train.py fine-tunes on."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from probing.data.conllu import ROOT, ConlluWord, conllu_files, read_conllu_sentences, sentence_heads
from probing.data.records import SkipCounter
from probing.data.settings import choose, path_list, require_int
from probing.data.task_records import TaggedSentence, TaskData
from probing.data.task_sources import (
    CONLLU_SPLITS,
    bundled_pos_paths,
    check_splits,
    files_by_split,
    labels_in_order,
    split_map,
)
from probing.data.text import hashable_files
from probing.data.word_tasks.records import NO_SECOND, RawSentence, WordTaskData, build_word_task, require_fraction
from probing.errors import ConfigError, DataFormatError, ProbingError, setting

CONLLU_COLUMNS = ("upos", "xpos", "deprel", "feats")
TAGGING_COLUMNS = ("upos", "xpos")  # the columns train.py fine-tunes a tagger on
SKIP_UNTAGGED_SENTENCE = "sentence with an untagged word (\"_\"), left out of fine-tuning"
SKIP_ROOT = "root arc (HEAD 0): no head word, not a word-pair example"
NO_ARCS = "every word's HEAD is 0, so every arc is a root and there are no word pairs: the file has no dependency trees"
NO_ARCS_FIX = ("give a treebank with heads (HEAD, column 7: the ID of each word's head), or probe a single-word task "
               "such as task=upos")
FEATS_FIX = "FEATS (column 6) must be '_' or Name=Value pairs joined by '|', e.g. Number=Sing|Person=3"


def skip_no_tag(column: str) -> str:
    """The skip reason of a word whose `column` is "_"."""
    return f"word without {column.upper()} ('_'), not an example"


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
        self.column = choose(setting("column"), column, CONLLU_COLUMNS)
        if self.column == "feats":
            if not isinstance(feature, str) or not feature or any(char in feature for char in "=|\t "):
                raise ConfigError(f"{setting('feature')}={feature!r} is not a feature name, and column=feats needs "
                                  f"one. Fix: {setting('feature')}=Number (a name of the FEATS column)")
        elif feature is not None:
            raise ConfigError(f"{setting('feature')}={feature!r} only applies to {setting('column')}=feats, not "
                              f"{column!r}. Fix: {setting('column')}=feats, or {setting('feature')}=null")
        self.feature = feature
        self.name = f"feats-{feature}" if self.column == "feats" else self.column
        self.pair = self.column == "deprel"
        self.paths = path_list(setting("paths"), paths) if paths is not None else bundled_pos_paths()
        self.splits = split_map("data.source.splits", CONLLU_SPLITS if splits is None else splits)
        self.dev_fraction = require_fraction(setting("dev_fraction"), dev_fraction)
        self.seed = require_int(setting("seed"), seed)

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
        """The error of a training split with one label: for FEATS a ConfigError naming the setting `feature` and the
        features of the training files with two or more values (what the user can pick instead), else a
        DataFormatError."""
        if self.column != "feats":
            fix = f"give data.source.paths whose training files hold at least two different {self.column.upper()} " \
                  "labels"
            return partial(DataFormatError, origin, None, fix=fix)
        several = sorted(name for name, values in feature_values.items() if len(values) >= 2)
        example = "Number" if "Number" in several or not several else several[0]
        others = (f"; the features with two or more values in the training files: {', '.join(several)}" if several
                  else "; no feature of the training files has two values: give a treebank with richer FEATS")
        key = setting("feature")
        return lambda problem: ConfigError(f"{key}={self.feature}: {problem}. Fix: a feature with at least two "
                                           f"values, e.g. {key}={example}{others}")

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
