"""One source object per corpus, built by Hydra from `_target_` configs, each with `load() -> WordInContextData`.

Every source reads its corpus into WordInContext records, then splits them word-disjointly and caps the
contexts per word-s-class combination with the same `make_splits` (see probing.data.splits).
Constructor arguments are plain values (str, list, dict) so that they can come from YAML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from probing.data.conll2003 import ENTITY_TYPES, conll2003_paths, load_conll2003_from_hub, read_conll2003
from probing.data.records import SkipCounter, WordInContext
from probing.data.splits import SplitConfig, make_splits
from probing.data.streusle import STREUSLE_FILES, read_streusle, streusle_classes
from probing.data.types import TypeLevelData, types_from_records, wikipse_types
from probing.data.wikipse import read_corpus, read_disjoint_lists, read_sclasses
from probing.errors import ConfigError


@dataclass
class WordInContextData:
    """A corpus ready for probing.

    classes: the corpus's full class inventory, so classes absent from a split still get probes.
    splits:  "train"/"dev"/"test" -> records, word-disjoint.
    files:   every data file read (for hashing into store metadata); empty when loaded from the hub.
    skips:   what the reader skipped, with counts.
    """

    name: str
    classes: list[str]
    splits: dict[str, list[WordInContext]]
    files: list[Path]
    skips: SkipCounter


def required(key: str, value):
    if not value:
        raise ConfigError(
            f"{key} is not set. Fix: pass {key}=/path/to/it (data.corpus: Wiki-PSE's word_sclass/corpus.txt, needed "
            "for context-level probing and AVG spaces; data.lists_dir: the folder with semantic_classes.txt, "
            "train.tsv, test.tsv), or set WIKIPSE_CORPUS / WIKIPSE_DIR")
    return value


def types_of(data: WordInContextData) -> TypeLevelData:
    return types_from_records(data.name, data.classes, data.splits, data.files)


def packaged_streusle_paths() -> list[Path]:
    """The STREUSLE dev and test files bundled with the package (probing/resources/streusle/)."""
    folder = resources.files("probing") / "resources" / "streusle"
    return [Path(str(folder / name)) for name in STREUSLE_FILES]


class StreusleSource:
    """STREUSLE noun supersenses (and verb ones with `include_verbs`); `paths=None` uses the packaged files."""

    name = "streusle"

    def __init__(
        self, paths: Sequence[str] | None = None, include_verbs: bool = False, split: SplitConfig | Mapping | None = None
    ):
        self.paths = [Path(p) for p in paths] if paths is not None else packaged_streusle_paths()
        self.include_verbs = bool(include_verbs)
        self.split = SplitConfig.from_any(split)

    def load(self) -> WordInContextData:
        records, skips = read_streusle(self.paths, self.include_verbs, config_key="data.source.paths")
        splits = make_splits(records, self.split)
        return WordInContextData(self.name, streusle_classes(self.include_verbs), splits, list(self.paths), skips)

    def load_types(self) -> TypeLevelData:
        """Type-level probing data: each word with every supersense it has in the corpus, same word splits."""
        return types_of(self.load())


class Conll2003Source:
    """CoNLL-2003 entity mentions (PER/LOC/ORG/MISC) from `data_dir`'s files, or the hub when `data_dir` is None.

    The official train/valid/test files are pooled and re-split word-disjointly like the other corpora,
    because the official split shares entity names across files.
    """

    name = "conll2003"

    def __init__(
        self,
        data_dir: str | None = None,
        files: Sequence[str] = ("train.txt", "valid.txt", "test.txt"),
        hub_name: str = "conll2003",
        split: SplitConfig | Mapping | None = None,
    ):
        self.data_dir = data_dir
        self.files = list(files)
        self.hub_name = hub_name
        self.split = SplitConfig.from_any(split)

    def load(self) -> WordInContextData:
        if self.data_dir is None:
            paths: list[Path] = []
            records, skips = load_conll2003_from_hub(self.hub_name)
        else:
            paths = conll2003_paths(self.data_dir, self.files)
            records, skips = read_conll2003(paths)
        return WordInContextData(self.name, list(ENTITY_TYPES), make_splits(records, self.split), paths, skips)

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
        self.corpus = Path(corpus) if corpus else None
        self.lists_dir = Path(required("data.lists_dir", lists_dir))
        self.split = SplitConfig.from_any(split)

    def load_types(self) -> TypeLevelData:
        """Type-level probing on the word lists alone (no corpus needed): Wiki-PSE's test words, and a seeded
        `split.dev_fraction` of its training words as dev (Zhao §3.1)."""
        return wikipse_types(self.lists_dir, self.split.dev_fraction, self.split.seed)

    def load(self) -> WordInContextData:
        self.corpus = Path(required("data.corpus", self.corpus))
        classes_path, train_path, test_path = (self.lists_dir / name for name in self.LIST_FILES)
        classes = read_sclasses(classes_path, config_key="data.lists_dir")
        train_words, test_words = read_disjoint_lists(train_path, test_path, classes, SkipCounter())
        word_split = {word: "train" for word in train_words} | {word: "test" for word in test_words}
        records, skips = read_corpus(self.corpus, classes, word_split, config_key="data.corpus")
        splits = make_splits(records, self.split, fixed_test_words=set(test_words))
        files = [self.corpus, classes_path, train_path, test_path]
        return WordInContextData(self.name, classes, splits, files, skips)
