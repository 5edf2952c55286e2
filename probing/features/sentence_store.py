"""Every word of every sentence in one feature store: the store kind of the geometry analyses (Ethayarajh 2019).

See docs/features.md, 'Every-word stores (geometry)'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from probing.data.records import SkipCounter, WordInContext
from probing.features.encoder import PreparedInput, WordEncoder, in_dtype, pooling_index
from probing.features.extraction import ExtractionReport, extract_split
from probing.features.sites import RESIDUAL
from probing.features.store import data_files_entry, records_fingerprint, store_path

EVERY_WORD = "every-word"


class SentenceWordEncoder(WordEncoder):
    """A `WordEncoder` (whole-sentence context, full attention) that encodes each distinct sentence of a batch
    once and pools all its words."""

    collate = None  # its own `encode` (one forward per distinct sentence) is what extraction calls for each batch

    def __init__(self, name_or_path: str, pooling: str = "mean", max_length: int = 512, device: str = "cpu",
                 revision: str | None = None, random_init: bool = False, init_seed: int = 0,
                 layers: Sequence[int] | None = None, site: str = RESIDUAL):
        super().__init__(name_or_path, pooling=pooling, max_length=max_length, context_size=None, device=device,
                         revision=revision, random_init=random_init, init_seed=init_seed, layers=layers, site=site)

    @classmethod
    def sharing(cls, encoder: WordEncoder) -> SentenceWordEncoder:
        """`encoder`'s loaded model, tokenizer and settings (whole-sentence context, full attention), encoding each
        distinct sentence of a batch once."""
        if encoder.context_size is not None or encoder.attention_window is not None:
            raise ValueError("a sentence encoder needs the whole sentence as context and full attention")
        shared = cls.__new__(cls)
        shared.__dict__.update(vars(encoder))
        shared.skips = SkipCounter()
        return shared

    @property
    def store_kind(self) -> str:
        return f"{self.pooling}.{EVERY_WORD}{self.forward_tags}"

    def store_metadata(self) -> dict:
        return {**super().store_metadata(), "rows": EVERY_WORD}

    def encode(self, batch: Sequence[PreparedInput], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(B, len(layers), hidden) on CPU: each record's pooled word, one forward pass per distinct input (summed in
        float32, cast to `dtype` on the device as `WordEncoder.encode` does)."""
        if not batch:
            return torch.empty(0, len(self.layers), self.info.hidden_size, dtype=dtype)
        distinct: dict[tuple[int, ...], int] = {}
        owner = torch.tensor([distinct.setdefault(tuple(prepared.input_ids), len(distinct)) for prepared in batch])
        inputs = [torch.tensor(ids) for ids in distinct]
        input_ids = pad_sequence(inputs, batch_first=True, padding_value=self.tokenizer.pad_token_id)
        input_ids = nn.functional.pad(input_ids, (0, self.padded_width(input_ids.shape[1]) - input_ids.shape[1]),
                                      value=self.tokenizer.pad_token_id)
        lengths = torch.tensor([len(ids) for ids in inputs])
        attention_mask = (torch.arange(input_ids.shape[1]) < lengths[:, None]).long()
        rows, cols, weights = pooling_index([prepared.target_pieces for prepared in batch], self.pooling)
        with torch.inference_mode():
            states = self.hidden_states(input_ids, attention_mask)
            sources, cols = owner[rows].to(self.device), cols.to(self.device)
            pieces = torch.stack([layer[sources.to(layer.device), cols.to(layer.device)].to(self.device)  # a sharded
                                  for layer in states], dim=1).float()  # model's layers are on several devices
            pooled = torch.zeros(len(batch), *pieces.shape[1:], dtype=pieces.dtype, device=pieces.device)
            pooled.index_add_(0, rows.to(self.device), pieces * weights.to(self.device)[:, None, None])
        return in_dtype(pooled, dtype).cpu()


def sentence_encoder_of(encoder: Any) -> Any:
    """For every-word stores, the encoder that runs each distinct sentence once and pools all its words (the same
    vectors, one forward pass per sentence instead of one per word), where the context is the whole sentence under
    full attention; any other featurizer as it is (context windows and attention masks are per word)."""
    if isinstance(encoder, WordEncoder) and encoder.context_size is None and encoder.attention_window is None:
        return SentenceWordEncoder.sharing(encoder)
    return encoder


def extract_occurrences(records: Sequence[WordInContext], encoder: SentenceWordEncoder, store_dir: str | Path,
                        data_name: str, split: str, files: Sequence[Path], *, dtype: str = "float16",
                        max_tokens_per_batch: int = 65536, extra: Mapping[str, Any] | None = None,
                        progress: bool = True) -> ExtractionReport:
    """Fill (or resume, or verify) the every-word store of `records` below `store_dir`; a store built for another
    model, layer count, pooling or sentence set is refused (StoreMismatchError). `files`: the data files whose hashes
    the store must match (`data_files`); none where the records identify the data, as their fingerprint does for the
    sentences (a store recording files is then reused whatever they hold now)."""
    fingerprint = records_fingerprint(records)
    path = store_path(store_dir, encoder.store_name, data_name, split, encoder.store_kind, None, fingerprint, dtype)
    metadata = {"data": data_name, "split": split, **data_files_entry(files), **(extra or {})}
    return extract_split(records, encoder, path, class_names=[records[0].sclass] if records else [],
                         metadata_extra=metadata, dtype=dtype, max_tokens_per_batch=max_tokens_per_batch,
                         progress=progress, records_sha256=fingerprint)
