"""Word occurrences of a sentence corpus (Ethayarajh 2019, §3.2): every word of every sentence, and the index
word -> its occurrences that the contextuality measures run on.

See docs/geometry.md, 'Contextuality'.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from probing.data.records import WordInContext
from probing.data.sentences import Text
from probing.data.sts import split_words

OCCURRENCE_CLASS = "occurrence"


def is_punctuation(token: str) -> bool:
    """True for a token made only of punctuation or symbol characters (".", "--", "$", "'s" is not)."""
    return all(unicodedata.category(char)[0] in "PS" for char in token)


def text_sentences(texts: Iterable[Text]) -> list[tuple[str, ...]]:
    """Word sequences of analysis inputs: pre-split words as they are, raw texts split by `split_words`, the two
    texts of a pair as two sentences."""
    sentences = []
    for text in texts:
        if text.words:
            sentences.append(tuple(text.words))
            continue
        sentences += [split_words(part) for part in (text.text, text.text_pair) if part]
    return [sentence for sentence in sentences if sentence]


@dataclass(frozen=True)
class Occurrences:
    """The distinct sentences and one row per non-punctuation token: its sentence, position and word."""

    sentences: list[tuple[str, ...]]
    sentence: np.ndarray
    position: np.ndarray
    words: list[str]

    def __len__(self) -> int:
        return len(self.words)

    def records(self) -> list[WordInContext]:
        """One word-in-context record per row (the whole sentence, the token as target), for the feature store."""
        return [WordInContext(self.sentences[s], (int(p),), word, OCCURRENCE_CLASS, f"sentence {s}")
                for s, p, word in zip(self.sentence, self.position, self.words)]

    def subset(self, keep: np.ndarray) -> Occurrences:
        """The rows where `keep` is True (e.g. those the encoder could represent)."""
        rows = np.flatnonzero(keep)
        return Occurrences(self.sentences, self.sentence[rows], self.position[rows], [self.words[i] for i in rows])


def collect_occurrences(sentences: Sequence[Sequence[str]], lowercase: bool = True) -> Occurrences:
    """Every non-punctuation token of the distinct `sentences` (first-seen order)."""
    distinct = list(dict.fromkeys(tuple(sentence) for sentence in sentences if sentence))
    sentence_ids, positions, words = [], [], []
    for index, tokens in enumerate(distinct):
        for position, token in enumerate(tokens):
            if not is_punctuation(token):
                sentence_ids.append(index)
                positions.append(position)
                words.append(token.lower() if lowercase else token)
    return Occurrences(distinct, np.asarray(sentence_ids, np.int64), np.asarray(positions, np.int64), words)


def word_index(occurrences: Occurrences, min_contexts: int = 5) -> dict[str, np.ndarray]:
    """word -> rows of its first occurrence in each sentence holding it, for words in >= `min_contexts` sentences
    (Ethayarajh §3.2: "we do not consider words that appear in less than 5 unique contexts"); sorted by word."""
    first: dict[str, dict[int, int]] = {}
    for row, (word, sentence) in enumerate(zip(occurrences.words, occurrences.sentence)):
        first.setdefault(word, {}).setdefault(int(sentence), row)
    return {word: np.asarray(list(rows.values()), np.int64)
            for word, rows in sorted(first.items()) if len(rows) >= min_contexts}


def sentence_rows(occurrences: Occurrences, min_words: int = 2) -> list[np.ndarray]:
    """The rows of each sentence with at least `min_words` occurrences (a one-word sentence is trivially similar to
    itself: intra-sentence similarity 1), in sentence order."""
    order = np.argsort(occurrences.sentence, kind="stable")
    ids, starts = np.unique(occurrences.sentence[order], return_index=True)
    groups = np.split(order, starts[1:]) if len(ids) else []
    return [rows for rows in groups if len(rows) >= min_words]
