"""PC static embeddings (Ethayarajh 2019, §4.3, Table 1): a word's static vector at a layer is the first principal
component of its occurrence vectors at that layer; evaluated on word similarity (probing.geometry.benchmarks),
analogies (3CosAdd) and concept categorisation (k-means purity).

See docs/geometry.md, 'PC static embeddings'.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from probing.data.word_benchmarks import AnalogyBenchmark, CategorizationBenchmark

MISSING_EXAMPLES = 10


def first_pc(vectors: np.ndarray, centered: bool = False) -> np.ndarray:
    """The unit first principal direction of the occurrence matrix (rows = occurrences), oriented towards the sum of
    the occurrences; a matrix without variance gives its mean direction (or zeros)."""
    matrix = np.asarray(vectors, np.float64)
    total = matrix.sum(axis=0)
    shifted = matrix - matrix.mean(axis=0) if centered else matrix
    if not np.abs(shifted).max(initial=0.0) > 0:
        norm = np.linalg.norm(total)
        return total / norm if norm > 0 else np.zeros(matrix.shape[1])
    direction = top_right_singular_vector(shifted)
    return -direction if direction @ total < 0 else direction


def top_right_singular_vector(matrix: np.ndarray) -> np.ndarray:
    """The first right singular vector of a matrix with variance, from the top eigenvector of the smaller Gram
    matrix (D x D, or n x n for fewer rows than dimensions): no full SVD of a frequent word's many occurrences."""
    if len(matrix) > matrix.shape[1]:
        return np.linalg.eigh(matrix.T @ matrix)[1][:, -1]
    direction = matrix.T @ np.linalg.eigh(matrix @ matrix.T)[1][:, -1]
    return direction / np.linalg.norm(direction)


def static_embeddings(vectors: np.ndarray, index: Mapping[str, np.ndarray], centered: bool = False
                      ) -> dict[str, np.ndarray]:
    """word -> first_pc of its rows of `vectors` (a layer's occurrence vectors, rows as in the occurrence table)."""
    return {word: first_pc(vectors[rows], centered) for word, rows in index.items()}


def unit_matrix(space: Mapping[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    words = list(space)
    matrix = np.asarray([space[word] for word in words], np.float64).reshape(len(words), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return words, np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def analogy_accuracy(space: Mapping[str, np.ndarray], benchmark: AnalogyBenchmark,
                     normalize=lambda word: word) -> dict[str, Any]:
    """3CosAdd accuracy over the questions whose four words are in `space` (`normalize` maps a benchmark word to the
    space's key, e.g. str.lower)."""
    words, units = unit_matrix(space)
    position = {word: i for i, word in enumerate(words)}
    covered, correct, missing = 0, 0, {}
    for question in benchmark.questions:
        keys = [normalize(word) for word in question]
        absent = [word for word, key in zip(question, keys) if key not in position]
        if absent:
            missing.update(dict.fromkeys(absent))
            continue
        a, b, c, target = (position[key] for key in keys)
        scores = units @ (units[b] - units[a] + units[c])
        scores[[a, b, c]] = -np.inf
        covered += 1
        correct += int(np.argmax(scores) == target)
    return {"benchmark": benchmark.name, "task": "analogy", "method": "3CosAdd",
            "score": correct / covered if covered else None, "questions": len(benchmark.questions),
            "covered": covered, "correct": correct, "vocabulary": len(words), "missing_words": len(missing),
            "missing_examples": list(missing)[:MISSING_EXAMPLES]}


def categorization_purity(space: Mapping[str, np.ndarray], benchmark: CategorizationBenchmark,
                          normalize=lambda word: word, restarts: int = 10, seed: int = 0) -> dict[str, Any]:
    """Purity of the spherical k-means clusters of the benchmark's words that are in `space` (k = their categories)."""
    items = {normalize(word): category for category, word in benchmark.items}
    covered = {word: category for word, category in items.items() if word in space}
    missing = [word for category, word in benchmark.items if normalize(word) not in space]
    categories = sorted(set(covered.values()))
    score = None
    if len(covered) >= 2 and len(categories) >= 2:
        _, units = unit_matrix({word: space[word] for word in covered})
        labels = spherical_kmeans(units, len(categories), restarts, seed)
        score = purity(labels, list(covered.values()))
    return {"benchmark": benchmark.name, "task": "categorization", "method": "spherical k-means purity",
            "score": score, "items": len(benchmark.items), "covered": len(covered),
            "categories": len(set(items.values())), "categories_covered": len(categories),
            "missing_words": len(set(missing)), "missing_examples": list(dict.fromkeys(missing))[:MISSING_EXAMPLES]}


def purity(labels: np.ndarray, categories: list[str]) -> float:
    """Σ over clusters of the count of their most frequent category, / the number of items."""
    clusters: dict[int, Counter] = {}
    for label, category in zip(np.asarray(labels).tolist(), categories):
        clusters.setdefault(label, Counter())[category] += 1
    return sum(counts.most_common(1)[0][1] for counts in clusters.values()) / len(categories)


def spherical_kmeans(units: np.ndarray, k: int, restarts: int = 10, seed: int = 0, iterations: int = 100
                     ) -> np.ndarray:
    """Cluster labels of unit rows: k-means with cosine (centroids renormalised), best of `restarts` k-means++
    starts by the total cosine of the rows to their centroids."""
    rng = np.random.default_rng(seed)
    best, best_fit = None, -np.inf
    for _ in range(restarts):
        labels, fit = kmeans_once(units, kmeans_plus_plus(units, k, rng), iterations)
        if fit > best_fit:
            best, best_fit = labels, fit
    return best


def kmeans_plus_plus(units: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k initial centroids: the first uniform, then each drawn with probability ∝ its cosine distance to the nearest
    one chosen (uniform when every distance is 0)."""
    chosen = [int(rng.integers(len(units)))]
    for _ in range(1, k):
        distance = np.clip(1 - (units @ units[chosen].T).max(axis=1), 0, None)
        weights = distance / distance.sum() if distance.sum() > 0 else None
        chosen.append(int(rng.choice(len(units), p=weights)))
    return units[chosen].copy()


def kmeans_once(units: np.ndarray, centroids: np.ndarray, iterations: int) -> tuple[np.ndarray, float]:
    labels = None
    for _ in range(iterations):
        new = np.argmax(units @ centroids.T, axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        for cluster in range(len(centroids)):
            members = units[labels == cluster]
            if len(members):
                total = members.sum(axis=0)
                norm = np.linalg.norm(total)
                centroids[cluster] = total / norm if norm > 0 else centroids[cluster]
    return labels, float((units * centroids[labels]).sum())
