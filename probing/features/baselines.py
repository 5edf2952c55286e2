"""The bag-of-embeddings baselines of Zhao et al. 2020 §4.2.1, stored and probed exactly like encoder layers.

See docs/probing.md, 'What is probed: layers, the scalar mix, baselines'.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from probing.data.records import SkipCounter, WordInContext
from probing.data.settings import require_int
from probing.errors import ConfigError
from probing.features.encoder import WordEncoder
from probing.features.featurizer import PreparedInput, context_label, context_window, parse_context_size
from probing.features.static_embeddings import StaticEmbeddings, read_static_embeddings, seeded_normal_vectors
from probing.vocabulary import BASELINE_LABELS

log = logging.getLogger(__name__)

WORDPIECE_BASELINES = ("pbert", "bertw")


def check_baseline(name: str) -> str:
    if name not in BASELINE_LABELS:
        raise ConfigError(f"Unknown baseline {name!r}. Fix: baseline=" + ", ".join(BASELINE_LABELS)
                          + " (or null for the encoder's layers)")
    return name


def mean_rows(matrix: torch.Tensor, id_lists: Sequence[Sequence[int]]) -> torch.Tensor:
    """(B, 1, D): the mean of `matrix` rows listed for each example (one index_add for the whole batch)."""
    counts = torch.tensor([len(ids) for ids in id_lists])
    rows = torch.repeat_interleave(torch.arange(len(id_lists)), counts)
    ids = torch.tensor([i for id_list in id_lists for i in id_list], dtype=torch.long)
    sums = torch.zeros(len(id_lists), matrix.shape[1], dtype=torch.float32)
    sums.index_add_(0, rows, matrix[ids].float())
    return (sums / counts[:, None]).unsqueeze(1)


class WordpieceBaseline:
    """P-BERT / BERTw over an encoder's input embedding matrix, with the encoder's own tokenisation and window
    (`baseline=pbert` / `baseline=bertw`, over the encoder of `features.encoder`)."""

    def __init__(self, kind: str, encoder: WordEncoder):
        if kind not in WORDPIECE_BASELINES:
            raise ValueError(f"kind must be one of {WORDPIECE_BASELINES}, got {kind!r}")
        self.kind, self.encoder = kind, encoder
        self.context_size, self.skips = encoder.context_size, encoder.skips
        self.matrix = input_embedding_matrix(encoder)
        # Added tokens ([CLS], [SEP], <s>...) are left out; [UNK] stays: it is what the model sees for an unknown word.
        self.special_ids = set(encoder.tokenizer.all_special_ids) - {encoder.tokenizer.unk_token_id}

    @property
    def store_name(self) -> str:
        return self.encoder.store_name

    @property
    def store_kind(self) -> str:
        return self.kind

    @property
    def hidden_size(self) -> int:
        return self.matrix.shape[1]

    def store_metadata(self) -> dict[str, Any]:
        """The encoder's identity without its attention window, forward precision, site and layers: these baselines
        never run the model."""
        encoder = {key: value for key, value in self.encoder.store_metadata().items()
                   if key not in ("attention_window", "attention_policy", "precision", "site", "layers")}
        return {**encoder, "baseline": self.kind, "pooling": "mean", "num_layers": 1, "hidden_size": self.hidden_size}

    def prepare_many(self, records: Sequence[WordInContext]) -> list[PreparedInput | None]:
        """The encoder's inputs without special tokens (target positions re-indexed)."""
        return [None if prepared is None else self._without_specials(prepared)
                for prepared in self.encoder.prepare_many(records)]

    def _without_specials(self, prepared: PreparedInput) -> PreparedInput:
        keep = [i for i, token in enumerate(prepared.input_ids) if token not in self.special_ids]
        position = {old: new for new, old in enumerate(keep)}
        return PreparedInput([prepared.input_ids[i] for i in keep], [position[i] for i in prepared.target_pieces])

    def encode(self, batch: Sequence[PreparedInput], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        if self.kind == "bertw":
            return mean_rows(self.matrix, [[p.input_ids[i] for i in p.target_pieces] for p in batch]).to(dtype)
        return mean_rows(self.matrix, [p.input_ids for p in batch]).to(dtype)


def input_embedding_matrix(encoder: WordEncoder) -> torch.Tensor:
    """The (vocabulary, D) wordpiece input embeddings of the encoder, or a clear error if it has none."""
    try:
        embeddings = encoder.model.get_input_embeddings()
    except NotImplementedError:
        embeddings = None
    weight = getattr(embeddings, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ConfigError(
            f"model {encoder.info.model_name} ({encoder.info.architecture}) has no input embedding matrix, which "
            f"the P-BERT and BERTw baselines average. Fix: use baseline=prand or baseline=pstatic, or a model "
            f"with wordpiece input embeddings")
    return weight.detach().float().cpu()


class WordBaseline:
    """P-Rand / P-static: word vectors of a growing vocabulary of the words seen, averaged over the window.

    `vectors_for(words) -> (len(words), D) float32` gives the vectors of new words (deterministic per word)."""

    pooling = "mean"  # a context's vector is the mean of its window's word vectors (not in the store's metadata)

    def __init__(self, kind: str, vectors_for: Callable[[list[str]], np.ndarray], dim: int,
                 identity: dict[str, Any], context_size: int | str | None, lower: bool):
        self.kind, self.vectors_for, self.identity = kind, vectors_for, identity
        self.context_size, self.lower = parse_context_size(context_size), lower
        self.vocabulary: dict[str, int] = {}
        self.matrix = torch.empty(0, dim)
        self.skips = SkipCounter()
        self.static: StaticEmbeddings | None = None  # the file behind P-static

    @property
    def store_name(self) -> str:
        return self.identity["vectors"]

    @property
    def store_kind(self) -> str:
        return self.kind

    def store_metadata(self) -> dict[str, Any]:
        return {**self.identity, "baseline": self.kind, "context_size": context_label(self.context_size),
                "num_layers": 1, "hidden_size": self.matrix.shape[1]}

    def window_words(self, record: WordInContext) -> tuple[list[str], list[int]]:
        """The words of the context window (lower-cased for P-Rand) and the target's positions among them."""
        words, target = context_window(record, self.context_size)
        return [word.lower() if self.lower else word for word in words], list(target)

    def prepare_many(self, records: Sequence[WordInContext]) -> list[PreparedInput | None]:
        windows = [self.window_words(record) for record in records]
        self._grow([word for words, _ in windows for word in words])
        return [PreparedInput([self.vocabulary[word] for word in words], target) for words, target in windows]

    def _grow(self, words: list[str]) -> None:
        new = list(dict.fromkeys(word for word in words if word not in self.vocabulary))
        if new:
            first = len(self.vocabulary)
            self.vocabulary.update((word, first + i) for i, word in enumerate(new))
            self.matrix = torch.cat([self.matrix, torch.from_numpy(self.vectors_for(new))])

    def encode(self, batch: Sequence[PreparedInput], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return mean_rows(self.matrix, [p.input_ids for p in batch]).to(dtype)


def rand_baseline(dim: int, seed: int, context_size: int | str | None) -> WordBaseline:
    """P-Rand: N(0, I_dim) per lower-cased word type (`baseline=prand`; `representation.rand_dim`, `rand_seed`)."""
    dim, seed = require_int("representation.rand_dim", dim, minimum=1), require_int("representation.rand_seed", seed)
    identity = {"vectors": f"rand-d{dim}-seed{seed}", "rand_dim": dim, "rand_seed": seed}
    return WordBaseline("prand", lambda words: seeded_normal_vectors(words, dim, seed), dim, identity,
                        context_size, lower=True)


def static_file_baseline(path: str | None, name: str | None, oov_seed: int,
                         context_size: int | str | None) -> WordBaseline:
    """P-static from the file `path` (`baseline=pstatic`, whose path and name come from `embeddings=...`)."""
    require_int("representation.oov_seed", oov_seed)
    if not path:
        raise ConfigError("baseline=pstatic needs a static embedding file. Fix: add embeddings=glove (or fasttext, "
                          "word2vec, static) embeddings.path=/path/to/vectors.txt")
    return static_baseline(read_static_embeddings(path, name=name), oov_seed, context_size)


def static_baseline(static: StaticEmbeddings, oov_seed: int, context_size: int | str | None) -> WordBaseline:
    """P-static: a static embedding file (looked up as written, then lower-cased; OOV -> seeded N(0, I))."""
    identity = {"vectors": f"static-{static.name}-{static.sha256[:10]}", "embeddings_name": static.name,
                "embeddings_sha256": static.sha256, "oov_seed": oov_seed}
    baseline = WordBaseline("pstatic", lambda words: static.lookup(words, oov_seed)[0], static.dim, identity,
                            context_size, lower=False)
    baseline.static = static
    return baseline


def oov_summary(static: StaticEmbeddings, words: Iterable[str]) -> dict[str, Any]:
    """How many of `words` (tokens, with repeats; read once, as a stream) and of their types the static file lacks,
    with examples."""
    counts = Counter(words)  # grows with the vocabulary, not with the corpus
    _, oov_types = static.lookup(list(counts), oov_seed=0)
    missing = set(oov_types)
    return {"types": len(counts), "oov_types": len(missing), "tokens": sum(counts.values()),
            "oov_tokens": sum(counts[word] for word in missing), "oov_examples": oov_types[:10]}
