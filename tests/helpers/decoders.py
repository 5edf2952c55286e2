"""Tiny random causal LMs saved like hub models, each with a tiny tokenizer built with the `tokenizers` library: a
byte-level BPE (GPT-2, Qwen2, GPT-NeoX style) or a SentencePiece-style BPE on "▁"-marked words (Llama, Gemma style,
with a <s> prefix)."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    GemmaConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

# Words of the tests that are not in it ("unbelievably") are cut into several pieces.
CORPUS = ["the cat sat on the mat .", "she eats airheads and very sweet things .",
          "a dog ran in the park yesterday .", "we saw them there .", "but usually she is lucky ."] * 5
HIDDEN, LAYERS = 32, 2


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>")


def sentencepiece_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"])
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def config_of(architecture: str, vocab_size: int):
    small = {"vocab_size": vocab_size, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
             "intermediate_size": 64, "max_position_embeddings": 64}
    if architecture == "llama":
        return LlamaConfig(**small, num_key_value_heads=2)
    if architecture == "qwen2":
        return Qwen2Config(**small, num_key_value_heads=2)
    if architecture == "gemma":
        return GemmaConfig(**small, num_key_value_heads=1, head_dim=8)
    if architecture == "gpt_neox":
        return GPTNeoXConfig(**small)
    if architecture == "gpt2":
        return GPT2Config(vocab_size=vocab_size, n_embd=HIDDEN, n_layer=LAYERS, n_head=4, n_positions=64,
                          bos_token_id=0, eos_token_id=0)
    raise ValueError(architecture)


# The tokenizer each family ships with: SentencePiece for Llama and Gemma, byte-level BPE for the others.
TOKENIZER_OF = {"llama": "sentencepiece", "gemma": "sentencepiece", "qwen2": "byte_level", "gpt_neox": "byte_level",
                "gpt2": "byte_level"}


def save_tiny_decoder(folder: Path, architecture: str, seed: int = 0) -> Path:
    """A 2-layer random causal LM (hidden 32, its LM head included) and its tokenizer, saved to `folder`."""
    tokenizer = sentencepiece_tokenizer() if TOKENIZER_OF[architecture] == "sentencepiece" else byte_level_tokenizer()
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config_of(architecture, len(tokenizer))).eval().save_pretrained(folder)
    return folder
