"""probing/geometry/occurrence_analysis.py, what the occurrence analyses share, on hand-made sentences: the refusals
before any model work, the rows a store kept, and the sentences read from `analysis.sentences`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from probing.analysis import build_analysis
from probing.errors import ConfigError, DataFormatError
from probing.geometry.occurrence_analysis import require_contexts, stored_occurrences
from probing.geometry.occurrences import collect_occurrences
from tests.helpers.runs import compose_job

# "the" is in all three sentences, "cat" in two, every other word in one; "." is punctuation (no occurrence).
SENTENCES = [("the", "cat", "sat", "."), ("The", "cat", "ran"), ("the", "dog")]


def test_too_few_contexts_are_refused_naming_the_counts():
    occurrences = collect_occurrences(SENTENCES)
    require_contexts(occurrences, 3)  # "the" is in 3 sentences once lower-cased
    with pytest.raises(ConfigError, match="^no word of the 3 sentences occurs in 4 distinct sentences "
                                          r"\(min_contexts\). Fix:"):
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


def test_missing_sentence_files_are_named_by_their_setting_under_analysis_sentences(tmp_path):
    """The GLUE source's messages name train.py's data.data_dir; analyze.py reads it as analysis.sentences.data_dir."""
    sst2 = analysis(tmp_path, "analysis/sentences=sst2", f"analysis.sentences.data_dir={tmp_path}")
    with pytest.raises(DataFormatError, match=r"train.tsv: file not found. Fix: set `analysis.sentences.data_dir` "):
        sst2.sentence_words()
