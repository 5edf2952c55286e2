"""How far fine-tuning moved each attention head (Zhao et al. 2020 §4.4.2, Figure 7): the cosine similarity of two
models' self-attention weights on the same sentences, per layer and head.

See docs/geometry.md, 'Attention-map similarity'.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from probing.data.sentences import Text
from probing.errors import ConfigError
from probing.features.hf_models import EncoderInfo, load_pretrained

Loaded = tuple[PreTrainedModel, PreTrainedTokenizerFast, EncoderInfo]


def load_attention_model(name_or_path: str, revision: str | None = None, random_init: bool = False,
                         init_seed: int = 0, **weights: Any) -> Loaded:
    """An encoder loaded like any other (probing.features.hf_models.load_pretrained: frozen, float32, with what
    identifies it; a random-init encoder a function of `init_seed` alone), switched to eager attention so that
    `output_attentions=True` returns the weights."""
    model, tokenizer, info = load_pretrained(name_or_path, revision, random_init, init_seed, **weights)
    model.set_attn_implementation("eager")
    return model, tokenizer, info


def shape_of(model: PreTrainedModel) -> tuple[int, int]:
    """(transformer layers, attention heads per layer)."""
    return int(model.config.num_hidden_layers), int(model.config.num_attention_heads)


def check_comparable(first: Loaded, second: Loaded, key: str = "compare_to") -> None:
    """Refuse two models whose attention maps cannot be compared cell by cell: another tokenizer (other wordpieces,
    so other rows and columns) or another number of layers or heads. `key` is the setting that names `second`."""
    (first_model, _, first_info), (second_model, _, second_info) = first, second
    fix = f"Fix: set {key} to a model fine-tuned from {first_info.model_name} (<train run>/model of a train.py run " \
          f"of that model), or set model to the model that {key} was fine-tuned from"
    if (first_info.tokenizer_class, first_info.tokenizer_sha256) != (second_info.tokenizer_class,
                                                                       second_info.tokenizer_sha256):
        raise ConfigError(f"{key}={second_info.model_name} has another tokenizer than {first_info.model_name} "
                          f"({second_info.tokenizer_class} {second_info.tokenizer_sha256[:12]} vs "
                          f"{first_info.tokenizer_class} {first_info.tokenizer_sha256[:12]}), so their attention maps "
                          f"are over different wordpieces. {fix}")
    (layers, heads), (other_layers, other_heads) = shape_of(first_model), shape_of(second_model)
    if (layers, heads) != (other_layers, other_heads):
        raise ConfigError(f"{key}={second_info.model_name} has {other_layers} layers x {other_heads} heads, "
                          f"{first_info.model_name} {layers} x {heads}: their attention heads cannot be paired. {fix}")


def usable_max_length(requested: int | None, *models: Loaded) -> int:
    """`requested` wordpieces, or (None) the smallest limit of the models and their tokenizers; at most that limit."""
    limits = [getattr(model.config, "max_position_embeddings", None) for model, _, _ in models]
    limits += [tokenizer.model_max_length for _, tokenizer, _ in models if tokenizer.model_max_length < 1e6]
    limit = min([value for value in limits if value] or [512])
    return limit if requested is None else min(requested, limit)


def encode_texts(tokenizer: PreTrainedTokenizerFast, texts: Sequence[Text],
                 max_length: int) -> tuple[list[dict[str, list[int]]], int]:
    """Each text's wordpiece ids (with token_type_ids where the model has them), cut to `max_length`; and how many
    texts were cut."""
    encoded, cut = [], 0
    for text in texts:
        encoding = _tokenize(tokenizer, text, max_length)
        if len(encoding["input_ids"]) >= max_length and len(_tokenize(tokenizer, text, None)["input_ids"]) > max_length:
            cut += 1
        encoded.append({name: encoding[name] for name in ("input_ids", "token_type_ids") if name in encoding})
    return encoded, cut


def _tokenize(tokenizer: PreTrainedTokenizerFast, text: Text, max_length: int | None):
    cut = {"truncation": True, "max_length": max_length} if max_length is not None else {"truncation": False}
    if text.words:
        return tokenizer(list(text.words), is_split_into_words=True, **cut)
    return tokenizer(text.text, text.text_pair, **cut)


def batches(encoded: Sequence[dict[str, list[int]]], pad_token_id: int,
            batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Padded batches (right padding, attention_mask 0 on padding) of texts of similar length: sorted by length, so
    that little padding is computed."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]["input_ids"]))
    for start in range(0, len(order), batch_size):
        chosen = [encoded[i] for i in order[start:start + batch_size]]
        batch = {name: pad_sequence([torch.tensor(item[name]) for item in chosen], batch_first=True,
                                    padding_value=pad_token_id if name == "input_ids" else 0)
                 for name in chosen[0]}
        batch["attention_mask"] = pad_sequence([torch.ones(len(item["input_ids"]), dtype=torch.long)
                                                for item in chosen], batch_first=True)
        yield batch


def masked_cosine(first: torch.Tensor, second: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, H) float64: the cosine between first[b, h] and second[b, h], two (B, H, T, T) attention weight tensors,
    flattened over the block of rows and columns where attention_mask[b] (B, T) is 1 (the real tokens)."""
    real = attention_mask.bool()
    block = (real[:, None, :, None] & real[:, None, None, :]).to(first.dtype)
    a, b = first * block, second * block
    dot, first_norm, second_norm = ((x * y).sum(dim=(-2, -1), dtype=torch.float64) for x, y in ((a, b), (a, a), (b, b)))
    return dot / (first_norm.sqrt() * second_norm.sqrt()).clamp_min(torch.finfo(torch.float64).tiny)


def attentions(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> Sequence[torch.Tensor]:
    output = model(**batch, output_attentions=True, output_hidden_states=False)
    if not output.attentions or output.attentions[0] is None:
        raise ConfigError(f"{model.name_or_path} returns no attention weights (attention implementation "
                          f"{model.config._attn_implementation}). Fix: use a model whose attention can be run eager")
    return output.attentions


@torch.no_grad()
def attention_similarity(first: PreTrainedModel, second: PreTrainedModel, batches: Iterable[dict[str, torch.Tensor]],
                         device: torch.device | str = "cpu", total: int | None = None) -> np.ndarray:
    """(layers, heads): the mean over the sentences of `batches` of the cosine between the two models' attention
    maps (see masked_cosine). `total`: the number of batches, for the progress bar."""
    first.to(device)
    second.to(device)
    sums, sentences = None, 0
    for batch in tqdm(batches, total=total, desc="attention maps", unit="batch", disable=None):
        batch = {name: tensor.to(device) for name, tensor in batch.items()}
        pairs = zip(attentions(first, batch), attentions(second, batch), strict=True)
        cosines = torch.stack([masked_cosine(a, b, batch["attention_mask"]).sum(dim=0) for a, b in pairs])
        sums = cosines if sums is None else sums + cosines
        sentences += len(batch["input_ids"])
    if sums is None:
        raise ValueError("no sentences to compare")
    return (sums / sentences).cpu().numpy()
