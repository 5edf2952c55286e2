"""Every word of a word task's sentences, as the every-word stores take them: one record per word occurrence, the
whole sentence as its context (the store kind of the geometry analyses, `probing.features.sentence_store`). UPOS,
XPOS, DEPREL and FEATS of one treebank label the same sentences, so their probes read the same stores, extracted once;
`extract.py` fills them for any word task, and `export_elmo=` writes them in the ELMo layout."""

from __future__ import annotations

from typing import Any, Protocol

from probing.data.records import RecordTable, RecordTableBuilder
from probing.data.sources import WordInContextData


class SentenceSplit(Protocol):
    """What every-word records are made from: a split's sentences (their words) and the source of each ("file:line"
    of its first word), as a word task's and a tree task's splits hold them."""

    sentences: tuple[tuple[str, ...], ...]
    sources: tuple[str, ...]


EVERY_WORD_CLASS = "word"  # the class of every row of an every-word store (the task's labels are kept elsewhere)
EVERY_WORD_DATA = "words"  # the data name of every-word stores: tasks over the same sentences share them


def every_word_data(data: Any) -> WordInContextData:
    """The every-word records of each split of a task over sentences (a word task, a tree task: its splits are
    `SentenceSplit`s), as the stores take them. No data files are passed: an every-word store holds the vectors of
    its sentences, whatever task labels them, so it is keyed on its records (their fingerprint: the sentences and the
    word of each row), not on the task's files; tasks over the same sentences (UPOS, DEPREL, FEATS and the tree
    probes of one treebank) thus share it."""
    return WordInContextData(EVERY_WORD_DATA, [EVERY_WORD_CLASS],
                             {split: every_word_records(task) for split, task in data.splits.items()}, [], data.skips)


def every_word_records(split: SentenceSplit) -> RecordTable:
    """One record per word of every sentence of a split, in its every-word order (all words of sentence 0, then of
    sentence 1, ...; whole sentence as context, the word as target, lower-cased as word type): the records of its
    store."""
    builder = RecordTableBuilder()
    for tokens, source in zip(split.sentences, split.sources):
        for position, word in enumerate(tokens):
            builder.add(tokens, (position,), word.lower(), EVERY_WORD_CLASS, source)
    return builder.build()
