"""Word tasks from tagged sentences: CoNLL-2003 entity types per token (PER, LOC, ORG, MISC, O), and a tagging task of
train.py (task=pos) probed as a word task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from probing.data.conll2003 import load_conll2003_sentences_from_hub, read_conll2003_sentences
from probing.data.records import SkipCounter
from probing.data.settings import optional_path, require_int
from probing.data.task_records import TaggedSentence, TaskData
from probing.data.task_sources import (
    NerSource,
    PosSource,
    ner_files,
    split_map,
)
from probing.data.word_tasks.records import NO_SECOND, RawSentence, WordTaskData, build_word_task, require_fraction
from probing.errors import ConfigError, DataFormatError, setting

NER_ONE_LABEL_FIX = "give training sentences with entity mentions (B-X, I-X tags), not only O"


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
        self.data_dir = optional_path(setting("data_dir"), data_dir)
        self.files = None if files is None else split_map(setting("files"), files)  # None: the official names
        if not isinstance(hub_name, str) or not hub_name:
            raise ConfigError(f"{setting('hub_name')}={hub_name!r} is not a dataset name. "
                              f"Fix: {setting('hub_name')}=conll2003")
        self.hub_name = hub_name
        self.dev_fraction = require_fraction(setting("dev_fraction"), dev_fraction)
        self.seed = require_int(setting("seed"), seed)

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
