"""Attention windows: each word attends only to the words at most k to its left and right (Zhao et al. 2020, App. C).

See docs/finetuning.md, 'Attention window' (the mask, its policies and how the model receives it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel

from probing.errors import ConfigError

WINDOW_SETTING = "features.attention_window"
POLICY_SETTING = "features.attention_policy"
POLICIES = ("sink", "positional", "blocked")  # what [CLS]/[SEP] may see and be seen by; see the module docstring
DEFAULT_POLICY = "sink"
MASK_IMPLEMENTATIONS = ("eager", "sdpa")
SPECIAL = -1  # word index of a special token in the tensor form of word ids
PADDING = -2  # word index of a padding position


def parse_attention_window(value: Any, setting: str = WINDOW_SETTING) -> int | None:
    """The attention window as given in a config: words on each side, or None for full attention."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{setting}={value!r} is not an attention window. Fix: {setting}=0, 1, 2, 4, ... (words "
                          f"each word may attend to on each side) or {setting}=null (full attention)")
    return value


def parse_attention_policy(value: Any, setting: str = POLICY_SETTING) -> str:
    """The policy for special tokens under an attention window, as given in a config (the one place it is checked)."""
    if not isinstance(value, str) or value not in POLICIES:
        raise ConfigError(f"{setting}={value!r} is not an attention policy. Fix: {setting}=sink (every word sees "
                          f"[CLS]/[SEP], they see themselves), positional ([CLS]/[SEP] are words at positions -1 and "
                          f"n) or blocked (no word sees them)")
    return value


def window_policy(window: int | None, policy: Any = DEFAULT_POLICY, setting: str = POLICY_SETTING) -> str | None:
    """The policy to record beside a window (results, saved probes): None without one, since `window=None` is the
    model's own attention under every policy (so results without a window never depend on the policy)."""
    policy = parse_attention_policy(policy, setting)
    return None if window is None else policy


def word_index_tensor(word_ids: Sequence[Sequence[int | None]], attention_mask: torch.Tensor | None = None
                      ) -> torch.Tensor:
    """(B, T) long: each position's word index, SPECIAL for None, PADDING past a list's end or where
    `attention_mask` (B, T) is 0. T is the mask's width, else the longest list."""
    width = attention_mask.shape[1] if attention_mask is not None else max((len(ids) for ids in word_ids), default=0)
    index = torch.full((len(word_ids), width), PADDING, dtype=torch.long)
    for row, ids in enumerate(word_ids):
        if len(ids) > width:
            raise ValueError(f"sequence {row} has {len(ids)} word ids, more than the mask's {width} positions")
        index[row, :len(ids)] = torch.tensor([SPECIAL if word is None else word for word in ids], dtype=torch.long)
    if attention_mask is not None:
        index[attention_mask.cpu() == 0] = PADDING
    return index


def window_mask(word_ids: Sequence[Sequence[int | None]], window: int | None,
                attention_mask: torch.Tensor | None = None, causal: bool = False,
                policy: str = DEFAULT_POLICY) -> torch.Tensor:
    """(B, 1, T, T) bool, True where the query (row) may attend to the key (column).

    `word_ids`: per sequence, each wordpiece's word index (None for special tokens), as a fast tokenizer's
    `word_ids()`; positions past a list's end, or 0 in `attention_mask` (B, T), are padding. `window`: words on
    each side, None for no limit between words. `policy`: what the special tokens see and are seen by (POLICIES).
    The rules are the module's."""
    policy = parse_attention_policy(policy, "policy")
    index = word_index_tensor(word_ids, attention_mask)
    is_word, is_special = index >= 0, index == SPECIAL
    eye = torch.eye(index.shape[1], dtype=torch.bool)
    if policy == "positional":
        position = special_positions(index)
        is_token = index >= SPECIAL
        near = (position[:, :, None] - position[:, None, :]).abs() <= window if window is not None else True
        allowed = is_token[:, :, None] & is_token[:, None, :] & near
    else:
        near = (index[:, :, None] - index[:, None, :]).abs() <= window if window is not None else True
        allowed = is_word[:, :, None] & is_word[:, None, :] & near
        if policy == "blocked":
            allowed |= is_special[:, :, None] & (index >= SPECIAL)[:, None, :]
        else:  # sink
            allowed |= is_word[:, :, None] & is_special[:, None, :]
    allowed |= eye
    if causal:
        allowed &= torch.ones_like(allowed[0], dtype=torch.bool).tril()
    return allowed[:, None]


