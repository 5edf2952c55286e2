"""The sentences an analysis runs on, from any data source of probing.data (a `_target_` config with `load()`).

Tagging tasks (POS, NER) give pre-split words, GLUE tasks a text or a text pair, word-in-context corpora (STREUSLE)
the sentence of each record: a sentence that holds several targets is used once. Records in, texts out, torch-free:
here, below every wing, so that the analyses' base (probing.analysis) and any wing's analysis read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from probing.data.records import WordInContext
from probing.data.task_records import TaggedSentence, TextExample
from probing.errors import ConfigError


@dataclass(frozen=True)
class Text:
    """One input: pre-split `words`, or a raw `text` with an optional second text `text_pair` (encoded as a pair)."""

    words: tuple[str, ...] = ()
    text: str = ""
    text_pair: str | None = None


def texts_of(data, split: str, max_sentences: int | None = None, key: str = "analysis") -> list[Text]:
    """The inputs of `split` of loaded data (TaskData or WordInContextData), in corpus order; the first
    `max_sentences` of them when set (a count >= 1, checked by the analysis that reads it). `key` is the config node
    named in errors."""
    if split not in data.splits:
        raise ConfigError(f"{key}.split={split}: the {data.name} data has the splits {', '.join(data.splits)}. "
                          f"Fix: {key}.split=dev")
    texts = as_texts(data.splits[split])
    if not texts:
        raise ConfigError(f"the {split} split of the {data.name} data is empty. Fix: choose another {key}.split, "
                          f"or other data under {key}.sentences")
    return texts[:max_sentences]


def as_texts(records: Sequence) -> list[Text]:
    texts = []
    for record in records:
        if isinstance(record, TextExample):
            texts.append(Text(text=record.text, text_pair=record.text_pair))
        elif isinstance(record, (TaggedSentence, WordInContext)):
            texts.append(Text(words=tuple(record.tokens)))
        else:
            raise TypeError(f"no sentence in a record of type {type(record).__name__}")
    if records and isinstance(records[0], WordInContext):  # one record per target: each sentence once
        texts = list(dict.fromkeys(texts))
    return texts
