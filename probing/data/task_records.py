"""Fine-tuning task records: POS and NER tag every token of a sentence, SST-2 and MRPC label a text (pair).

The record types, task names, split names and label inventories that the readers (probing.data.ptb, .conllu,
.conll2003, .glue, .sts) and the task sources (probing.data.task_sources) share live here, below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from probing.data.records import SkipCounter
from probing.data.text import note_data_files

# Every task has these splits; "test" (the last of SPLIT_NAMES) only where the data has a labelled one.
REQUIRED_SPLITS = ("train", "dev")
# What a task's examples are (`task.kind` of conf/task/): the one list of kinds that every entry script checks a task
# against. sclass: a word in context and its semantic class (probe.py's s-class probes); token: every word of a
# sentence tagged (train.py's taggers, probe.py's word probes); word, pair: labelled words or word pairs (probe.py);
# sentence: a text or text pair labelled (train.py); tree: the dependency tree of a sentence (probe.py's structural
# probes); statement: one label per text, read from the vector of the whole text (probe.py, probing.data.statements).
SCLASS_KIND, TREE_KIND, STATEMENT_KIND = "sclass", "tree", "statement"
TASK_KINDS = (SCLASS_KIND, "token", "word", "pair", "sentence", TREE_KIND, STATEMENT_KIND)
FINETUNING_KINDS = ("token", "sentence")
WORD_KINDS = ("token", "word", "pair")  # the kinds that probe.py probes a word (or word pair) at a time
TOKEN_TASKS = ("pos", "upos", "xpos", "ner")
SENTENCE_TASKS = ("sst2", "mrpc")
TASK_NAMES = TOKEN_TASKS + SENTENCE_TASKS

# IOB2 over CoNLL-2003's entity types, in the order of the Hugging Face dataset's ClassLabel names.
NER_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
# SST-2: 1 = positive; MRPC: 1 = paraphrase. Labels are kept as the strings of the files.
GLUE_LABELS = ("0", "1")

# Hugging Face split names -> ours.
HUB_SPLITS = {"train": "train", "validation": "dev", "test": "test"}


@dataclass(frozen=True)
class TaggedSentence:
    """A sentence with one tag per token (POS or NER). source: "file:line" of its first token line."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    source: str = ""

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError(f"{self.source}: empty sentence")
        if len(self.tags) != len(self.tokens):
            raise ValueError(f"{self.source}: {len(self.tokens)} tokens but {len(self.tags)} tags")


@dataclass(frozen=True)
class TextExample:
    """A text (SST-2) or text pair (MRPC, `text_pair` set) with its label. source: "file:line"."""

    text: str
    label: str
    text_pair: str | None = None
    source: str = ""


@dataclass
class TaskData:
    """A fine-tuning task ready for tokenisation.

    name:   one of TASK_NAMES.
    labels: the label inventory in a fixed order (the classifier's output order).
    splits: "train", "dev" (and "test" where labelled) -> records: TaggedSentence for TOKEN_TASKS,
            TextExample for SENTENCE_TASKS.
    files:  every data file read (for hashing); empty when loaded from the hub.
    skips:  what the readers skipped or normalised, with counts.
    """

    name: str
    labels: list[str]
    splits: dict[str, list[TaggedSentence]] | dict[str, list[TextExample]]
    files: list[Path]
    skips: SkipCounter

    def __post_init__(self) -> None:
        note_data_files(self.files)  # recorded, hashed, in the job's results.json

    @property
    def token_level(self) -> bool:
        """True for tagging tasks (one label per token), False for sentence classification."""
        return self.name in TOKEN_TASKS
