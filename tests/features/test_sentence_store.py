"""The every-word store: each word pooled from one forward pass of its sentence (byte-level BPE words included),
the same vectors as the one-record-per-pass WordEncoder, resume after a kill, and refusal of another model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2Model, GPT2TokenizerFast

from probing.errors import StoreMismatchError
from probing.features import extraction
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.sentence_store import SentenceWordEncoder, extract_occurrences
from probing.features.store import FeatureStore
from probing.geometry.occurrences import collect_occurrences

SENTENCES = [("the", "unbelievable", "apple", "juice", "is", "healthy", "."),
             ("she", "eats", "an", "apple", "."), ("new", "york", "city", "is", "unbelievable")]


@pytest.fixture(scope="module")
def tiny_gpt2_path(tmp_path_factory) -> Path:
    """A 2-layer random GPT-2 with a byte-level BPE tokenizer trained here on a few words (so that rare words
    split into several pieces)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("tiny_gpt2")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["the apple juice is healthy", "she eats the apple", "the city is new"] * 5,
                                  trainer)
    fast = GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                             unk_token="<|endoftext|>")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(fast), n_positions=64, n_embd=16, n_layer=2, n_head=2)
    GPT2Model(config).eval().save_pretrained(out)
    return out


def hand_vectors(folder: Path, words: tuple[str, ...]) -> list[torch.Tensor]:
    """Each word's (layers, D) vector computed here: every word encoded as " word" (its leading space), the pieces
    concatenated, one forward pass, the mean of each word's pieces."""
    tokenizer = GPT2TokenizerFast.from_pretrained(folder)
    pieces = [tokenizer(" " + word, add_special_tokens=False)["input_ids"] for word in words]
    model = GPT2Model.from_pretrained(folder).eval()
    with torch.no_grad():
        states = model(torch.tensor([sum(pieces, [])]), output_hidden_states=True).hidden_states
    vectors, start = [], 0
    for word_pieces in pieces:
        stop = start + len(word_pieces)
        vectors.append(torch.stack([layer[0, start:stop].mean(0) for layer in states]))
        start = stop
    return vectors


def test_byte_level_bpe_words_are_pooled_over_their_pieces_with_leading_spaces(tiny_gpt2_path):
    tokenizer = GPT2TokenizerFast.from_pretrained(tiny_gpt2_path)
    assert len(tokenizer(" unbelievable", add_special_tokens=False)["input_ids"]) > 2  # split into pieces
    assert tokenizer.convert_ids_to_tokens(tokenizer(" apple")["input_ids"])[0].startswith("Ġ")
    encoder = SentenceWordEncoder(str(tiny_gpt2_path))
    occurrences = collect_occurrences(SENTENCES[:1])
    features = encoder.encode(encoder.prepare_many(occurrences.records()))
    expected = hand_vectors(tiny_gpt2_path, SENTENCES[0])
    for row, position in enumerate(occurrences.position):
        torch.testing.assert_close(features[row], expected[position], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["tiny_bert_path", "tiny_gpt2_path"])
def test_one_pass_per_sentence_gives_the_word_encoders_vectors(request, model):
    folder = str(request.getfixturevalue(model))
    records = collect_occurrences(SENTENCES).records()
    sentence = SentenceWordEncoder(folder)
    single = WordEncoder(folder, max_length=512)
    torch.testing.assert_close(sentence.encode(sentence.prepare_many(records)),
                               single.encode(single.prepare_many(records)), rtol=1e-4, atol=1e-5)


class Killed(Exception):
    pass


class DiesAfterFirstBatch(SentenceWordEncoder):
    def encode(self, batch, dtype=torch.float32):
        if getattr(self, "done", False):
            raise Killed
        self.done = True
        return super().encode(batch, dtype)


def test_store_resumes_and_refuses_another_model(tmp_path, tiny_bert_path, tiny_gpt2_path, monkeypatch):
    records = collect_occurrences(SENTENCES).records()
    monkeypatch.setattr(extraction, "WINDOW_BYTES", 4 * 3 * 32 * 4)  # windows of 4 rows of the tiny BERT (3 x 32)
    first = DiesAfterFirstBatch(str(tiny_bert_path))
    with pytest.raises(Killed):
        extract_occurrences(records, first, tmp_path, "toy", "all", [], dtype="float32", max_tokens_per_batch=40,
                            progress=False)
    resumed = extract_occurrences(records, SentenceWordEncoder(str(tiny_bert_path)), tmp_path, "toy", "all", [],
                                  dtype="float32", max_tokens_per_batch=40, progress=False)
    assert 0 < resumed.rows_already_done < len(records) and resumed.rows_total == len(records)
    fresh = extract_occurrences(records, SentenceWordEncoder(str(tiny_bert_path)), tmp_path / "fresh", "toy", "all",
                                [], dtype="float32", progress=False)
    with FeatureStore(resumed.path) as store, FeatureStore(fresh.path) as other:
        assert store.metadata["rows"] == "every-word" and store.metadata["num_layers"] == 3
        for layer in range(3):
            np.testing.assert_allclose(store.read_layer(layer), other.read_layer(layer), rtol=1e-5, atol=1e-6)
    with pytest.raises(StoreMismatchError, match="num_layers|weights_sha256"):
        extract_split(records, SentenceWordEncoder(str(tiny_gpt2_path)), resumed.path, class_names=["occurrence"],
                      dtype="float32", progress=False)


def test_a_store_is_identified_by_its_sentences_when_no_files_are_given(tmp_path, tiny_bert_path):
    """Without files the request holds no `data_files`, so a store that records them (as every every-word store did)
    is reused after its data file changed; a request naming the changed file is refused."""
    records, corpus = collect_occurrences(SENTENCES).records(), tmp_path / "corpus.txt"
    corpus.write_text("first version\n")
    settings = {"dtype": "float32", "progress": False}
    first = extract_occurrences(records, SentenceWordEncoder(str(tiny_bert_path)), tmp_path, "toy", "all", [corpus],
                                **settings)
    corpus.write_text("second version\n")
    reused = extract_occurrences(records, SentenceWordEncoder(str(tiny_bert_path)), tmp_path, "toy", "all", [],
                                 **settings)
    assert reused.path == first.path and (reused.rows_already_done, reused.rows_computed) == (len(records), 0)
    with pytest.raises(StoreMismatchError, match="data_files: store has"):
        extract_occurrences(records, SentenceWordEncoder(str(tiny_bert_path)), tmp_path, "toy", "all", [corpus],
                            **settings)
    fresh = extract_occurrences(records, SentenceWordEncoder(str(tiny_bert_path)), tmp_path / "fresh", "toy", "all",
                                [], **settings)
    with FeatureStore(fresh.path) as store:
        assert "data_files" not in store.metadata and store.metadata["data"] == "toy"
