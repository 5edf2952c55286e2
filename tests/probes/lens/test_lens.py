"""The lenses of a causal LM: bits are nats / ln 2 (by hand, two tokens); the top layer's logit lens, and the tuned lens
initialised to the identity, equal the model's own cross-entropy as Hugging Face computes it from labels (Llama,
GPT-2, GPT-NeoX); training lowers a middle layer's held-out cross-entropy below the logit lens's; the held-out split
is seeded; encoders are told apart from causal LMs by their config."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, BertConfig, GPT2Config, LlamaConfig

from probing.features.hf_models import load_pretrained
from probing.probes.lens.analysis import encode, padded, split_sentences
from probing.probes.lens.readout import Readout, is_causal_lm
from probing.probes.lens.scoring import bits, cross_entropy_nats, score
from probing.probes.lens.tuned import TunedLens, TunedLensTraining, fit
from tests.probes.lens.models import LAYERS, SENTENCES, save_causal_lm

CPU = torch.device("cpu")


def test_bits_are_nats_over_ln_2_on_two_tokens():
    # token 1 gets p = 1/2 (logits log 1, log 1: two equal choices), token 2 gets p = 1/8 (1 against 7 equal others)
    logits = torch.tensor([[0.0, 0.0, -1e9, -1e9, -1e9, -1e9, -1e9, -1e9], [0.0] * 8])
    nats = cross_entropy_nats(logits, torch.tensor([1, 5]))
    assert float(nats) == pytest.approx(math.log(2) + math.log(8))
    assert bits(float(nats) / 2) == pytest.approx((1 + 3) / 2)  # 1 bit and 3 bits: 2 bits per token


def hf_bits_per_token(model, tokenizer, texts: list[str]) -> float:
    """The model's own cross-entropy, text by text through Hugging Face's loss with labels, weighted by the tokens
    each text predicts, in bits."""
    nats, tokens = 0.0, 0
    for text in texts:
        ids = torch.tensor([encode(tokenizer, [text], 128)[0]])
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids).loss
        nats += float(loss) * (ids.shape[1] - 1)
        tokens += ids.shape[1] - 1
    return nats / tokens / math.log(2)


@pytest.mark.parametrize("architecture", ["llama", "gpt2", "gpt_neox"])
def test_the_top_layer_read_by_either_lens_is_the_models_own_cross_entropy(tmp_path, architecture):
    folder = save_causal_lm(tmp_path / architecture, architecture)
    model, tokenizer, info = load_pretrained(str(folder), causal_lm_head=True)
    lens = TunedLens(info.num_layers, info.hidden_size)
    texts = SENTENCES[:5]
    # batches of 3 sentences of unequal lengths: right padding must not count
    scores = score(model, Readout.of(model), lens, DataLoader(encode(tokenizer, texts, 128), batch_size=3,
                                                              collate_fn=padded(tokenizer)), CPU).per_token()
    independent = AutoModelForCausalLM.from_pretrained(folder).eval()
    expected = hf_bits_per_token(independent, tokenizer, texts)
    top = scores["layers"][-1]
    assert len(scores["layers"]) == LAYERS + 1 and top["layer"] == LAYERS
    assert top["logit_lens_bits"] == pytest.approx(expected, rel=1e-5)
    assert top["tuned_lens_bits"] == pytest.approx(expected, rel=1e-5)
    assert scores["model_bits"] == pytest.approx(expected, rel=1e-5)
    assert top["logit_lens_kl_bits"] == pytest.approx(0.0, abs=1e-6)
    # untrained (every map the identity), the tuned lens is the logit lens at every layer
    for row in scores["layers"]:
        assert row["tuned_lens_bits"] == pytest.approx(row["logit_lens_bits"], rel=1e-9)
    # a lower layer is not read as the top one: the lens differs there
    assert scores["layers"][1]["logit_lens_kl_bits"] > 1e-5
    assert scores["tokens"] == sum(len(ids) - 1 for ids in encode(tokenizer, texts, 128))


def test_training_lowers_a_middle_layers_held_out_cross_entropy_below_the_logit_lens(tmp_path):
    torch.manual_seed(0)
    folder = save_causal_lm(tmp_path / "trained", "llama", train_steps=150)
    model, tokenizer, info = load_pretrained(str(folder), causal_lm_head=True)
    readout = Readout.of(model)
    encoded = encode(tokenizer, SENTENCES, 128)
    train, held_out = split_sentences(len(encoded), 0.3, seed=0)
    lens = TunedLens(info.num_layers, info.hidden_size)
    epochs = 30
    training = TunedLensTraining(model, readout, lens, lr=0.1, momentum=0.9, weight_decay=1e-3, clip=1.0,
                                 total_steps=epochs * 2)
    fit(training, DataLoader([encoded[i] for i in train], batch_size=4, shuffle=True, collate_fn=padded(tokenizer),
                             generator=torch.Generator().manual_seed(0)), epochs, CPU)
    rows = score(model, readout, lens, DataLoader([encoded[i] for i in held_out], batch_size=4,
                                                  collate_fn=padded(tokenizer)), CPU).per_token()["layers"]
    middle = rows[LAYERS // 2]
    assert middle["tuned_lens_bits"] < middle["logit_lens_bits"] - 0.1
    assert middle["tuned_lens_kl_bits"] < middle["logit_lens_kl_bits"]
    assert rows[-1]["tuned_lens_bits"] == rows[-1]["logit_lens_bits"]  # the top layer has no map to train
    # its training KL went down, epoch by epoch, at every layer with a map
    assert len(training.epoch_kl) == epochs
    assert all(last < first for first, last in zip(training.epoch_kl[0], training.epoch_kl[-1]))


def test_the_held_out_sentences_are_drawn_with_the_seed():
    train, held_out = split_sentences(10, 0.2, seed=3)
    assert len(held_out) == 2 and sorted(train + held_out) == list(range(10))
    assert split_sentences(10, 0.2, seed=3) == (train, held_out)
    assert {tuple(split_sentences(10, 0.2, seed=seed)[1]) for seed in range(5)} != {tuple(held_out)}
    assert split_sentences(3, 0.01, seed=0)[1] != [] and split_sentences(3, 0.99, seed=0)[0] != []


def test_causal_lms_are_told_apart_from_encoders_by_their_config():
    assert is_causal_lm(LlamaConfig()) and is_causal_lm(GPT2Config())
    assert not is_causal_lm(BertConfig())
    assert is_causal_lm(BertConfig(is_decoder=True))
