"""Bag-of-embeddings baselines (Zhao et al. 2020 §4.2.1): P-BERT, BERTw, P-Rand and P-static, checked by hand."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
import torch
from transformers import BertModel

from probing.data.records import WordInContext
from probing.errors import ConfigError
from probing.features.baselines import (
    WordpieceBaseline,
    check_baseline,
    input_embedding_matrix,
    mean_rows,
    oov_summary,
    rand_baseline,
    static_baseline,
    static_file_baseline,
)
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.static_embeddings import read_static_embeddings, seeded_normal_vectors
from probing.features.store import FeatureStore
from tests.helpers import FIXTURES, TINY_VOCAB

EMBEDDINGS = FIXTURES / "embeddings"
CLASSES = ["food", "organization", "plant"]
ID = {piece: index for index, piece in enumerate(TINY_VOCAB)}


def record(tokens, target, sclass="food", source="toy:1") -> WordInContext:
    target = (target,) if isinstance(target, int) else tuple(target)
    word = "_".join(tokens[i] for i in target).lower()
    return WordInContext(tuple(tokens), target, word, sclass, source)


def encode_one(featurizer, rec: WordInContext) -> torch.Tensor:
    """(D,) the featurizer's vector of one record."""
    [prepared] = featurizer.prepare_many([rec])
    features = featurizer.encode([prepared])
    assert features.shape == (1, 1, features.shape[-1])
    return features[0, 0]


# --- P-BERT / BERTw over the tiny BERT's input embeddings ---------------------------------------------------------

@pytest.fixture(scope="module")
def input_rows(tiny_bert_path) -> torch.Tensor:
    """The tiny BERT's wordpiece input embeddings, read straight from the model (not through the baseline)."""
    return BertModel.from_pretrained(tiny_bert_path).get_input_embeddings().weight.detach().float()


@pytest.fixture(scope="module")
def encoder(tiny_bert_path) -> WordEncoder:
    return WordEncoder(str(tiny_bert_path))


def mean_of_pieces(rows: torch.Tensor, pieces: list[str]) -> torch.Tensor:
    return rows[[ID[piece] for piece in pieces]].mean(dim=0)


def test_pbert_is_the_mean_of_every_non_special_wordpiece_of_the_sentence(encoder, input_rows):
    rec = record(["She", "eats", "Airheads", "."], 1)
    expected = mean_of_pieces(input_rows, ["she", "eats", "air", "##head", "##s", "."])  # no [CLS] / [SEP]
    torch.testing.assert_close(encode_one(WordpieceBaseline("pbert", encoder), rec), expected)
    with_specials = mean_of_pieces(input_rows, ["[CLS]", "she", "eats", "air", "##head", "##s", ".", "[SEP]"])
    assert not torch.allclose(expected, with_specials, atol=1e-3)


def test_bertw_is_the_mean_of_the_target_pieces_whatever_the_context(encoder, input_rows):
    bertw = WordpieceBaseline("bertw", encoder)
    first = encode_one(bertw, record(["She", "eats", "Airheads", "."], 2))
    second = encode_one(bertw, record(["airheads", "in", "new", "york", "city"], 0))
    torch.testing.assert_close(first, mean_of_pieces(input_rows, ["air", "##head", "##s"]))
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    multiword = encode_one(bertw, record(["she", "eats", "in", "new", "york", "city"], [3, 4]))
    torch.testing.assert_close(multiword, mean_of_pieces(input_rows, ["new", "york"]))


def test_pbert_context_size_limits_the_window(tiny_bert_path, input_rows):
    rec = record(["the", "apple", "juice", "is", "healthy", "."], 2)
    one = WordpieceBaseline("pbert", WordEncoder(str(tiny_bert_path), context_size=1))
    torch.testing.assert_close(encode_one(one, rec), mean_of_pieces(input_rows, ["apple", "juice", "is"]))
    zero = WordEncoder(str(tiny_bert_path), context_size=0)
    alone = encode_one(WordpieceBaseline("pbert", zero), rec)
    torch.testing.assert_close(alone, encode_one(WordpieceBaseline("bertw", zero), rec), rtol=0, atol=0)
    torch.testing.assert_close(alone, input_rows[ID["juice"]])


