"""How contextual are contextual word representations (Ethayarajh 2019, §3.3-3.4), per layer.

See docs/geometry.md, 'Contextuality'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from probing.geometry.occurrences import Occurrences, sentence_rows, word_index


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (float64); a zero row stays zero."""
    vectors = np.asarray(vectors, np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def self_similarity(vectors: np.ndarray) -> float:
    """Definition 1: mean cos(v_j, v_k) over j != k of a word's n >= 2 occurrence vectors."""
    n = len(vectors)
    if n < 2:
        raise ValueError("self-similarity needs at least 2 occurrences")
    units = unit_rows(vectors)
    total = units.sum(axis=0)
    return float((total @ total - (units * units).sum()) / (n * n - n))


def intra_similarity(vectors: np.ndarray) -> float:
    """Definition 2: mean cos(mean vector, v_i) over a sentence's word vectors."""
    vectors = np.asarray(vectors, np.float64)
    mean = unit_rows(vectors.mean(axis=0, keepdims=True))[0]
    return float((unit_rows(vectors) @ mean).mean())


def mev(vectors: np.ndarray, centered: bool = False) -> float:
    """Definition 3: sigma_1^2 / sum_i sigma_i^2 of the occurrence matrix (rows = occurrences); `centered` subtracts
    the mean occurrence first (PCA's explained-variance ratio, as the authors' code). 1.0 for a matrix without
    variance (all rows zero, or identical rows when centred): one vector then explains everything."""
    matrix = np.asarray(vectors, np.float64)
    if centered:
        matrix = matrix - matrix.mean(axis=0)
    total = float(np.einsum("ij,ij->", matrix, matrix))  # sum of sigma_i^2 = squared Frobenius norm
    if total <= 1e-12 * max(1.0, float(np.abs(matrix).max(initial=0.0))) ** 2:
        return 1.0
    # sigma_1^2 = the largest eigenvalue of the smaller Gram matrix (n x n or D x D): no full SVD needed
    gram = matrix @ matrix.T if len(matrix) <= matrix.shape[1] else matrix.T @ matrix
    return float(np.linalg.eigvalsh(gram)[-1] / total)


def cross_context_cosine(vectors: np.ndarray, sentences: np.ndarray) -> float:
    """Mean cosine over the pairs of `vectors` whose `sentences` differ (the anisotropy baseline of §3.4)."""
    units = unit_rows(vectors)
    different = np.asarray(sentences)[:, None] != np.asarray(sentences)[None, :]
    if not different.any():
        raise ValueError("the anisotropy baseline needs occurrences from at least two sentences")
    return float((units @ units.T)[different].mean())


@dataclass(frozen=True)
class Samples:
    """Rows (into the occurrence table) of the sampled words, sentences and baseline occurrences, and the counts
    they were drawn from."""

    words: list[np.ndarray]
    sentences: list[np.ndarray]
    baseline: np.ndarray
    words_available: int
    sentences_available: int
    occurrences_available: int

    def counts(self) -> dict[str, int]:
        return {"words_sampled": len(self.words), "words_available": self.words_available,
                "sentences_sampled": len(self.sentences), "sentences_available": self.sentences_available,
                "baseline_occurrences": len(self.baseline), "occurrences": self.occurrences_available}


def draw(rng: np.random.Generator, population: int, size: int) -> np.ndarray:
    """min(size, population) distinct indices drawn uniformly, in ascending order."""
    return np.sort(rng.choice(population, size=min(size, population), replace=False))


def draw_samples(occurrences: Occurrences, min_contexts: int, samples: int, sentence_samples: int,
                 seed: int) -> Samples:
    """The seeded uniform draws every layer is measured on (the same rows at every layer)."""
    rng = np.random.default_rng(seed)
    index = word_index(occurrences, min_contexts)
    words = list(index.values())
    sentences = sentence_rows(occurrences)
    chosen_words = [words[i] for i in draw(rng, len(words), samples)]
    chosen_sentences = [sentences[i] for i in draw(rng, len(sentences), sentence_samples)]
    baseline = draw(rng, len(occurrences), samples)
    return Samples(chosen_words, chosen_sentences, baseline, len(words), len(sentences), len(occurrences))


def layer_measures(vectors: np.ndarray, sentence_of_row: np.ndarray, samples: Samples,
                   centered: bool = False) -> dict[str, float]:
    """Every measure of one layer from its occurrence vectors (rows as in the occurrence table)."""
    anisotropy = cross_context_cosine(vectors[samples.baseline], sentence_of_row[samples.baseline])
    mev_baseline = mev(vectors[samples.baseline], centered)
    self_sim = mean([self_similarity(vectors[rows]) for rows in samples.words])
    intra = mean([intra_similarity(vectors[rows]) for rows in samples.sentences])
    word_mev = mean([mev(vectors[rows], centered) for rows in samples.words])
    return {
        "anisotropy": anisotropy,
        "self_similarity": self_sim, "self_similarity_adjusted": self_sim - anisotropy,
        "intra_similarity": intra, "intra_similarity_adjusted": intra - anisotropy,
        "mev": word_mev, "mev_baseline": mev_baseline, "mev_adjusted": word_mev - mev_baseline,
    }


def mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")
