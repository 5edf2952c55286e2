"""The occurrence table and the word index: contexts counted per distinct sentence, punctuation skipped."""

from __future__ import annotations

import numpy as np

from probing.data.sentences import Text
from probing.geometry.occurrences import (
    collect_occurrences,
    is_punctuation,
    sentence_rows,
    text_sentences,
    word_index,
)


def test_punctuation_and_symbols_are_no_occurrences():
    assert all(is_punctuation(token) for token in (".", ",", "--", "$", "?!", "``"))
    assert not any(is_punctuation(token) for token in ("'s", "dog", "U.S.", "3"))
    occurrences = collect_occurrences([("The", "dog", ",", "barks", ".")])
    assert occurrences.words == ["the", "dog", "barks"]
    assert occurrences.position.tolist() == [0, 1, 3]


def test_index_keeps_words_in_at_least_min_contexts_distinct_sentences():
    sentences = [("a", "dog", "runs", str(i)) for i in range(5)] + [("a", "cat", str(i)) for i in range(4)]
    sentences += [("a", "dog", "runs", "0")]  # a repeated sentence is the same context
    index = word_index(collect_occurrences(sentences), min_contexts=5)
    assert sorted(index) == ["a", "dog", "runs"]
    assert len(index["dog"]) == 5 and len(index["a"]) == 9
    assert sorted(word_index(collect_occurrences(sentences), min_contexts=4)) == ["a", "cat", "dog", "runs"]


def test_a_word_twice_in_a_sentence_keeps_its_first_occurrence():
    occurrences = collect_occurrences([("the", "dog", "saw", "the", "cat")] + [("the", str(i)) for i in range(4)])
    rows = word_index(occurrences, min_contexts=5)["the"]
    assert occurrences.sentence[rows].tolist() == [0, 1, 2, 3, 4]
    assert occurrences.position[rows[0]] == 0


def test_case_is_kept_on_request_and_records_hold_the_whole_sentence():
    occurrences = collect_occurrences([("The", "Dog", ".")], lowercase=False)
    assert occurrences.words == ["The", "Dog"]
    record = occurrences.records()[1]
    assert record.tokens == ("The", "Dog", ".") and record.target == (1,) and record.word == "Dog"


def test_sentence_rows_leave_out_one_word_sentences_and_subset_keeps_rows():
    occurrences = collect_occurrences([("a", "b", "."), ("c", "!"), ("d", "e", "f")])
    assert [rows.tolist() for rows in sentence_rows(occurrences)] == [[0, 1], [3, 4, 5]]
    kept = occurrences.subset(np.array([True, False, True, True, True, True]))
    assert kept.words == ["a", "c", "d", "e", "f"]


def test_texts_become_word_sequences():
    texts = [Text(words=("A", "b")), Text(text="Don't stop, well-known 3.5."), Text(text="x y", text_pair="z")]
    assert text_sentences(texts) == [("A", "b"), ("Don't", "stop", ",", "well-known", "3.5", "."), ("x", "y"),
                                     ("z",)]