def special_positions(index: torch.Tensor) -> torch.Tensor:
    """(B, T) long: `index` (from `word_index_tensor`) with each special token given a word position of its own,
    beside its neighbouring word: one past the last word before it ([SEP], </s>), or, where no word precedes it,
    one before the first word after it ([CLS], <s>: -1 when the words start at 0). Padding stays PADDING."""
    words = index >= 0
    before = torch.where(words, index, torch.full_like(index, -1)).cummax(dim=1).values
    beyond = int(index.max()) + 2 if index.numel() else 0  # past every word: "no word after it"
    after = torch.where(words, index, torch.full_like(index, beyond)).flip(1).cummin(dim=1).values.flip(1)
    position = torch.where(before >= 0, before + 1, after - 1)
    return torch.where(index == SPECIAL, position, index)


def as_model_mask(allowed: torch.Tensor, model: PreTrainedModel) -> torch.Tensor:
    """The boolean (B, 1, T, T) mask in the form the model's attention implementation reads, on its device."""
    implementation = _attention_implementation(model)
    allowed = allowed.to(model.device)
    if implementation == "sdpa":
        return allowed
    blocked = torch.finfo(model.dtype).min
    return torch.zeros(allowed.shape, dtype=model.dtype, device=model.device).masked_fill_(~allowed, blocked)


def model_attention_mask(model: PreTrainedModel, word_ids: Sequence[Sequence[int | None]], window: int | None,
                         attention_mask: torch.Tensor, causal: bool = False,
                         policy: str = DEFAULT_POLICY) -> torch.Tensor:
    """What to pass the model as `attention_mask`: the (B, T) padding mask itself when `window` is None (the
    model's own full attention, whatever the policy), else the windowed 4-D mask in the model's form."""
    if window is None:
        return attention_mask
    return as_model_mask(window_mask(word_ids, window, attention_mask, causal=causal, policy=policy), model)


def check_window_support(model: PreTrainedModel) -> bool:
    """Refuse (ConfigError) a model that cannot take a window mask; return whether it is causal.

    Runs the model twice on four plain tokens: without a mask, changing the last token shows whether the first
    one sees it (causal if not); with a k = 0 window, changing the first token must leave the other three
    unchanged at every layer, or the model does not obey a 4-D mask."""
    _attention_implementation(model)
    a, b, c, other = _plain_token_ids(model)
    ids = torch.tensor([[a, b, b, c], [a, b, b, other], [other, b, b, c]])
    plain = _hidden_states(model, ids[:2], None)
    causal = _same(plain[:, 0, 0], plain[:, 1, 0])
    mask = as_model_mask(window_mask([[0, 1, 2, 3]] * 2, 0, causal=causal), model)
    windowed = _hidden_states(model, ids[[0, 2]], mask)
    if not _same(windowed[:, 0, 1:], windowed[:, 1, 1:]):
        raise ConfigError(f"{type(model).__name__} does not obey a 4-D attention mask, so {WINDOW_SETTING} cannot be "
                          f"applied to it. Fix: {WINDOW_SETTING}=null, or a BERT- or RoBERTa-like encoder")
    return causal


def _attention_implementation(model: PreTrainedModel) -> str:
    implementation = model.config._attn_implementation
    if implementation not in MASK_IMPLEMENTATIONS:
        raise ConfigError(f"{WINDOW_SETTING} needs the eager or sdpa attention, but the model uses "
                          f"{implementation!r}. Fix: load it with attn_implementation='sdpa', or {WINDOW_SETTING}=null")
    return implementation


def _plain_token_ids(model: PreTrainedModel) -> list[int]:
    """Four distinct token ids that are none of the config's special ids (RoBERTa derives positions from pad)."""
    config = model.config
    special = {getattr(config, name, None) for name in ("pad_token_id", "bos_token_id", "eos_token_id",
                                                          "sep_token_id", "cls_token_id")}
    plain = [i for i in range(min(config.vocab_size, 64)) if i not in special]
    if len(plain) < 4:
        raise ConfigError(f"{type(model).__name__} has too small a vocabulary to check {WINDOW_SETTING}. "
                          f"Fix: {WINDOW_SETTING}=null")
    return plain[-4:]


def _same(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Equal up to float noise: a token that a change can reach moves by far more than 1e-5."""
    return torch.allclose(first, second, rtol=0.0, atol=1e-5)


def _hidden_states(model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """(layers, B, T, D) float32: every hidden state of one forward pass."""
    with torch.inference_mode():
        output = model(input_ids=ids.to(model.device), attention_mask=mask, output_hidden_states=True)
    return torch.stack(output.hidden_states).float()
