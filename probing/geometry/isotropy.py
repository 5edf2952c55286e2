"""Isotropy of word representations (Bis et al. 2021, "Too Much in Common", §4.2, §5, Tables 1-2, Fig. 3).

See docs/geometry.md, 'Isotropy'.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from probing.data.sentences import Text
from probing.errors import ConfigError

UNUSED_TOKEN = re.compile(r"\[unused\d+\]")
BIN_SIZE = 1000


def log_partition(W: np.ndarray, directions: np.ndarray, chunk: int = 256) -> np.ndarray:
    """log Z(c) = log Σ_w exp(cᵀw) for each column c of `directions` (log-sum-exp in float64, `chunk` directions at a
    time to bound memory)."""
    W = np.asarray(W, dtype=np.float64)
    directions = np.asarray(directions, dtype=np.float64)
    parts = []
    for start in range(0, directions.shape[1], chunk):
        logits = W @ directions[:, start:start + chunk]
        top = logits.max(axis=0)
        parts.append(top + np.log(np.exp(logits - top).sum(axis=0)))
    return np.concatenate(parts)


def isotropy(W: np.ndarray) -> float:
    """I(W) of the rows of W (eq. 8): c over the eigenvectors of WᵀW, each with both signs."""
    W = np.asarray(W, dtype=np.float64)
    _, eigenvectors = np.linalg.eigh(W.T @ W)
    log_z = log_partition(W, np.concatenate([eigenvectors, -eigenvectors], axis=1))
    return float(math.exp(log_z.min() - log_z.max()))


def center(W: np.ndarray) -> np.ndarray:
    """W - μ, μ the mean row (eq. 9)."""
    W = np.asarray(W, dtype=np.float64)
    return W - W.mean(axis=0)


def scaled_center(W: np.ndarray) -> np.ndarray:
    """e(w) - ‖e(w)‖ μ̂, μ̂ = Σ_w e(w)/‖e(w)‖ / |V| (§5.2, "scaled centering")."""
    W = np.asarray(W, dtype=np.float64)
    norms = np.linalg.norm(W, axis=1, keepdims=True)
    mean_direction = unit_rows(W, norms).mean(axis=0)
    return W - norms * mean_direction


def postprocess(W: np.ndarray, removed: int | None = None) -> np.ndarray:
    """Eq. 9-11: centre W, then subtract from each centred row its projection on the top `removed` principal
    components of the centred matrix (None: ⌈d/100⌉)."""
    centred = center(W)
    components = principal_components(centred, default_removed(W.shape[1]) if removed is None else removed)
    return centred - (centred @ components.T) @ components


def principal_components(centred: np.ndarray, count: int) -> np.ndarray:
    """The top `count` principal directions (rows, unit length) of a centred matrix: the eigenvectors of its scatter
    matrix with the largest eigenvalues."""
    _, eigenvectors = np.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    return eigenvectors[:, ::-1][:, :count].T


def default_removed(dimensions: int) -> int:
    """D = ⌈d/100⌉ (Mu & Viswanath 2018; Bis et al. Table 1)."""
    return math.ceil(dimensions / 100)


TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "original": lambda W: np.asarray(W, dtype=np.float64),
    "centered": center,
    "scaled_centered": scaled_center,
    "postprocessed": postprocess,
}


def transforms(removed: int | None = None) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """TRANSFORMS with `removed` principal components for the post-processing (None: ⌈d/100⌉)."""
    return {**TRANSFORMS, "postprocessed": partial(postprocess, removed=removed)}


def check_removed(removed: Any, dimensions: int, key: str = "analysis.pc_removed") -> int:
    """D as an int in 0..d-1 (None: ⌈d/100⌉)."""
    if removed is None:
        return default_removed(dimensions)
    if isinstance(removed, bool) or not isinstance(removed, int) or not 0 <= removed < dimensions:
        raise ConfigError(f"{key}={removed!r} is not a number of principal components in 0..{dimensions - 1} (the "
                          f"vectors have {dimensions} dimensions). Fix: {key}=null (⌈d/100⌉ = "
                          f"{default_removed(dimensions)}, the paper's choice)")
    return removed


def table1(transformed: Mapping[str, np.ndarray], removed: int) -> dict[str, Any]:
    """The paper's Table 1 columns from the transformed matrices (keys of TRANSFORMS): I(W) of each, the mean row norm
    avg ‖e(w)‖, the norm of the mean row ‖μ‖ and their ratio, all of the original matrix."""
    W = transformed["original"]
    mean_norm = float(np.linalg.norm(W, axis=1).mean())
    mean_vector_norm = float(np.linalg.norm(W.mean(axis=0)))
    return {
        "I_W": isotropy(W), "I_W_centered": isotropy(transformed["centered"]),
        "I_W_scaled_centered": isotropy(transformed["scaled_centered"]),
        "I_W_postprocessed": isotropy(transformed["postprocessed"]),
        "mean_norm": mean_norm, "mean_vector_norm": mean_vector_norm,
        "mean_vector_norm_ratio": mean_vector_norm / mean_norm if mean_norm > 0 else None,
        "vectors": int(W.shape[0]), "dimensions": int(W.shape[1]), "pc_removed": removed,
    }


def unit_rows(W: np.ndarray, norms: np.ndarray | None = None) -> np.ndarray:
    """Each row divided by its norm; rows of zeros stay zero."""
    norms = np.linalg.norm(W, axis=1, keepdims=True) if norms is None else norms
    return np.divide(W, norms, out=np.zeros_like(W, dtype=np.float64), where=norms > 0)


def unused_token_ids(vocabulary: Mapping[str, int]) -> list[int]:
    """The ids of the `[unused<N>]` tokens of a WordPiece vocabulary (BERT's: 994), in id order."""
    return sorted(index for token, index in vocabulary.items() if UNUSED_TOKEN.fullmatch(token))


def fig3_token_ids(vocabulary: Mapping[str, int], rows: int, fallback: int = BIN_SIZE) -> tuple[list[int], str]:
    """The tokens of Fig. 3 and what they are: the `[unused*]` tokens, or for a vocabulary without them (RoBERTa,
    GPT-2) the last `fallback` ids of the `rows` embedding rows, as Bis et al. do for RoBERTa (rarely seen in
    training, like the unused tokens); none ("none") when that would leave no other token."""
    unused = unused_token_ids(vocabulary)
    if unused:
        return unused, "unused"
    if rows <= fallback:
        return [], "none"
    return list(range(rows - fallback, rows)), "last_ids"


def unused_token_cosine(transformed: Mapping[str, np.ndarray], unused: Sequence[int],
                        bin_size: int = BIN_SIZE) -> list[dict[str, Any]]:
    """Fig. 3: per bin of `bin_size` ids, the mean cosine of every unused token with every other token of the bin,
    one column per matrix of `transformed`. Mean cosine over all pairs = (mean unit unused row) · (mean unit row of
    the bin)."""
    size = next(iter(transformed.values())).shape[0]
    others = np.setdiff1d(np.arange(size), np.asarray(unused, dtype=int))
    starts = range(0, size, bin_size)
    rows = [{"bin_start": start, "bin_end": min(start + bin_size, size) - 1,
             "tokens": int(((others >= start) & (others < start + bin_size)).sum())} for start in starts]
    for name, W in transformed.items():
        units = unit_rows(np.asarray(W, dtype=np.float64))
        unused_mean = units[list(unused)].mean(axis=0)
        for row in rows:
            members = others[(others >= row["bin_start"]) & (others <= row["bin_end"])]
            row[name] = float(units[members].mean(axis=0) @ unused_mean) if len(members) else None
    return [row for row in rows if row["tokens"]]


def input_embeddings(model: PreTrainedModel, name: str) -> np.ndarray:
    """The input (word-piece) embedding matrix, vocabulary x d, float64."""
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        embeddings = None
    weight = getattr(embeddings, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ConfigError(f"model {name} ({type(model).__name__}) has no input embedding matrix. Fix: analyse the "
                          "contextual vectors of one of its layers instead (layer=<N>)")
    return weight.detach().cpu().double().numpy()


def token_lookup(tokenizer: PreTrainedTokenizerFast) -> Callable[[str], int | None]:
    """word -> its vocabulary id when the tokenizer makes it exactly one known wordpiece, else None (a word split into
    subword units, or unknown: the paper's benchmarks leave such pairs out)."""
    def lookup(word: str) -> int | None:
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
        return ids[0] if len(ids) == 1 and ids[0] != tokenizer.unk_token_id else None
    return lookup


def embedding_spaces(transformed: Mapping[str, np.ndarray], lookup: Callable[[str], int | None]
                     ) -> dict[str, Callable[[str], np.ndarray | None]]:
    """For each transformed embedding matrix, word -> its row (None for a word that is not one wordpiece)."""
    def space(W: np.ndarray) -> Callable[[str], np.ndarray | None]:
        return lambda word: None if (index := lookup(word)) is None else W[index]
    return {name: space(W) for name, W in transformed.items()}


def occurrence_spaces(transformed: Mapping[str, np.ndarray], words: Sequence[str]
                      ) -> dict[str, Callable[[str], np.ndarray | None]]:
    """For contextual vectors (row i = an occurrence of words[i]): word -> the mean of its transformed occurrence
    vectors, words matched case-insensitively; None for a word that does not occur."""
    rows: dict[str, list[int]] = {}
    for index, word in enumerate(words):
        rows.setdefault(word.lower(), []).append(index)

    def space(W: np.ndarray) -> Callable[[str], np.ndarray | None]:
        return lambda word: None if word.lower() not in rows else W[rows[word.lower()]].mean(axis=0)
    return {name: space(W) for name, W in transformed.items()}


@torch.no_grad()
def contextual_word_vectors(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, texts: Sequence[Text],
                            layer: int, max_vectors: int, batch_size: int, device: torch.device
                            ) -> tuple[np.ndarray, list[str]]:
    """One vector per word occurrence of the pre-split `texts` at hidden state `layer` (the mean of the word's
    wordpieces), in corpus order, the first `max_vectors`; and the words. Sentences longer than the model's limit are
    cut at the end (the words cut off give no vector); a word without wordpieces gives none."""
    model.to(device)
    limit = int(getattr(model.config, "max_position_embeddings", 512))
    vectors, words = [], []
    for start in range(0, len(texts), batch_size):
        batch = [list(text.words) for text in texts[start:start + batch_size]]
        encoded = tokenizer(batch, is_split_into_words=True, truncation=True, max_length=limit, padding=True,
                            return_tensors="pt")
        hidden = model(**encoded.to(device), output_hidden_states=True).hidden_states[layer].double().cpu()
        for row, sentence in enumerate(batch):
            pooled, kept = mean_pool_words(hidden[row], encoded.word_ids(row), sentence)
            vectors += pooled
            words += kept
        if len(words) >= max_vectors:
            break
    if not vectors:
        raise ConfigError("the sentences gave no word vectors. Fix: choose other analysis.sentences")
    return torch.stack(vectors[:max_vectors]).numpy(), words[:max_vectors]


def mean_pool_words(hidden: torch.Tensor, word_ids: Sequence[int | None], sentence: Sequence[str]
                    ) -> tuple[list[torch.Tensor], list[str]]:
    """The mean of each word's wordpiece vectors (rows of `hidden`), for the words that have wordpieces."""
    pieces: dict[int, list[int]] = {}
    for position, word in enumerate(word_ids):
        if word is not None:
            pieces.setdefault(word, []).append(position)
    return [hidden[pieces[word]].mean(dim=0) for word in sorted(pieces)], [sentence[word] for word in sorted(pieces)]
