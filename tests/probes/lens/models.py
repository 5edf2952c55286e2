"""Tiny random causal LMs (Llama, GPT-2, GPT-NeoX) built from configs and saved like hub models, with a byte-level
BPE tokenizer trained on a few sentences; `trained_llama` gives one a few seconds of next-token training, so that its
layers differ in what they predict."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

SENTENCES = [
    "the cat sat on the mat .", "the dog sat on the log .", "she eats apple juice in new york city .",
    "he drinks orange juice in old york town .", "the cat eats the fish .", "the dog eats the bone .",
    "a bird sat on the tree .", "new york city is big .", "old york town is small .", "she sat on the mat .",
]
WIDTH, LAYERS = 32, 3


def tokenizer() -> PreTrainedTokenizerFast:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(SENTENCES, vocab_size=200, min_frequency=1, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>")


def config_of(architecture: str, vocab_size: int):
    special = {"bos_token_id": 0, "eos_token_id": 0}
    if architecture == "llama":
        return LlamaConfig(vocab_size=vocab_size, hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=LAYERS,
                           num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128, **special)
    if architecture == "gpt2":
        return GPT2Config(vocab_size=vocab_size, n_embd=WIDTH, n_layer=LAYERS, n_head=2, n_positions=128, **special)
    return GPTNeoXConfig(vocab_size=vocab_size, hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=LAYERS,
                         num_attention_heads=2, max_position_embeddings=128, **special)


MODELS = {"llama": LlamaForCausalLM, "gpt2": GPT2LMHeadModel, "gpt_neox": GPTNeoXForCausalLM}


def save_causal_lm(folder: Path, architecture: str, seed: int = 0, train_steps: int = 0) -> Path:
    """A random `architecture` (llama, gpt2, gpt_neox) saved to `folder` with its tokenizer; `train_steps` steps of
    Adam on SENTENCES first."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    model = MODELS[architecture](config_of(architecture, len(tok)))
    if train_steps:
        train(model, tok, train_steps)
    model.eval().save_pretrained(folder)
    return folder


def train(model: PreTrainedModel, tok: PreTrainedTokenizerFast, steps: int) -> None:
    batch = tok(SENTENCES, padding=True, return_tensors="pt") if tok.pad_token else None
    if batch is None:
        tok.pad_token = tok.eos_token
        batch = tok(SENTENCES, padding=True, return_tensors="pt")
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
