"""Pooling one given piece of the target (`features.pooling=token<N>`): the piece taken, by hand, and the targets too
short for it skipped and counted, not pooled from elsewhere."""

from __future__ import annotations

import pytest
import torch

from probing.data.records import WordInContext
from probing.errors import ConfigError
from probing.features.encoder import SKIP_NO_POSITION, WordEncoder, pooled_position, pooling_index


def test_the_position_is_read_from_the_pooling_name():
    assert [pooled_position(name) for name in ("token0", "token3", "token-2", "last", "mean", "tokens")] == [
        0, 3, -2, None, None, None]


def test_one_piece_is_pooled_with_weight_one():
    rows, cols, weights = pooling_index([[1, 2, 3], [4, 5]], "token-2")
    assert rows.tolist() == [0, 1] and cols.tolist() == [2, 4] and weights.tolist() == [1.0, 1.0]
    rows, cols, _ = pooling_index([[1, 2, 3], [4, 5]], "token0")
    assert cols.tolist() == [1, 4]


def test_a_target_without_the_piece_is_skipped(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path), pooling="token-3")
    long, short = (WordInContext(tuple(words), tuple(range(len(words))), "x", "c", f"f:{i}")
                   for i, words in enumerate((["the", "cat", "sat", "."], ["cat", "."])))
    prepared = encoder.prepare_many([long, short])
    assert prepared[1] is None and encoder.skips.as_dict()[SKIP_NO_POSITION]["count"] == 1
    pieces = prepared[0].target_pieces
    vectors = encoder.encode([prepared[0]])
    with torch.no_grad():
        states = encoder.model(input_ids=torch.tensor([prepared[0].input_ids])).hidden_states
    torch.testing.assert_close(vectors[0, 1], states[1][0, pieces[-3]])


def test_an_unknown_pooling_is_refused():
    with pytest.raises(ConfigError, match="token<N>"):
        WordEncoder("unused", pooling="token-x")
