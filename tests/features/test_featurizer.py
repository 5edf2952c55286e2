"""probing/features/featurizer.py: the `context_size` setting, the one context-window rule (Zhao et al. 2020 §4.3:
words on each side of the target, cut at the sentence edges) worked out by hand, and the `Featurizer` protocol that
the encoder and the baselines satisfy."""

from __future__ import annotations

import numpy as np
import pytest

from probing.data.records import SkipCounter, WordInContext
from probing.errors import ConfigError
from probing.features.baselines import WordBaseline, WordpieceBaseline
from probing.features.encoder import WordEncoder
from probing.features.featurizer import (
    WHOLE_SENTENCE,
    Featurizer,
    PreparedInput,
    context_label,
    context_window,
    parse_context_size,
)

SENTENCE = ("a", "b", "c", "d", "e", "f", "g")


def record(*target: int) -> WordInContext:
    return WordInContext(SENTENCE, tuple(target), "_".join(SENTENCE[i] for i in target), "x", "toy:1")


@pytest.mark.parametrize("value, expected", [(None, None), ("all", None), (0, 0), (2, 2), (32, 32), (1000, 1000)])
def test_context_sizes(value, expected):
    assert parse_context_size(value) == expected


@pytest.mark.parametrize("value", [-1, True, False, 2.0, "8", "none", [2]])
def test_what_is_not_a_context_size_is_refused_with_a_fix(value):
    with pytest.raises(ConfigError) as raised:
        parse_context_size(value)
    message = str(raised.value)
    assert message.startswith(f"context_size={value!r} is not a context size. Fix: context_size=0, 2, 4")
    assert "context_size=all" in message


@pytest.mark.parametrize("size, label", [(None, "all"), (0, 0), (16, 16)])
def test_context_labels(size, label):
    assert context_label(size) == label and parse_context_size(label) == size
    assert WHOLE_SENTENCE == "all"


@pytest.mark.parametrize("target, size, words, positions", [
    ((3,), None, SENTENCE, (3,)),                      # the whole sentence
    ((3,), 0, ("d",), (0,)),                           # the target alone
    ((3,), 1, ("c", "d", "e"), (1,)),
    ((3,), 2, ("b", "c", "d", "e", "f"), (2,)),
    ((3,), 3, SENTENCE, (3,)),                         # exactly the sentence
    ((3,), 9, SENTENCE, (3,)),                         # cut at both edges
    ((0,), 2, ("a", "b", "c"), (0,)),                  # cut at the left edge
    ((6,), 2, ("e", "f", "g"), (2,)),                  # cut at the right edge
    ((4, 5), 1, ("d", "e", "f", "g"), (1, 2)),         # a multiword target: around its first and last word
    ((1, 2), 0, ("b", "c"), (0, 1)),
])
def test_the_context_window_by_hand(target, size, words, positions):
    assert context_window(record(*target), size) == (words, positions)


def test_a_prepared_input_has_no_word_ids_unless_given():
    assert PreparedInput([2, 7, 3], [1]).word_ids is None
    assert PreparedInput([2, 7, 3], [1], [None, 0, None]).word_ids == [None, 0, None]


class Minimal:
    """The least that fills a store: the protocol's attributes and methods."""

    skips = SkipCounter()
    context_size = None
    store_name = "minimal"
    store_kind = "fake"

    def store_metadata(self):
        return {}

    def prepare_many(self, records):
        return [PreparedInput([0], [0]) for _ in records]

    def encode(self, batch):
        return np.zeros((len(batch), 1, 1), np.float32)


def test_the_protocol_is_checked_at_run_time():
    assert isinstance(Minimal(), Featurizer)
    assert not isinstance(object(), Featurizer)
    without_skips = type("WithoutSkips", (), {name: getattr(Minimal, name) for name in (
        "context_size", "store_name", "store_kind", "store_metadata", "prepare_many", "encode")})()
    assert not isinstance(without_skips, Featurizer)


def test_the_encoder_and_the_baselines_are_featurizers(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path), context_size=2)
    word_baseline = WordBaseline("prand", lambda words: np.zeros((len(words), 4), np.float32), 4,
                                 {"vectors": "rand", "seed": 0}, context_size="all", lower=True)
    for featurizer in (encoder, WordpieceBaseline("pbert", encoder), word_baseline):
        assert isinstance(featurizer, Featurizer)
    assert encoder.context_size == 2 and word_baseline.context_size is None
    assert word_baseline.store_name == "rand" and word_baseline.store_metadata()["context_size"] == "all"
