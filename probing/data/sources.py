"""One source object per corpus, built by Hydra from `_target_` configs, each with `load() -> WordInContextData`.

Every source reads its corpus into a compact table of WordInContext records (`RecordTable`), then splits them
word-disjointly and caps the contexts per word-s-class combination with the same `make_splits`
(see probing.data.splits).
Constructor arguments are plain values (str, list, dict) so that they can come from YAML.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from probing.data.conll2003 import ENTITY_TYPES, conll2003_paths, load_conll2003_from_hub, read_conll2003
from probing.data.records import RecordTable, SkipCounter
from probing.data.settings import optional_path, path_list, require_bool
from probing.data.splits import SplitConfig, make_splits, split_summary
from probing.data.streusle import STREUSLE_FILES, read_streusle, streusle_classes
from probing.data.text import note_data_files
from probing.data.types import TypeLevelData, types_from_records, wikipse_types
from probing.data.wikipse import read_corpus, read_disjoint_lists, read_sclasses
from probing.errors import ConfigError, DataFormatError, setting, settings_under

log = logging.getLogger(__name__)

@dataclass
class WordInContextData:
    """A corpus ready for probing.

    classes: the corpus's full class inventory, so classes absent from a split still get probes.
    splits:  "train"/"dev"/"test" -> records (compact tables), word-disjoint.
    files:   every data file read (for hashing into store metadata); empty when loaded from the hub.
    skips:   what the reader skipped, with counts.
    """

    name: str
    classes: list[str]
    splits: dict[str, RecordTable]
    files: list[Path]
    skips: SkipCounter

    def __post_init__(self) -> None:
        note_data_files(self.files)  # recorded, hashed, in the job's results.json


def read_contexts(source) -> WordInContextData:
    """`source.load()`: the corpus read into its word-disjoint, sampled train/dev/test splits, their sizes and what
    the reader skipped logged."""
    with settings_under("source"):  # what the source refuses while reading names its settings as the source's
        data = source.load()
    for split, counts in split_summary(data.splits).items():
        log.info("%s %s: %d words, %d combinations, %d contexts", data.name, split,
                 counts["words"], counts["combinations"], counts["contexts"])
    if data.skips.total():
        log.warning("%s: skipped while reading: %s", data.name, data.skips.summary())
    return data


def required(key: str, value):
    if not value:
        raise ConfigError(
            f"{key} is not set. Fix: pass {key}=/path/to/it (data.corpus: Wiki-PSE's word_sclass/corpus.txt, needed "
            "for context-level probing and AVG spaces; data.lists_dir: the folder with semantic_classes.txt, "
            "train.tsv, test.tsv), or set WIKIPSE_CORPUS / WIKIPSE_DIR")
    return value


def split_read_records(
    read: tuple[RecordTable, SkipCounter],
    origin: Sequence[str | Path],
    split: SplitConfig,
    expected: str,
    fix: str,
    fixed_test_words: set[str] | None = None,
) -> dict[str, RecordTable]:
    """make_splits over what a reader returned; no records at all is a DataFormatError naming `origin` (the files
    read, or the hub dataset), what was `expected` in them and what the reader skipped; the settings that leave a
    split empty are named as parts of `split`."""
    records, skips = read
    if not records:
        skipped = f"; skipped while reading: {skips.summary()}" if skips.total() else ""
        where = ", ".join(str(item) for item in origin)
        raise DataFormatError(where, None, f"no records: no {expected}{skipped}", fix)
    with settings_under("split"):
        return make_splits(records, split, fixed_test_words, files=origin)


def types_of(data: WordInContextData) -> TypeLevelData:
    return types_from_records(data.name, data.classes, data.splits, data.files)


def packaged_streusle_paths() -> list[Path]:
    """The STREUSLE dev and test files bundled with the package (probing/resources/streusle/)."""
    folder = resources.files("probing") / "resources" / "streusle"
    return [Path(str(folder / name)) for name in STREUSLE_FILES]


class StreusleSource:
    """STREUSLE noun supersenses (and verb ones with `include_verbs`) from `paths`, a list of files or one file;
    `paths=None` uses the packaged files."""

    name = "streusle"

    def __init__(
        self,
        paths: str | Sequence[str] | None = None,
        include_verbs: bool = False,
        split: SplitConfig | Mapping | None = None,
    ):
        self.paths = path_list(setting("paths"), paths) if paths is not None else packaged_streusle_paths()
        self.include_verbs = require_bool(setting("include_verbs"), include_verbs)
        with settings_under("split"):
            self.split = SplitConfig.from_any(split)

    def load(self) -> WordInContextData:
        read = read_streusle(self.paths, self.include_verbs, config_key="data.source.paths")
        if self.include_verbs:
            expected, fix = "noun or verb supersense unit", "give STREUSLE files with n.* or v.* supersenses in SS"
        else:
            expected = "noun supersense unit"
            fix = "give STREUSLE files with n.* supersenses in SS, or set data.source.include_verbs=true for v.* too"
        splits = split_read_records(read, self.paths, self.split, f"{expected} (SS, column 14)", fix)
        return WordInContextData(self.name, streusle_classes(self.include_verbs), splits, list(self.paths), read[1])

    def load_types(self) -> TypeLevelData:
        """Type-level probing data: each word with every supersense it has in the corpus, same word splits."""
        return types_of(self.load())


class Conll2003Source:
    """CoNLL-2003 entity mentions (PER/LOC/ORG/MISC) from `data_dir`'s files, or the hub when `data_dir` is None.

    The official train/valid/test files are pooled and re-split word-disjointly like the other corpora,
    because the official split shares entity names across files. `files` is a list of names in `data_dir` or one name.
    """

    name = "conll2003"

    def __init__(
        self,
        data_dir: str | None = None,
        files: str | Sequence[str] = ("train.txt", "valid.txt", "test.txt"),
        hub_name: str = "conll2003",
        split: SplitConfig | Mapping | None = None,
    ):
        self.data_dir = optional_path(setting("data_dir"), data_dir)
        self.files = path_list(setting("files"), files)
        self.hub_name = hub_name
        with settings_under("split"):
            self.split = SplitConfig.from_any(split)

    def load(self) -> WordInContextData:
        if self.data_dir is None:
            paths: list[Path] = []
            read = load_conll2003_from_hub(self.hub_name)
        else:
            paths = conll2003_paths(self.data_dir, self.files)
            read = read_conll2003(paths)
        fix = f"give CoNLL-2003 data tagged B-X/I-X with X in {', '.join(ENTITY_TYPES)}"
        splits = split_read_records(read, paths or [self.hub_name], self.split, "entity mention (all tags O)", fix)
        return WordInContextData(self.name, list(ENTITY_TYPES), splits, paths, read[1])

    def load_types(self) -> TypeLevelData:
        """Type-level probing data: each mention string with every entity type it has, same word splits."""
        return types_of(self.load())


class WikiPseSource:
    """Wiki-PSE: the annotated corpus plus the word lists; the test words are those of test.tsv (the paper's split).

    `lists_dir` holds semantic_classes.txt, train.tsv and test.tsv. Dev words are `split.dev_fraction`
    of the training words with contexts (the paper uses 20%).
    """

    name = "wikipse"
    LIST_FILES = ("semantic_classes.txt", "train.tsv", "test.tsv")

    def __init__(self, corpus: str | None, lists_dir: str | None, split: SplitConfig | Mapping | None = None):
        self.corpus = optional_path(setting("corpus"), corpus)
        self.lists_dir = required("data.lists_dir", optional_path(setting("lists_dir"), lists_dir))
        with settings_under("split"):
            self.split = SplitConfig.from_any(split)

    def load_types(self) -> TypeLevelData:
        """Type-level probing on the word lists alone (no corpus needed): Wiki-PSE's test words, and a seeded
        `split.dev_fraction` of its training words as dev (Zhao §3.1)."""
        return wikipse_types(self.lists_dir, self.split.dev_fraction, self.split.seed)

    def load(self) -> WordInContextData:
        self.corpus = required("data.corpus", self.corpus)
        classes_path, train_path, test_path = (self.lists_dir / name for name in self.LIST_FILES)
        classes = read_sclasses(classes_path, config_key="data.lists_dir")
        train_words, test_words = read_disjoint_lists(train_path, test_path, classes, SkipCounter())
        word_split = {word: "train" for word in train_words} | {word: "test" for word in test_words}
        read = read_corpus(self.corpus, classes, word_split, config_key="data.corpus")
        files = [self.corpus, classes_path, train_path, test_path]
        expected = "annotated occurrence of a word of train.tsv or test.tsv in the corpus"
        fix = "set data.corpus to the corpus annotated for the word lists of data.lists_dir"
        splits = split_read_records(read, files, self.split, expected, fix, fixed_test_words=set(test_words))
        return WordInContextData(self.name, classes, splits, files, read[1])
