"""probing/geometry/contextuality_analysis.py, its own functions on hand-made sentences: the layers asked (one
resolver, negative counting from the top) and the checked draws. The whole analysis on the tiny BERT runs in
tests/tasks/test_analyze_contextuality.py."""

from __future__ import annotations

import logging

import pytest

from probing.errors import ConfigError
from probing.geometry.contextuality_analysis import checked_samples, chosen_layers
from probing.geometry.occurrences import collect_occurrences

# "the" is in all three sentences, "cat" in two, every other word in one; "." is punctuation (no occurrence).
SENTENCES = [("the", "cat", "sat", "."), ("The", "cat", "ran"), ("the", "dog")]
# min_contexts, words and sentences drawn, seed
COUNTS = (2, 10, 5, 0)


@pytest.mark.parametrize("layers, expected", [(None, [0, 1, 2]), (2, [2]), (0, [0]), ([2, 0, 2], [0, 2]),
                                              ([1], [1]), ([-1], [2]), ([-3, 2, -1], [0, 2])])
def test_the_layers_asked(layers, expected):
    assert chosen_layers(layers, num_layers=3) == expected


@pytest.mark.parametrize("layers", [[3], [-4], [True], [], ["1"], [1.0], 3, [0, 7], "1"])
def test_a_layer_outside_the_model_is_refused_with_the_range(layers):
    with pytest.raises(ConfigError) as raised:
        chosen_layers(layers, num_layers=3, model="tiny")
    message = str(raised.value)
    assert message.startswith("layers=") and "layer of tiny" in message
    assert "hidden states are 0..2" in message and "\n" not in message
    assert message.endswith("Fix: layers=null for all, or a list within 0..2")


def test_the_draws_are_checked_and_used_whole_when_fewer_qualify(caplog):
    caplog.set_level(logging.WARNING, logger="probing")
    samples = checked_samples(collect_occurrences(SENTENCES), *COUNTS)
    # words in >= 2 sentences: cat, the; sentences with >= 2 words: all 3; baseline: all 8 occurrences
    assert samples.counts() == {"words_sampled": 2, "words_available": 2, "sentences_sampled": 3,
                                "sentences_available": 3, "baseline_occurrences": 8, "occurrences": 8}
    assert [rows.tolist() for rows in samples.words] == [[1, 4], [0, 3, 6]]  # cat, the: a row per sentence
    warnings = [record.getMessage() for record in caplog.records]
    assert warnings == ["only 2 words qualify, fewer than the 10 asked: all of them are used",
                        "only 3 sentences qualify, fewer than the 5 asked: all of them are used"]


def test_draws_without_a_word_in_enough_sentences_are_refused():
    with pytest.raises(ConfigError, match="^no word of the 3 sentences occurs in 4 distinct sentences. Fix:"):
        checked_samples(collect_occurrences(SENTENCES), 4, *COUNTS[1:])


def test_draws_without_two_sentences_of_two_words_are_refused():
    one_word_each = collect_occurrences([("cat",), ("cat", "."), ("cat", "!")])  # three sentences of one word
    with pytest.raises(ConfigError, match="^fewer than 2 sentences with 2 or more words: there is no intra-sentence"):
        checked_samples(one_word_each, *COUNTS)
