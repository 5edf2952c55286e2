"""A tiny random decoder saved as a Hugging Face folder (a Llama of 3 blocks, hidden 32) with a byte-level BPE
tokenizer trained on the test sentences and the packaged STREUSLE text (so that a probe run's words are a piece or
two each), for runs that load a causal LM from a folder."""

from __future__ import annotations

from pathlib import Path

import torch

import probing

TRAINING_TEXT = ["the apple juice is healthy", "she eats the apple", "new york city is unbelievable",
                 "the party of progress and socialism", "stock rises in the air"] * 5
STREUSLE = Path(probing.__file__).parent / "resources" / "streusle"


def streusle_text() -> list[str]:
    """The words of the packaged STREUSLE files (the second column of each token line)."""
    return [line.split("\t")[1] for path in sorted(STREUSLE.glob("*.conllulex"))
            for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]


def save_tiny_llama(out: Path, layers: int = 3) -> Path:
    """`out` holding a random LlamaModel of `layers` blocks (hidden states 0..layers) and its fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast, LlamaConfig, LlamaModel

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(TRAINING_TEXT + streusle_text(), trainer)
    fast = GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                             unk_token="<|endoftext|>")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
    LlamaModel(config).eval().save_pretrained(out)
    return out
