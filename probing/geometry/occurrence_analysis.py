"""What the analyses of word occurrences share (analysis=contextuality, analysis=static_pc): `OccurrenceAnalysis`,
the occurrences of the words of `analysis.sentences` and their every-word feature store
(probing.features.sentence_store), which every such analysis of the same sentences, model and extraction settings
reuses, and the checks of the occurrences before and after the store is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from probing.analysis import Analysis, ModelSettings, analysis_device
from probing.data.sentences import texts_of
from probing.data.settings import require_bool, require_int
from probing.errors import ConfigError, setting
from probing.features.provision import store_root
from probing.features.sentence_store import SentenceWordEncoder, extract_occurrences
from probing.features.store import FeatureStore
from probing.geometry.occurrences import Occurrences, collect_occurrences, text_sentences, word_index

ALL_SPLITS = "all"


class OccurrenceAnalysis(Analysis):
    """An analysis of the word occurrences of `analysis.sentences` (split `all`: every split; the first
    `max_sentences`, words lower-cased when `lowercase`) of the words in at least `min_contexts` distinct sentences,
    encoded (inputs of up to `max_length` wordpieces, `max_tokens_per_batch` per batch, on `device`) into an
    every-word store of `dtype` that the analyses of the same sentences, model and extraction settings share."""

    min_contexts_floor = 1

    def __init__(self, name: str, sentences: dict[str, Any], split: str, max_sentences: int | None,
                 min_contexts: int, lowercase: bool, max_length: int, dtype: str, max_tokens_per_batch: int,
                 device: str):
        super().__init__(name, sentences, split, max_sentences)
        self.min_contexts = require_int(setting("min_contexts"), min_contexts, minimum=self.min_contexts_floor)
        self.lowercase = require_bool(setting("lowercase"), lowercase)
        self.max_length = require_int(setting("max_length"), max_length, minimum=3)
        self.max_tokens_per_batch = require_int(setting("max_tokens_per_batch"), max_tokens_per_batch, minimum=1)
        self.dtype, self.device = str(dtype), analysis_device(device)

    def sentence_words(self) -> tuple[Any, list[tuple[str, ...]]]:
        """The loaded data of `analysis.sentences` and the word sequences of `analysis.split` (all: every split)."""
        data = self.load_sentences()
        splits = list(data.splits) if self.split == ALL_SPLITS else [str(self.split)]
        texts = [text for split in splits for text in texts_of(data, split)]
        return data, text_sentences(texts[:self.max_sentences])

    def occurrences(self) -> tuple[Any, Occurrences]:
        """The loaded data and the occurrences of its words, refused (before any model or store work) when no word
        is in `min_contexts` sentences."""
        data, sentences = self.sentence_words()
        occurrences = collect_occurrences(sentences, self.lowercase)
        require_contexts(occurrences, self.min_contexts)
        return data, occurrences

    def encoder(self, model: ModelSettings) -> SentenceWordEncoder:
        return SentenceWordEncoder(model.name_or_path, max_length=self.max_length, device=str(self.device),
                                   revision=model.revision, random_init=model.random_init, init_seed=model.init_seed)

    def store(self, store_dir: str, data: Any, occurrences: Occurrences, encoder: SentenceWordEncoder) -> Path:
        """The every-word store of `occurrences` below `store_dir` (built, resumed or verified)."""
        return extract_occurrences(occurrences.records(), encoder, store_root(store_dir), data.name, str(self.split),
                                   data.files, dtype=self.dtype, max_tokens_per_batch=self.max_tokens_per_batch).path


def require_contexts(occurrences: Occurrences, min_contexts: int) -> None:
    """Refuse, before any model or store work, sentences in which no word occurs in `min_contexts` distinct ones."""
    if not word_index(occurrences, min_contexts):
        raise ConfigError(f"no word of the {len(occurrences.sentences)} sentences occurs in {min_contexts} distinct "
                          f"sentences ({setting('min_contexts')}). Fix: use more sentences "
                          f"({setting('max_sentences')}=null, {setting('split')}=all, or a larger "
                          f"{setting('sentences')}) or lower {setting('min_contexts')}")


def stored_occurrences(store: FeatureStore, occurrences: Occurrences) -> tuple[Occurrences, int]:
    """The occurrences the store holds a row for (the encoder may skip some), and how many it skipped."""
    kept = np.zeros(len(occurrences), bool)
    kept[store.row_ids()] = True
    return occurrences.subset(kept), int((~kept).sum())