def test_pbert_window_is_cut_to_max_length_around_the_target(tiny_bert_path, input_rows):
    # max_length 5 - [CLS] - [SEP] = 3 pieces, centred on "juice": apple juice is
    short = WordpieceBaseline("pbert", WordEncoder(str(tiny_bert_path), max_length=5))
    rec = record(["the", "apple", "juice", "is", "healthy", "."], 2)
    torch.testing.assert_close(encode_one(short, rec), mean_of_pieces(input_rows, ["apple", "juice", "is"]))


def test_wordpiece_baseline_metadata(encoder):
    pbert = WordpieceBaseline("pbert", encoder)
    metadata = pbert.store_metadata()
    assert metadata["baseline"] == "pbert" and metadata["num_layers"] == 1 and metadata["hidden_size"] == 32
    assert metadata["context_size"] == "all" and metadata["pooling"] == "mean"
    assert metadata["weights_sha256"] == encoder.info.weights_sha256
    assert (pbert.store_name, pbert.store_kind) == (encoder.store_name, "pbert")
    assert WordpieceBaseline("bertw", encoder).store_metadata()["baseline"] == "bertw"
    with pytest.raises(ValueError, match="kind must be one of"):
        WordpieceBaseline("prand", encoder)


def test_wordpiece_baselines_of_a_windowed_encoder_share_the_store_of_the_plain_one(encoder, tiny_bert_path):
    """P-BERT never runs the model: the encoder's attention window and policy stay out of its metadata."""
    windowed = WordEncoder(str(tiny_bert_path), attention_window=2, attention_policy="sink")
    assert WordpieceBaseline("pbert", windowed).store_metadata() == WordpieceBaseline("pbert", encoder).store_metadata()


def test_target_word_that_is_unk_is_the_unk_row(encoder, input_rows):
    [prepared] = WordpieceBaseline("bertw", encoder).prepare_many([record(["she", "eats", "qqq"], 2)])
    # kept: the word is what BERT sees, the [UNK] row
    torch.testing.assert_close(WordpieceBaseline("bertw", encoder).encode([prepared])[0, 0], input_rows[ID["[UNK]"]])


def test_pbert_extraction_writes_a_one_layer_store_of_the_baseline_vectors(encoder, input_rows, tmp_path):
    records = [record(["She", "eats", "Airheads", "."], 2, "food", "toy:1"),
               record(["the", "apple", "juice", "is", "healthy"], 1, "food", "toy:2"),
               record(["apple", "stock", "rises"], 0, "organization", "toy:3"),
               record(["larch", "and", "pine", "and", "oak"], 2, "plant", "toy:4")]
    pbert = WordpieceBaseline("pbert", encoder)
    path = tmp_path / "train.pbert.h5"
    report = extract_split(records, pbert, path, class_names=CLASSES, dtype="float32", progress=False,
                           max_tokens_per_batch=8)
    assert (report.rows_computed, report.rows_skipped) == (4, 0)
    with FeatureStore(path) as store:
        assert store.num_layers == 1 and store.hidden_size == 32
        assert store.metadata["baseline"] == "pbert"
        stored = torch.from_numpy(store.read_layer(0))
    expected = pbert.encode(pbert.prepare_many(records))[:, 0]
    torch.testing.assert_close(stored, expected, rtol=0, atol=0)
    torch.testing.assert_close(stored[2], mean_of_pieces(input_rows, ["apple", "stock", "rises"]))


def test_model_without_input_embeddings_points_to_the_word_level_baselines(tiny_bert_path, monkeypatch):
    encoder = WordEncoder(str(tiny_bert_path))

    def no_embeddings():
        raise NotImplementedError

    monkeypatch.setattr(encoder.model, "get_input_embeddings", no_embeddings)
    with pytest.raises(ConfigError, match="no input embedding matrix.*baseline=prand"):
        input_embedding_matrix(encoder)
    with pytest.raises(ConfigError, match=str(tiny_bert_path)):
        WordpieceBaseline("bertw", encoder)


# --- mean_rows and check_baseline ---------------------------------------------------------------------------------

def test_mean_rows_by_hand():
    matrix = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [-7.0, 8.0]])
    means = mean_rows(matrix, [[0, 1], [3], [2, 2, 0]])
    assert means.shape == (3, 1, 2) and means.dtype == torch.float32
    torch.testing.assert_close(means[:, 0], torch.tensor([[2.0, 3.0], [-7.0, 8.0], [11 / 3, 14 / 3]]))


