"""Type-level (uncontextualized) probing, Zhao et al. 2020 §3.2.1, §4.2.1, Fig. 1 and Table 5.

One vector per word type, from one of these spaces (`embeddings=`):

    rand     Rand: N(0, I_dim) per word, fixed by (seed, word).
    bertw    BERTw: the mean of the word's wordpiece input embeddings in the model's matrix (a multiword name's
             words "new_york" are tokenised as the words "new", "york").
    avg      AVG-<model>-l: the mean of the word's contextual vectors at layer l (the `layer` setting) over its
             contexts in the data's corpus. Zhao et al. average over every context in Wiki-PSE; here the
             contexts are those of the feature store (at most `data.split.max_contexts_per_combination` per
             word-s-class combination). Words without any context are left out, counted and reported.
    static   a word2vec/GloVe text file (glove, fasttext, word2vec, static configs); missing words get N(0, I)
             vectors fixed by (oov_seed, word), counted and reported (Zhao: "OOV words are associated with
             vectors drawn from N(0, I_300)").
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from omegaconf import DictConfig

from probing.data.types import TypeLevelData, WordTypes
from probing.errors import ConfigError
from probing.features.baselines import input_embedding_matrix, mean_rows
from probing.features.static_embeddings import read_static_embeddings, seeded_normal_vectors
from probing.features.store import FeatureStore

log = logging.getLogger(__name__)

SPACES = ("rand", "bertw", "avg", "static")


def space_label(space: DictConfig, layer: int | None) -> str:
    """The representation's name in reports: Rand, BERTw, GloVe, ..., AVG-<l>."""
    return f"AVG-{layer}" if space.kind == "avg" else str(space.label)


def static_vectors(space: DictConfig, data: TypeLevelData) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every split's words looked up in the static file; OOV words counted (per split and in all)."""
    static = read_static_embeddings(required_path(space), name=space.name)
    vectors, oov = {}, {}
    for split, types in data.splits.items():
        vectors[split], missing = static.lookup(types.words, int(space.oov_seed))
        oov[split] = {"words": len(types.words), "oov_words": len(missing), "oov_examples": missing[:10]}
        log.info("%s %s: %d of %d words are not in %s (random vectors)", data.name, split, len(missing),
                 len(types.words), static.path)
    return vectors, {"oov": oov, "embeddings_sha256": static.sha256, "dim": static.dim}


def required_path(space: DictConfig) -> str:
    if not space.get("path"):
        raise ConfigError(
            f"embeddings={space.name} needs the embedding file. Fix: add embeddings.path=/path/to/vectors.txt "
            "(word2vec or GloVe text format, .gz allowed)")
    return str(space.path)


def rand_vectors(space: DictConfig, data: TypeLevelData) -> dict[str, np.ndarray]:
    return {split: seeded_normal_vectors(types.words, int(space.dim), int(space.seed))
            for split, types in data.splits.items()}


def bertw_vectors(encoder, data: TypeLevelData) -> dict[str, np.ndarray]:
    """The mean input embedding of each word's wordpieces (no special tokens, no context)."""
    matrix = input_embedding_matrix(encoder)
    vectors = {}
    for split, types in data.splits.items():
        pieces = encoder.tokenizer([word.split("_") for word in types.words], is_split_into_words=True,
                                   add_special_tokens=False)["input_ids"]
        pieces = [ids or [encoder.tokenizer.unk_token_id] for ids in pieces]
        vectors[split] = mean_rows(matrix, pieces)[:, 0].numpy()
    return vectors


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
