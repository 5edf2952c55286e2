"""What fills a feature store: the `Featurizer` protocol, its prepared inputs, and the one context-window rule.

The encoder (`WordEncoder`) and the four bag-of-embeddings baselines (`WordpieceBaseline` for P-BERT/BERTw,
`WordBaseline` for P-Rand/P-static) all turn word-in-context records into vectors in two steps, so that extraction
(`probing.features.extraction`) can sort, batch, resume and store them the same way:

    prepare_many(records) -> one PreparedInput per record (None: the record cannot be represented, counted in skips)
    encode(batch of PreparedInput, dtype=float32) -> (B, num_layers, D) tensor on the CPU (extraction asks for the
        store's dtype: a device encoder casts before the copy back)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from probing.data.records import SkipCounter, WordInContext
from probing.errors import ConfigError

WHOLE_SENTENCE = "all"


@dataclass
class PreparedInput:
    """One record ready to encode: input ids (wordpieces with special tokens, or word-vocabulary ids) and the
    positions of the target's pieces among them; `word_ids`, where an attention window needs them, each piece's
    word index (None for special tokens)."""

    input_ids: list[int]
    target_pieces: list[int]
    word_ids: list[int | None] | None = None


@runtime_checkable
class Featurizer(Protocol):
    """Everything that fills a store. `store_name` (the store's folder, e.g. the model), `store_kind` and
    `context_size` (parts of its file name: the pooling or the baseline, the window) and `store_metadata()` (what
    identifies the features; a store built for other metadata is refused) say which store the features belong in."""

    skips: SkipCounter
    context_size: int | None  # words on each side of the target; None: the whole sentence

    @property
    def store_name(self) -> str: ...

    @property
    def store_kind(self) -> str: ...

    def store_metadata(self) -> dict[str, Any]: ...

    def prepare_many(self, records: Sequence[WordInContext]) -> list[PreparedInput | None]: ...

    def encode(self, batch: Sequence[PreparedInput], dtype: torch.dtype = torch.float32) -> torch.Tensor: ...


def parse_context_size(value: Any) -> int | None:
    """The `context_size` setting as featurizers take it: words on each side of the target, None for the whole
    sentence (`all` or null)."""
    if value is None or value == WHOLE_SENTENCE:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"context_size={value!r} is not a context size. Fix: context_size=0, 2, 4, 8, 16, 32 (any "
                          "number of words >= 0 on each side of the target) or context_size=all (the whole sentence)")
    return value


def context_label(context_size: int | None) -> int | str:
    """How a context size is recorded in store metadata: the number, or "all"."""
    return WHOLE_SENTENCE if context_size is None else context_size


def context_window(record: WordInContext, context_size: int | None) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The words a featurizer sees and the target's positions among them (Zhao et al. 2020 §4.3).

    The window is counted in words, before any tokenisation: `context_size` words left of the first target word
    and right of the last one (cut at the sentence edges); None keeps the whole sentence, 0 the target alone."""
    if context_size is None:
        return record.tokens, record.target
    start = max(0, record.target[0] - context_size)
    stop = record.target[-1] + context_size + 1
    return record.tokens[start:stop], tuple(position - start for position in record.target)
