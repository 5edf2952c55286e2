"""The sentences of an analysis from loaded data: tagged sentences, text pairs, word-in-context records (each
sentence once), and bad settings as one-line errors."""

from __future__ import annotations

import pytest

from probing.data.records import SkipCounter, WordInContext
from probing.data.sentences import Text, texts_of
from probing.data.task_records import TaggedSentence, TaskData, TextExample
from probing.data.task_sources import PosSource
from probing.errors import ConfigError


def test_the_bundled_pos_dev_sentences_by_default():
    texts = texts_of(PosSource().load(), "dev")
    assert len(texts) == 189 and all(text.words for text in texts)
    assert len(texts_of(PosSource().load(), "dev", max_sentences=5)) == 5


def test_text_pairs_and_word_in_context_sentences():
    pairs = TaskData("mrpc", ["0", "1"], {"dev": [TextExample("a b", "1", text_pair="c d")]}, [], SkipCounter())
    assert texts_of(pairs, "dev") == [Text(text="a b", text_pair="c d")]
    sentence = ("the", "apple", "and", "pine")
    records = [WordInContext(tokens=sentence, target=(1,), word="apple", sclass="food"),
               WordInContext(tokens=sentence, target=(3,), word="pine", sclass="plant"),
               WordInContext(tokens=("oak",), target=(0,), word="oak", sclass="plant")]
    data = TaskData("streusle", [], {"dev": records}, [], SkipCounter())
    assert texts_of(data, "dev") == [Text(words=sentence), Text(words=("oak",))]


@pytest.mark.parametrize("split,message", [
    ("test", "analysis.split=test: the pos data has the splits train, dev. Fix: analysis.split=dev"),
    ("train", "the train split of the pos data is empty. Fix: choose another analysis.split"),
])
def test_bad_settings_are_refused(split, message):
    """(analysis.max_sentences is checked by the analysis that reads it: tests/test_analysis.py.)"""
    data = TaskData("pos", ["NN"], {"train": [], "dev": [TaggedSentence(("a",), ("NN",))]}, [], SkipCounter())
    with pytest.raises(ConfigError, match="Fix:") as error:
        texts_of(data, split)
    assert message in str(error.value) and "\n" not in str(error.value)
