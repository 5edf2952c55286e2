"""Word-similarity evaluation of any word space: the correlation between the model's similarity of each pair and the
human score (Bis et al. 2021 §5.2, Table 2; also the static PC embeddings' evaluation).

See docs/geometry.md, 'Isotropy' (word benchmarks) and 'PC static embeddings'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from probing.data.settings import choose
from probing.data.word_benchmarks import SimilarityBenchmark

MEASURES = ("cosine", "dot")
CORRELATIONS = ("spearman", "pearson")
MISSING_EXAMPLES = 10

VectorOf = Callable[[str], "np.ndarray | None"]


def evaluate_similarity(vector_of: VectorOf, benchmark: SimilarityBenchmark, measure: str = "cosine",
                        correlation: str = "spearman") -> dict[str, Any]:
    """The correlation of the model's and the humans' similarities over the pairs whose two words have vectors."""
    choose("measure", measure, MEASURES)
    choose("correlation", correlation, CORRELATIONS)
    vectors: dict[str, np.ndarray | None] = {}
    model, human, missing = [], [], {}
    for first, second, score in benchmark.pairs:
        for word in (first, second):
            if word not in vectors:
                vectors[word] = vector_of(word)
        pair = vectors[first], vectors[second]
        if pair[0] is None or pair[1] is None:
            missing.update({word: None for word, vector in zip((first, second), pair) if vector is None})
            continue
        model.append(similarity(pair[0], pair[1], measure))
        human.append(score)
    return {"benchmark": benchmark.name, "measure": measure, "correlation": correlation,
            "score": correlate(np.asarray(model), np.asarray(human), correlation), "pairs": len(benchmark.pairs),
            "covered": len(model), "missing_words": len(missing), "missing_examples": list(missing)[:MISSING_EXAMPLES]}


def evaluate_spaces(spaces: Mapping[str, VectorOf], benchmarks: Sequence[SimilarityBenchmark],
                    measures: Sequence[str] = MEASURES, correlation: str = "spearman") -> list[dict[str, Any]]:
    """One row per (benchmark, space, measure): evaluate_similarity's result with the space's name as "transform"."""
    return [{"transform": name, **evaluate_similarity(vector_of, benchmark, measure, correlation)}
            for benchmark in benchmarks for name, vector_of in spaces.items() for measure in measures]


def average_scores(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """{transform: {measure: mean score over the benchmarks}} (the paper's Table 2 averages its benchmarks); None
    where a benchmark has no score."""
    averages: dict[str, dict[str, float | None]] = {}
    for transform in dict.fromkeys(row["transform"] for row in rows):
        for measure in dict.fromkeys(row["measure"] for row in rows):
            scores = [row["score"] for row in rows if (row["transform"], row["measure"]) == (transform, measure)]
            usable = scores and all(score is not None for score in scores)
            averages.setdefault(transform, {})[measure] = float(np.mean(scores)) if usable else None
    return averages


def similarity(first: np.ndarray, second: np.ndarray, measure: str) -> float:
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    dot = float(first @ second)
    if measure == "dot":
        return dot
    norms = float(np.linalg.norm(first) * np.linalg.norm(second))
    return dot / norms if norms > 0 else 0.0


def correlate(model: np.ndarray, human: np.ndarray, correlation: str) -> float | None:
    """Pearson's r of the two, or Spearman's rho (Pearson's r of their ranks)."""
    if len(model) < 2:
        return None
    if correlation == "spearman":
        model, human = ranks(model), ranks(human)
    model, human = model - model.mean(), human - human.mean()
    scale = float(np.sqrt((model @ model) * (human @ human)))
    return float(model @ human) / scale if scale > 0 else None


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of their ranks (scipy.stats.rankdata's "average")."""
    order = np.argsort(values, kind="stable")
    ordinal = np.empty(len(values))
    ordinal[order] = np.arange(1, len(values) + 1)
    _, groups = np.unique(values, return_inverse=True)
    means = np.bincount(groups, weights=ordinal) / np.bincount(groups)
    return means[groups]

