"""Word-similarity evaluation against hand-computed correlations, with the missing words counted."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probing.data.word_benchmarks import SimilarityBenchmark
from probing.errors import ConfigError
from probing.geometry.benchmarks import average_scores, evaluate_similarity, evaluate_spaces, ranks

BENCHMARK = SimilarityBenchmark("toy", [("a", "b", 1.0), ("a", "c", 2.0), ("b", "c", 3.0), ("a", "z", 4.0)], "toy.txt")


def space(vectors: dict[str, list[float]]):
    return lambda word: None if word not in vectors else np.asarray(vectors[word])


def test_spearman_with_tied_model_scores_and_a_missing_word_counted():
    # cosines: a·b = 0, a·c = b·c = √½ -> ranks (1, 2.5, 2.5) against (1, 2, 3): r = 1.5 / √(2 · 1.5) = √3 / 2
    result = evaluate_similarity(space({"a": [1, 0], "b": [0, 1], "c": [1, 1]}), BENCHMARK)
    assert result == {"benchmark": "toy", "measure": "cosine", "correlation": "spearman",
                      "score": pytest.approx(math.sqrt(3) / 2), "pairs": 4, "covered": 3, "missing_words": 1,
                      "missing_examples": ["z"]}


def test_inner_product_and_pearson():
    vectors = space({"a": [2, 0], "b": [0, 1], "c": [1, 1]})  # dots 0, 2, 1
    dot = evaluate_similarity(vectors, BENCHMARK, measure="dot", correlation="spearman")
    assert dot["score"] == pytest.approx(0.5)  # 1 - 6 · (0 + 1 + 1) / (3 · 8)
    assert evaluate_similarity(vectors, BENCHMARK, measure="dot", correlation="pearson")["score"] == pytest.approx(0.5)
    cosine = evaluate_similarity(vectors, BENCHMARK, correlation="pearson")  # cosines 0, √½, √½
    assert cosine["score"] == pytest.approx(math.sqrt(3) / 2)


def test_too_few_covered_pairs_give_no_score_and_every_missing_word_is_listed():
    result = evaluate_similarity(space({"a": [1, 0], "b": [0, 1]}), BENCHMARK)
    assert (result["score"], result["covered"], result["missing_words"]) == (None, 1, 2)
    assert result["missing_examples"] == ["c", "z"]
    many = SimilarityBenchmark("many", [(f"w{i}", f"v{i}", float(i)) for i in range(8)])
    result = evaluate_similarity(space({}), many)
    assert result["missing_words"] == 16 and len(result["missing_examples"]) == 10 and result["covered"] == 0


def test_a_zero_vector_has_cosine_zero():
    result = evaluate_similarity(space({"a": [0, 0], "b": [0, 1], "c": [1, 1]}), BENCHMARK, correlation="pearson")
    assert result["score"] == pytest.approx(np.corrcoef([0, 0, math.sqrt(0.5)], [1, 2, 3])[0, 1])


def test_ranks_average_ties_like_scipy():
    values = np.array([3.0, 1.0, 3.0, 2.0, 3.0, 0.5])
    assert ranks(values).tolist() == [5.0, 2.0, 5.0, 3.0, 5.0, 1.0]
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    model, human = rng.integers(0, 5, 30).astype(float), rng.normal(size=30)
    ours = evaluate_similarity(lambda word: None, SimilarityBenchmark("x", []))  # no pairs at all: no score
    assert ours["score"] is None and ours["pairs"] == 0
    assert np.allclose(ranks(model), stats.rankdata(model))
    pairs = [(f"m{i}", f"h{i}", float(score)) for i, score in enumerate(human)]
    vectors = {**{f"m{i}": [1.0] for i in range(30)}, **{f"h{i}": [value] for i, value in enumerate(model)}}
    result = evaluate_similarity(space(vectors), SimilarityBenchmark("r", pairs), measure="dot")
    assert result["score"] == pytest.approx(stats.spearmanr(model, human).statistic)


@pytest.mark.parametrize("option", [{"measure": "euclid"}, {"correlation": "kendall"}])
def test_unknown_measures_and_correlations_are_refused(option):
    with pytest.raises(ConfigError, match="is not one of .*Fix:"):
        evaluate_similarity(space({}), BENCHMARK, **option)


def test_the_table_over_spaces_and_its_averages():
    spaces = {"original": space({"a": [1, 0], "b": [0, 1], "c": [1, 1]}),
              "shifted": space({"a": [2, 0], "b": [0, 1], "c": [1, 1]})}
    other = SimilarityBenchmark("other", [("a", "b", 1.0), ("b", "c", 2.0), ("a", "c", 3.0)])
    rows = evaluate_spaces(spaces, [BENCHMARK, other], measures=["dot"])
    assert [(row["benchmark"], row["transform"], row["measure"]) for row in rows] == [
        ("toy", "original", "dot"), ("toy", "shifted", "dot"), ("other", "original", "dot"),
        ("other", "shifted", "dot")]
    averages = average_scores(rows)
    assert averages["shifted"]["dot"] == pytest.approx((rows[1]["score"] + rows[3]["score"]) / 2)
    assert average_scores([{**rows[0], "score": None}, rows[2]])["original"]["dot"] is None
