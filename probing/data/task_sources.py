"""Fine-tuning task sources: POS and NER tag every token of a sentence, SST-2 and MRPC label a text (pair).

The record types, task names and label inventories live in probing.data.task_records; the readers
(probing.data.ptb, .conllu, .conll2003, .glue) turn files into these records, and one source class per task
here, built by Hydra from a `_target_` config with plain YAML values, reads them into a `TaskData` with `load()`.

Splits are the corpus's own: "train" and "dev" always, "test" where the data has a labelled one (a CoNLL-2003
folder without test.txt has none: `ner_files`). Nothing is re-split or sampled here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from probing.data.conll2003 import conll2003_paths, load_conll2003_sentences_from_hub, read_conll2003_sentences
from probing.data.conllu import conllu_files, read_conllu_xpos
from probing.data.glue import GLUE_FILES, load_glue_from_hub, read_glue_tsv
from probing.data.ptb import ptb_files, read_ptb
from probing.data.records import SkipCounter
from probing.data.settings import choose, optional_path, path_list
from probing.data.splits import SPLIT_NAMES
from probing.data.task_records import (
    GLUE_LABELS,
    NER_LABELS,
    REQUIRED_SPLITS,
    SENTENCE_TASKS,
    TaggedSentence,
    TaskData,
)
from probing.data.text import hashable_files
from probing.errors import ConfigError, DataFormatError, setting

POS_FORMATS = ("conllu", "ptb")
# Which files go to which split, as file-name patterns (fnmatch). CoNLL-U: UD's naming, <corpus>-<split>.conllu.
# Penn Treebank: the NLTK sample's files wsj_0001-wsj_0159 train, wsj_0160-wsj_0199 dev (about 80/20 by file).
CONLLU_SPLITS = {"train": "*-train.conllu", "dev": "*-dev.conllu", "test": "*-test.conllu"}
PTB_SPLITS = {"train": ["wsj_00??.mrg", "wsj_01[0-5]?.mrg"], "dev": "wsj_01[6-9]?.mrg"}
BUNDLED_POS_FILES = ("en_ewt-sample-train.conllu", "en_ewt-sample-dev.conllu")
SKIP_FILE_IN_NO_SPLIT = "file matching no pattern of data.source.splits, not read"
NER_FILES = {"train": "train.txt", "dev": "valid.txt", "test": "test.txt"}  # the official CoNLL-2003 names
NER_FILES_FIX = "set `data.data_dir` to a folder with the CoNLL-2003 files train.txt and valid.txt (test.txt optional)"
NAMED_NER_FILES_FIX = ("put the files that data.source.files names into data.data_dir, or name the folder's own "
                       "(test may be left out)")


def ner_files(data_dir: Path, files: Mapping[str, list[str]] | None) -> dict[str, list[Path]]:
    """The CoNLL-2003 files of each split in `data_dir`: those that `files` names, every one required, or with
    `files=None` the official names (NER_FILES), of which test.txt may be missing: the folder then has no test
    split. A missing file is a DataFormatError naming it."""
    fix = NAMED_NER_FILES_FIX
    if files is None:
        files = {split: [name] for split, name in NER_FILES.items() if split != "test" or (data_dir / name).is_file()}
        fix = NER_FILES_FIX
    return {split: conll2003_paths(data_dir, names, fix) for split, names in files.items()}


def check_splits(splits: Mapping[str, list], origin: str, fix: str) -> None:
    """"train" and "dev" must hold data; `origin` names where the data came from, `fix` how to give it."""
    empty = [name for name in REQUIRED_SPLITS if not splits.get(name)]
    if empty:
        raise DataFormatError(origin, None, f"no {empty[0]} data", fix)


def split_map(key: str, value: object) -> dict[str, list[str]]:
    """{split: [item, ...]} from a mapping of split names to one string or a list of strings (YAML-friendly)."""
    fix = f"Fix: {key}={{train: ..., dev: ...}} (test optional)"
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"{key} must map splits to file names, got {value!r}. {fix}")
    unknown = [split for split in value if split not in SPLIT_NAMES]
    if unknown:
        raise ConfigError(f"{key} names the split {unknown[0]!r}; splits are {', '.join(SPLIT_NAMES)}. {fix}")
    return {split: [str(item) for item in path_list(f"{key}.{split}", items)] for split, items in value.items()}


def files_by_split(
    files: Sequence[Path], patterns: Mapping[str, list[str]], key: str, skips: SkipCounter
) -> dict[str, list[Path]]:
    """Each file's split: the split whose patterns match its name. A file matching two splits is a ConfigError;
    one matching none is left out and counted in `skips` (e.g. the PTB sections outside a standard split)."""
    by_split: dict[str, list[Path]] = {split: [] for split in patterns}
    for path in files:
        splits = [split for split, names in patterns.items() if any(fnmatch.fnmatch(path.name, n) for n in names)]
        if len(splits) > 1:
            raise ConfigError(f"{path.name} matches the patterns of splits {splits} in {key}. "
                              f"Fix: make the patterns of {key} disjoint")
        if splits:
            by_split[splits[0]].append(path)
        else:
            skips.skip(SKIP_FILE_IN_NO_SPLIT, str(path))
    return by_split


def labels_in_order(splits: Mapping[str, list[TaggedSentence]]) -> list[str]:
    """The tags found in every split, sorted: deterministic whatever the file order, and covering dev and test."""
    return sorted({tag for sentences in splits.values() for sentence in sentences for tag in sentence.tags})


def bundled_pos_paths() -> list[Path]:
    """The UD English-EWT sample bundled with the package (probing/resources/ud_english_ewt/, see its README)."""
    folder = resources.files("probing") / "resources" / "ud_english_ewt"
    return [Path(str(folder / name)) for name in BUNDLED_POS_FILES]


class PosSource:
    """Part-of-speech tagging with Penn Treebank tags.

    format="conllu": `paths` are CoNLL-U files, tags from XPOS (probing.data.conllu); `paths=None` reads the
    bundled UD English-EWT sample (train 651 sentences, dev 189).
    format="ptb": `paths` are Penn Treebank .mrg files, folders of them, or NLTK's treebank.zip (probing.data.ptb).
    `splits` maps each split to file-name patterns (one or a list); defaults: CONLLU_SPLITS or PTB_SPLITS.
    The label inventory is every tag of every split, sorted.
    """

    name = "pos"

    def __init__(
        self,
        format: str = "conllu",
        paths: str | Sequence[str] | None = None,
        splits: Mapping[str, str | Sequence[str]] | None = None,
    ):
        self.format = choose(setting("format"), format, POS_FORMATS)
        if paths is None and self.format == "ptb":
            raise ConfigError(f"{setting('paths')} is not set for format=ptb. Fix: {setting('paths')}=[DIR_OR_ZIP], "
                              "e.g. nltk_data/corpora/treebank.zip")
        self.paths = path_list(setting("paths"), paths) if paths is not None else bundled_pos_paths()
        default = CONLLU_SPLITS if self.format == "conllu" else PTB_SPLITS
        self.splits = split_map("data.source.splits", default if splits is None else splits)

    def load(self) -> TaskData:
        find, read = (ptb_files, read_ptb) if self.format == "ptb" else (conllu_files, read_conllu_xpos)
        skips = SkipCounter()
        chosen = files_by_split(find(self.paths, "data.source.paths"), self.splits, "data.source.splits", skips)
        splits = {split: read(paths, skips, "data.source.paths") for split, paths in chosen.items() if paths}
        fix = "give data.source.paths with files whose names match the train and dev patterns of data.source.splits"
        check_splits(splits, ", ".join(str(path) for path in self.paths), fix)
        read_files = [path for paths in chosen.values() for path in paths]
        return TaskData(self.name, labels_in_order(splits), splits, hashable_files(read_files), skips)


class NerSource:
    """CoNLL-2003 named entities, IOB2 tags over PER/LOC/ORG/MISC (NER_LABELS), from `data_dir`'s files or, when
    `data_dir` is None, the Hugging Face dataset `hub_name` (splits train/validation/test).

    `files` maps each split to its file name (or names) in `data_dir`, each of them required; left unset, the official
    split (NER_FILES): train.txt and valid.txt, and test.txt where the folder has it. Without test.txt the task has
    no test split: train.py reports dev only (and probe.py's task=ner probes valid.txt as its test split, with dev
    carved from train: probing.data.word_tasks.Conll2003WordTask).
    """

    name = "ner"
    FILES = NER_FILES

    def __init__(
        self,
        data_dir: str | None = None,
        files: Mapping[str, str | Sequence[str]] | None = None,
        hub_name: str = "conll2003",
    ):
        self.data_dir = optional_path(setting("data_dir"), data_dir)
        self.files = None if files is None else split_map(setting("files"), files)  # None: NER_FILES
        self.hub_name = hub_name

    def load(self) -> TaskData:
        skips = SkipCounter()
        if self.data_dir is None:
            splits, files, origin = load_conll2003_sentences_from_hub(self.hub_name, skips), [], self.hub_name
        else:
            paths = ner_files(self.data_dir, self.files)
            splits = {split: read_conll2003_sentences(found, skips) for split, found in paths.items()}
            files, origin = [path for found in paths.values() for path in found], str(self.data_dir)
        check_splits(splits, origin, "give data.source.files for train and dev, or a hub dataset with both")
        return TaskData(self.name, list(NER_LABELS), splits, files, skips)


class GlueSource:
    """GLUE sentence classification, `task` "sst2" (one sentence) or "mrpc" (a sentence pair), labels "0"/"1".

    `data_dir` is the task's folder (GLUE's SST-2/ or MRPC/) with train.tsv and dev.tsv, read by probing.data.glue;
    None loads the Hugging Face dataset `hub_name` with config `task` (its unlabelled test split is left out).
    """

    def __init__(self, task: str = "sst2", data_dir: str | None = None, hub_name: str = "glue"):
        self.name = choose(setting("task"), task, SENTENCE_TASKS)
        self.data_dir = optional_path(setting("data_dir"), data_dir)
        self.hub_name = hub_name

    def load(self) -> TaskData:
        if self.data_dir is None:
            splits, paths, origin = load_glue_from_hub(self.hub_name, self.name), [], f"{self.hub_name}/{self.name}"
        else:
            paths = [self.data_dir / name for name in GLUE_FILES.values()]
            splits = {split: read_glue_tsv(path, self.name) for split, path in zip(GLUE_FILES, paths)}
            origin = str(self.data_dir)
        check_splits(splits, origin, "give a hub dataset with train and validation splits")
        return TaskData(self.name, list(GLUE_LABELS), splits, paths, SkipCounter())
