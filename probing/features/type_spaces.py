"""Type-level (uncontextualized) probing, Zhao et al. 2020 §3.2.1, §4.2.1, Fig. 1 and Table 5.

See docs/probing.md, 'Type-level probing'.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from probing.data.settings import require_int
from probing.data.types import TypeLevelData, WordTypes
from probing.errors import ConfigError, setting
from probing.features.baselines import input_embedding_matrix, mean_rows
from probing.features.encoder import WordEncoder
from probing.features.static_embeddings import read_static_embeddings, seeded_normal_vectors
from probing.features.store import FeatureStore
from probing.vocabulary import BASELINE_LABELS, RAND

log = logging.getLogger(__name__)

# What a space returns: the data (words without a vector left out), split -> (words, D) vectors, and notes for
# results.json (OOV counts, file hashes...).
SpaceVectors = tuple[TypeLevelData, dict[str, np.ndarray], dict[str, Any]]


class RandSpace:
    """Rand: one N(0, I_dim) vector per word, fixed by (seed, word)."""

    def __init__(self, name: str = "rand", label: str = RAND, dim: int = 300, seed: int = 0):
        self.name, self.label = name, label
        self.dim, self.seed = require_int("embeddings.dim", dim, minimum=1), require_int("embeddings.seed", seed)

    def vectors(self, data: TypeLevelData) -> SpaceVectors:
        return data, {split: seeded_normal_vectors(types.words, self.dim, self.seed)
                      for split, types in data.splits.items()}, {}


class StaticSpace:
    """A word2vec/GloVe text file; words missing from it get N(0, I) vectors fixed by (oov_seed, word)."""

    def __init__(self, path: str | None, name: str = "static", label: str = "static", oov_seed: int = 0):
        if not path:
            raise ConfigError(f"embeddings={name} needs the embedding file. Fix: add "
                              f"{setting('path')}=/path/to/vectors.txt (word2vec or GloVe text format, .gz allowed)")
        self.path, self.name, self.label = Path(path), name, label
        self.oov_seed = require_int(setting("oov_seed"), oov_seed)

    def vectors(self, data: TypeLevelData) -> SpaceVectors:
        """Every split's words looked up in the file; OOV words counted (per split)."""
        static = read_static_embeddings(self.path, name=self.name)
        vectors, oov = {}, {}
        for split, types in data.splits.items():
            vectors[split], missing = static.lookup(types.words, self.oov_seed)
            oov[split] = {"words": len(types.words), "oov_words": len(missing), "oov_examples": missing[:10]}
            log.info("%s %s: %d of %d words are not in %s (random vectors)", data.name, split, len(missing),
                     len(types.words), static.path)
        return data, vectors, {"oov": oov, "embeddings_sha256": static.sha256, "dim": static.dim}


class BertwSpace:
    """BERTw: the mean input embedding of each word's wordpieces (no special tokens, no context)."""

    def __init__(self, encoder: WordEncoder, name: str = "bertw", label: str = BASELINE_LABELS["bertw"]):
        self.encoder, self.name, self.label = encoder, name, label

    def vectors(self, data: TypeLevelData) -> SpaceVectors:
        matrix, tokenizer = input_embedding_matrix(self.encoder), self.encoder.tokenizer
        vectors = {}
        for split, types in data.splits.items():
            pieces = tokenizer([word.split("_") for word in types.words], is_split_into_words=True,
                               add_special_tokens=False)["input_ids"]
            pieces = [ids or [tokenizer.unk_token_id] for ids in pieces]
            vectors[split] = mean_rows(matrix, pieces)[:, 0].numpy()
        return data, vectors, {}


class AvgSpace:
    """AVG-l: the mean of each word's vectors at `layer` over its contexts in the feature `stores` (split -> path);
    the task fills the stores first, so this space is built with `_partial_: true` and given them."""

    def __init__(self, stores: dict[str, Path], layer: int, name: str = "avg", label: str = "AVG",
                 store_layer: int | None = None):
        self.stores, self.layer, self.name = stores, layer, name
        self.store_layer = layer if store_layer is None else store_layer  # its row in stores holding some layers
        self.label = f"{label}-{layer}"

    def vectors(self, data: TypeLevelData) -> SpaceVectors:
        data, vectors, about = avg_vectors(average_by_word(self.stores, self.store_layer), data)
        return data, vectors, {**about, "stores": {split: str(path) for split, path in self.stores.items()}}


def average_by_word(stores: dict[str, Any], layer: int) -> dict[str, np.ndarray]:
    """word -> the mean of its vectors at `layer` over the contexts of every store."""
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for path in stores.values():
        with FeatureStore(path) as store:
            features, word_ids, words = store.read_layer(layer), store.word_ids(), store.words
        order = np.argsort(word_ids, kind="stable")
        unique, starts = np.unique(word_ids[order], return_index=True)
        for word_id, total, count in zip(unique, np.add.reduceat(features[order], starts),
                                         np.diff(np.append(starts, len(order)))):
            word = words[word_id]
            sums[word] = sums.get(word, 0.0) + total
            counts[word] = counts.get(word, 0) + int(count)
    return {word: (sums[word] / counts[word]).astype(np.float32) for word in sums}


def avg_vectors(by_word: dict[str, np.ndarray], data: TypeLevelData) -> tuple[TypeLevelData, dict, dict]:
    """The AVG vectors of the words that have contexts; the others are left out and counted."""
    kept_splits, vectors, missing = {}, {}, {}
    for split, types in data.splits.items():
        keep = [i for i, word in enumerate(types.words) if word in by_word]
        if not keep:
            raise ConfigError(f"AVG space: no {split} word of {data.name} has a context in the feature store. "
                              "Fix: use the same data for the contexts (data=...) or another space")
        kept_splits[split] = WordTypes([types.words[i] for i in keep], types.targets[keep])
        vectors[split] = np.stack([by_word[types.words[i]] for i in keep])
        missing[split] = len(types.words) - len(keep)
    kept = TypeLevelData(data.name, data.classes, kept_splits, data.files)
    return kept, vectors, {"words_without_contexts": missing}