def test_check_baseline_lists_the_names():
    assert check_baseline("pstatic") == "pstatic"
    with pytest.raises(ConfigError, match=r"'nope'.*baseline=prand, pstatic, bertw, pbert"):
        check_baseline("nope")


# --- P-Rand --------------------------------------------------------------------------------------------------------

def test_window_words_are_lower_cased_for_prand_and_counted_in_words():
    rec = record(["A", "big", "New", "York", "City", "party", "."], [2, 3])
    assert rand_baseline(4, 0, None).window_words(rec) == (["a", "big", "new", "york", "city", "party", "."], [2, 3])
    assert rand_baseline(4, 0, 1).window_words(rec) == (["big", "new", "york", "city"], [1, 2])
    assert rand_baseline(4, 0, 0).window_words(rec) == (["new", "york"], [0, 1])
    assert rand_baseline(4, 0, 9).window_words(rec)[0] == ["a", "big", "new", "york", "city", "party", "."]


@pytest.mark.parametrize("dim, seed, message", [
    (0, 0, "representation.rand_dim=0 is not an integer >= 1"),   # was a ValueError once the first batch was drawn
    (2.5, 0, "representation.rand_dim=2.5 is not an integer >= 1"),
    (4, 0.5, "representation.rand_seed=0.5 is not an integer"),
])
def test_prand_refuses_a_dimension_or_seed_that_is_no_count(dim, seed, message):
    with pytest.raises(ConfigError, match=rf"^{re.escape(message)}\. Fix:"):
        rand_baseline(dim, seed, None)


def test_pstatic_refuses_an_oov_seed_that_is_no_integer(tmp_path):
    with pytest.raises(ConfigError, match=r"^representation\.oov_seed=1\.5 is not an integer\. Fix:"):
        static_file_baseline(str(tmp_path / "vectors.txt"), "glove", 1.5, None)


def test_prand_single_word_is_its_seeded_vector():
    vector = encode_one(rand_baseline(5, 7, None), record(["Apple"], 0))
    torch.testing.assert_close(vector, torch.from_numpy(seeded_normal_vectors(["apple"], 5, 7)[0]))


def test_new_words_get_consecutive_vocabulary_ids():
    baseline = rand_baseline(3, 0, None)
    baseline.prepare_many([record(["The", "apple", "is", "red"], 1)])
    assert baseline.vocabulary == {"the": 0, "apple": 1, "is": 2, "red": 3}


def test_prand_is_the_mean_of_the_seeded_vectors_of_the_window_words():
    rec = record(["The", "apple", "juice", "is", "healthy"], 2)
    whole = encode_one(rand_baseline(6, 3, None), rec)
    expected = seeded_normal_vectors(["the", "apple", "juice", "is", "healthy"], 6, 3).mean(axis=0)
    torch.testing.assert_close(whole, torch.from_numpy(expected))
    window = encode_one(rand_baseline(6, 3, 1), rec)
    torch.testing.assert_close(window, torch.from_numpy(seeded_normal_vectors(["apple", "juice", "is"], 6, 3)
                                                        .mean(axis=0)))


def test_prand_vocabulary_growth_keeps_earlier_vectors():
    baseline = rand_baseline(4, 0, 0)  # context 0: the vector is the target word's own vector
    first = baseline.prepare_many([record(["she", "eats", "apple"], 2), record(["Juice", "is", "healthy"], 0)])
    before = baseline.encode(first).clone()
    second = baseline.prepare_many([record(["larch", "pine", "oak", "apple"], 3), record(["new", "JUICE"], 1)])
    after = baseline.encode(second)
    torch.testing.assert_close(after, before, rtol=0, atol=0)  # same words, same vectors
    torch.testing.assert_close(before[:, 0], torch.from_numpy(seeded_normal_vectors(["apple", "juice"], 4, 0)))
    assert baseline.encode(first).equal(before)  # the first call's ids still point to the same rows


