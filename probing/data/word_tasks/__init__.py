"""Word-level probing tasks: does a layer know each word's UPOS tag, its dependency label, its entity type, or a label
of the user's own? One record type for every source (`records`), one module per source: CoNLL-U columns (`treebank`),
tagged sentences (`tagging`: CoNLL-2003 entity types, train.py's tagging tasks), STREUSLE supersenses
(`supersenses`), JSON lines (`jsonl`). The sources, the splits and the labels: docs/word_tasks.md."""

from probing.data.word_tasks.jsonl import JsonlWordTask
from probing.data.word_tasks.records import (
    NO_SECOND,
    RawSentence,
    WordTaskData,
    WordTaskSource,
    WordTaskSplit,
    build_word_task,
    carve,
    read_word_task,
    unseen_label_summary,
)
from probing.data.word_tasks.supersenses import StreusleWordTask
from probing.data.word_tasks.tagging import Conll2003WordTask, PosWordTask, tagging_word_task
from probing.data.word_tasks.treebank import CONLLU_COLUMNS, SKIP_ROOT, ConlluWordTask, skip_no_tag

__all__ = ["CONLLU_COLUMNS", "NO_SECOND", "SKIP_ROOT", "Conll2003WordTask", "ConlluWordTask", "JsonlWordTask",
           "PosWordTask", "RawSentence", "StreusleWordTask", "WordTaskData", "WordTaskSource", "WordTaskSplit",
           "build_word_task", "carve", "read_word_task", "skip_no_tag", "tagging_word_task", "unseen_label_summary"]
