"""Attention-map similarity (Zhao et al. 2020, Fig. 7): the cosine over the real tokens' block computed by hand,
identical models at 1 everywhere, a change in one layer seen from that layer on, and the inputs as encoded."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from probing.data.sentences import Text
from probing.geometry.attention_similarity import attention_similarity, batches, encode_texts, masked_cosine

PAD = 0


def test_cosine_by_hand_over_the_real_tokens_only():
    # Sentence 0 has 2 real tokens of 3, sentence 1 all 3; one head.
    first = torch.zeros(2, 1, 3, 3)
    second = torch.zeros(2, 1, 3, 3)
    first[0, 0, :2, :2] = torch.tensor([[1.0, 0.0], [0.0, 1.0]])   # flattened (1, 0, 0, 1)
    second[0, 0, :2, :2] = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # flattened (1, 0, 1, 0)
    first[0, 0, 2, :] = first[0, 0, :, 2] = 5.0                    # padding row and column: equal and large in both,
    second[0, 0, 2, :] = second[0, 0, :, 2] = 5.0                  # so that counting them would pull the cosine to 1
    first[1, 0] = torch.eye(3)
    second[1, 0] = torch.full((3, 3), 1 / 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    cosine = masked_cosine(first, second, mask)
    # 0: dot 1, norms sqrt(2) sqrt(2) -> 1/2; 1: dot 3 x 1/3 = 1, norms sqrt(3) and 1 -> 1/sqrt(3).
    assert cosine.dtype == torch.float64 and cosine.shape == (2, 1)
    assert cosine[:, 0].tolist() == pytest.approx([0.5, 1 / math.sqrt(3)], abs=1e-7)  # 1/3 held in float32
    with_padding = masked_cosine(first, second, torch.ones(2, 3, dtype=torch.long))
    assert with_padding[0, 0] > 0.9  # what the padding would have made of sentence 0


def tiny_bert(layers: int = 3) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, attn_implementation="eager",
                        initializer_range=0.5)  # weights large enough for attention far from uniform
    return BertModel(config).eval()


def sentences(count: int = 6) -> list[dict[str, list[int]]]:
    """Token ids of sentences of different lengths (2 + 1..count pieces), [CLS]=2 ... [SEP]=3."""
    generator = torch.Generator().manual_seed(1)
    return [{"input_ids": [2, *torch.randint(5, 40, (length,), generator=generator).tolist(), 3]}
            for length in range(1, count + 1)]


def similarity(first, second, encoded, batch_size=4) -> np.ndarray:
    return attention_similarity(first, second, batches(encoded, PAD, batch_size))


def perturbed_copy(model: BertModel, layer: int) -> BertModel:
    """A copy with the query weights of transformer layer `layer` (counted from 1) changed."""
    other = copy.deepcopy(model)
    with torch.no_grad():
        query = other.encoder.layer[layer - 1].attention.self.query.weight
        query.add_(torch.randn(query.shape, generator=torch.Generator().manual_seed(2)) * 0.5)
    return other


def test_identical_models_agree_everywhere():
    model = tiny_bert()
    cosine = similarity(model, copy.deepcopy(model), sentences())
    assert cosine.shape == (3, 2)
    np.testing.assert_allclose(cosine, 1.0, rtol=0, atol=1e-12)


def test_a_changed_layer_is_below_one_and_the_layers_under_it_stay_at_one():
    model = tiny_bert()
    cosine = similarity(model, perturbed_copy(model, layer=2), sentences())
    np.testing.assert_allclose(cosine[0], 1.0, rtol=0, atol=1e-12)   # layer 1: same weights, same input
    assert (cosine[1] < 0.999).all() and (cosine[1] > 0).all()      # layer 2: its queries changed
    assert (cosine[2] < 1 - 1e-6).all()                             # layer 3: same weights, other input


def test_the_batching_and_its_padding_do_not_change_the_result():
    model = tiny_bert()
    other = perturbed_copy(model, layer=2)
    alone = similarity(model, other, sentences(), batch_size=1)  # no padding at all
    padded = similarity(model, other, sentences(), batch_size=6)  # one batch, most sentences padded
    np.testing.assert_allclose(padded, alone, rtol=0, atol=1e-5)


def test_batches_pad_on_the_right_and_sort_by_length():
    encoded = [{"input_ids": [2, 7, 8, 3], "token_type_ids": [0, 0, 1, 1]}, {"input_ids": [2, 3],
                                                                             "token_type_ids": [0, 0]}]
    (batch,) = list(batches(encoded, PAD, batch_size=2))
    assert batch["input_ids"].tolist() == [[2, 3, PAD, PAD], [2, 7, 8, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0], [0, 0, 1, 1]]


def test_words_and_text_pairs_are_encoded_and_long_ones_counted_as_cut(tiny_bert_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_path)
    texts = [Text(words=("the", "apple", "is", "healthy")),   # [CLS] + 4 + [SEP] = 6 pieces: fits exactly
             Text(text="she eats", text_pair="the apple"),     # [CLS] she eats [SEP] the apple [SEP] = 7: cut
             Text(words=("new", "york"))]
    encoded, cut = encode_texts(tokenizer, texts, max_length=6)
    assert cut == 1 and [len(item["input_ids"]) for item in encoded] == [6, 6, 4]
    assert tokenizer.convert_ids_to_tokens(encoded[0]["input_ids"]) == ["[CLS]", "the", "apple", "is", "healthy",
                                                                          "[SEP]"]
    assert encoded[1]["token_type_ids"] == [0, 0, 0, 0, 1, 1] or encoded[1]["token_type_ids"] == [0, 0, 0, 1, 1, 1]
    assert 1 in encoded[1]["token_type_ids"]