def test_prand_extraction_writes_a_one_layer_store_of_the_baseline_vectors(tmp_path):
    records = [record(["she", "eats", "apple"], 2, "food", "toy:1"), record(["Apple", "stock"], 0, "organization",
                                                                             "toy:2")]
    baseline = rand_baseline(3, 1, None)
    extract_split(records, baseline, tmp_path / "s.h5", class_names=CLASSES, dtype="float32", progress=False)
    with FeatureStore(tmp_path / "s.h5") as store:
        assert store.num_layers == 1 and store.metadata["rand_seed"] == 1
        stored = store.read_layer(0)
    vectors = seeded_normal_vectors(["she", "eats", "apple", "stock"], 3, 1)
    np.testing.assert_allclose(stored, [vectors[:3].mean(axis=0), vectors[2:].mean(axis=0)], rtol=1e-6)


def test_prand_metadata():
    assert rand_baseline(8, 5, None).store_metadata() == {
        "vectors": "rand-d8-seed5", "rand_dim": 8, "rand_seed": 5, "baseline": "prand", "context_size": "all",
        "num_layers": 1, "hidden_size": 8}
    assert rand_baseline(8, 5, 2).store_metadata()["context_size"] == 2
    assert (rand_baseline(8, 5, 2).store_name, rand_baseline(8, 5, 2).store_kind) == ("rand-d8-seed5", "prand")


# --- P-static ------------------------------------------------------------------------------------------------------

@pytest.fixture
def word2vec():
    """4 words x 3 dims: apple .1 .2 .3 / Paris 1 -2 3.5 / new_york 0 0 1 / the -.5 .25 0."""
    return read_static_embeddings(EMBEDDINGS / "word2vec.txt")


def test_pstatic_single_known_word_is_its_file_vector(word2vec):
    vector = encode_one(static_baseline(word2vec, 0, None), record(["Paris"], 0))
    torch.testing.assert_close(vector, torch.tensor([1.0, -2.0, 3.5]))


def test_pstatic_is_the_mean_of_the_file_vectors_of_the_window(word2vec):
    # "The" -> "the" (lower-cased fallback); "apple" and "Paris" as written
    vector = encode_one(static_baseline(word2vec, 0, None), record(["The", "apple", "Paris"], 1))
    torch.testing.assert_close(vector, torch.tensor([(-0.5 + 0.1 + 1) / 3, (0.25 + 0.2 - 2) / 3, (0.3 + 3.5) / 3]))


def test_pstatic_oov_word_gets_its_seeded_vector(word2vec):
    baseline = static_baseline(word2vec, 11, None)
    vector = encode_one(baseline, record(["apple", "from", "Paris"], 0))
    oov = seeded_normal_vectors(["from"], 3, 11)[0]
    expected = (np.array([0.1, 0.2, 0.3]) + oov + np.array([1.0, -2.0, 3.5])) / 3
    torch.testing.assert_close(vector, torch.from_numpy(expected.astype(np.float32)))


def test_pstatic_oov_alone_is_seeded_by_the_oov_seed(word2vec):
    alone = encode_one(static_baseline(word2vec, 11, None), record(["from"], 0))
    torch.testing.assert_close(alone, torch.from_numpy(seeded_normal_vectors(["from"], 3, 11)[0]))
    other_seed = encode_one(static_baseline(word2vec, 12, None), record(["from"], 0))
    assert not torch.allclose(alone, other_seed)


def test_oov_summary_counts_types_and_tokens(word2vec):
    summary = oov_summary(word2vec, ["The", "apple", "from", "Paris", "from", "xyz", "apple"])
    assert summary == {"types": 5, "oov_types": 2, "tokens": 7, "oov_tokens": 3, "oov_examples": ["from", "xyz"]}


def test_pstatic_metadata_identifies_the_file(word2vec):
    sha256 = hashlib.sha256((EMBEDDINGS / "word2vec.txt").read_bytes()).hexdigest()
    baseline = static_baseline(word2vec, 4, 3)
    assert baseline.store_metadata() == {
        "vectors": f"static-word2vec-{sha256[:10]}", "embeddings_name": "word2vec", "embeddings_sha256": sha256,
        "oov_seed": 4,
        "baseline": "pstatic", "context_size": 3, "num_layers": 1, "hidden_size": 3}
    assert static_baseline(word2vec, 4, None).store_metadata()["context_size"] == "all"
    assert baseline.static is word2vec and baseline.store_kind == "pstatic"
