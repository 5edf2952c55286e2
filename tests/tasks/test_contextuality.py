"""probing/tasks/contextuality.py, its own functions on hand-made sentences: the layers asked, the refusals before any
model work, the rows a store kept, the checked draws, and the sentences read from `analysis.sentences`. The whole
analysis on the tiny BERT runs in tests/tasks/test_analyze_contextuality.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from probing.errors import ConfigError
from probing.geometry.occurrences import collect_occurrences
from probing.tasks.analysis import build_analysis
from probing.tasks.contextuality import checked_samples, chosen_layers, require_contexts, stored_occurrences
from tests.helpers.runs import compose_job

# "the" is in all three sentences, "cat" in two, every other word in one; "." is punctuation (no occurrence).
SENTENCES = [("the", "cat", "sat", "."), ("The", "cat", "ran"), ("the", "dog")]
# min_contexts, words and sentences drawn, seed
COUNTS = (2, 10, 5, 0)


@pytest.mark.parametrize("layers, expected", [(None, [0, 1, 2]), (2, [2]), (0, [0]), ([2, 0, 2], [0, 2]),
                                              ([1], [1])])
def test_the_layers_asked(layers, expected):
    assert chosen_layers(layers, num_layers=3) == expected


@pytest.mark.parametrize("layers", [[3], [-1], [True], [], ["1"], [1.0], 3, [0, 7]])
def test_a_layer_outside_the_model_is_refused_with_the_range(layers):
    with pytest.raises(ConfigError) as raised:
        chosen_layers(layers, num_layers=3)
    message = str(raised.value)
    assert message.startswith("analysis.layers=") and "this model has the layers 0..2 (0 = the embeddings)" in message
    assert "Fix: analysis.layers=null for all, or a list within 0..2" in message


def test_too_few_contexts_are_refused_naming_the_counts():
    occurrences = collect_occurrences(SENTENCES)
    require_contexts(occurrences, 3)  # "the" is in 3 sentences once lower-cased
    with pytest.raises(ConfigError, match="^no word of the 3 sentences occurs in 4 distinct sentences "
                                          r"\(analysis.min_contexts\). Fix:"):
        require_contexts(occurrences, 4)
    with pytest.raises(ConfigError, match="occurs in 3 distinct"):
        require_contexts(collect_occurrences(SENTENCES, lowercase=False), 3)  # "The" is another word


def test_the_occurrences_a_store_kept_and_how_many_it_skipped():
    occurrences = collect_occurrences(SENTENCES)  # rows: the cat sat | the cat ran | the dog
    assert occurrences.words == ["the", "cat", "sat", "the", "cat", "ran", "the", "dog"]
    store = SimpleNamespace(row_ids=lambda: np.array([0, 3, 4, 7]))
    kept, skipped = stored_occurrences(store, occurrences)
    assert skipped == 4 and kept.words == ["the", "the", "cat", "dog"]
    assert kept.sentence.tolist() == [0, 1, 1, 2] and kept.position.tolist() == [0, 0, 1, 1]
    assert kept.sentences == occurrences.sentences


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


def analysis(tmp_path, *overrides: str):
    return build_analysis(compose_job("analyze", tmp_path, "analysis=contextuality", *overrides).analysis)


def test_the_sentences_of_analysis_sentences(tmp_path):
    data, sentences = analysis(tmp_path, "analysis.max_sentences=3").sentence_words()
    _, five = analysis(tmp_path, "analysis.max_sentences=5").sentence_words()
    assert len(sentences) == 3 and len(five) == 5 and five[:3] == sentences  # the first N, in order
    _, occurrences = analysis(tmp_path, "analysis.max_sentences=3", "analysis.min_contexts=2").occurrences()
    words = [word for sentence in sentences for word in sentence if any(character.isalnum() for character in word)]
    assert set(occurrences.words) == {word.lower() for word in words}
    with pytest.raises(ConfigError, match="analysis.max_sentences"):
        analysis(tmp_path, "analysis.max_sentences=0")
