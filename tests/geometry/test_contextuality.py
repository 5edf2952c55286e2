"""Ethayarajh 2019's measures against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probing.geometry import contextuality as ctx
from probing.geometry.occurrences import collect_occurrences


def test_self_similarity_of_identical_occurrences_is_one_and_of_orthogonal_ones_zero():
    assert ctx.self_similarity(np.tile([[0.3, -2.0, 1.0]], (5, 1))) == pytest.approx(1.0)
    assert ctx.self_similarity(np.eye(4) * [1, 2, 3, 4]) == pytest.approx(0.0)


def test_self_similarity_averages_the_ordered_pairs():
    # cos((1,0),(0,1)) = 0, cos((1,0),(1,1)) = cos((0,1),(1,1)) = 1/sqrt(2): mean over the 6 ordered pairs
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    assert ctx.self_similarity(vectors) == pytest.approx(2 * (0 + 2 / math.sqrt(2)) / 6)


def test_self_similarity_needs_two_occurrences():
    with pytest.raises(ValueError):
        ctx.self_similarity(np.ones((1, 3)))


def test_intra_sentence_similarity_of_a_three_word_sentence():
    # mean of (1,0), (0,1), (1,1) is (2/3, 2/3): cosines 1/sqrt(2), 1/sqrt(2), 1
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert ctx.intra_similarity(vectors) == pytest.approx((2 / math.sqrt(2) + 1) / 3)


def test_mev_of_rank_one_occurrences_is_one_and_of_orthonormal_ones_one_over_n():
    direction = np.array([1.0, -2.0, 0.5, 3.0])
    assert ctx.mev(np.outer([1.0, 2.0, -3.0, 0.5], direction)) == pytest.approx(1.0)
    assert ctx.mev(np.eye(5)[:3]) == pytest.approx(1 / 3)


def test_uncentred_and_centred_mev_differ_on_a_shifted_pair():
    # X = [[10, 1], [10, -1]]: X'X = diag(200, 2) -> 200/202 uncentred; centred [[0, 1], [0, -1]] has rank 1 -> 1
    shifted = np.array([[10.0, 1.0], [10.0, -1.0]])
    assert ctx.mev(shifted) == pytest.approx(200 / 202)
    assert ctx.mev(shifted, centered=True) == pytest.approx(1.0)
    # four points around (10, 0): centred sums of squares 8 (x) and 2 (y) -> 0.8; uncentred X'X = diag(408, 2)
    spread = np.array([[12.0, 0.0], [8.0, 0.0], [10.0, 1.0], [10.0, -1.0]])
    assert ctx.mev(spread, centered=True) == pytest.approx(8 / 10)
    assert ctx.mev(spread) == pytest.approx(408 / 410)


def test_mev_without_variance_is_one():
    assert ctx.mev(np.tile([[1.0, 2.0]], (3, 1)), centered=True) == 1.0


def test_anisotropy_baseline_uses_pairs_from_different_sentences_only():
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert ctx.cross_context_cosine(vectors, np.array([0, 0, 1])) == pytest.approx(0.0)  # with (a, b): 1/3
    assert ctx.cross_context_cosine(vectors, np.array([0, 1, 2])) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        ctx.cross_context_cosine(vectors, np.array([4, 4, 4]))


def corpus(repeats: int = 6):
    """Sentences 'w<i> common x<i> .': 'common' occurs in every one, the others once."""
    return collect_occurrences([(f"w{i}", "common", f"x{i}", ".") for i in range(repeats)])


def test_draws_are_seeded_and_capped_at_what_there_is():
    occurrences = corpus(8)
    first = ctx.draw_samples(occurrences, 5, samples=10, sentence_samples=3, seed=1)
    again = ctx.draw_samples(occurrences, 5, samples=10, sentence_samples=3, seed=1)
    other = ctx.draw_samples(occurrences, 5, samples=10, sentence_samples=3, seed=2)
    assert np.array_equal(first.baseline, again.baseline)
    assert [r.tolist() for r in first.sentences] == [r.tolist() for r in again.sentences]
    assert not np.array_equal(first.baseline, other.baseline)
    assert first.counts() == {"words_sampled": 1, "words_available": 1, "sentences_sampled": 3,
                              "sentences_available": 8, "baseline_occurrences": 10, "occurrences": 24}
    assert len(set(first.baseline.tolist())) == 10  # without replacement


def test_baseline_draws_are_uniform_over_occurrences():
    occurrences = corpus(10)  # 30 occurrences, 5 drawn per seed: each expected 2000 * 5 / 30 = 333 times
    counts = np.zeros(len(occurrences))
    for seed in range(2000):
        counts[ctx.draw_samples(occurrences, 5, 5, 1, seed).baseline] += 1
    assert counts.min() > 270 and counts.max() < 400


def test_adjusted_values_are_raw_minus_baseline():
    occurrences = corpus(6)
    vectors = np.random.default_rng(0).normal(size=(len(occurrences), 4)) + 1.0
    samples = ctx.draw_samples(occurrences, 5, samples=12, sentence_samples=4, seed=0)
    row = ctx.layer_measures(vectors, occurrences.sentence, samples)
    assert row["self_similarity_adjusted"] == pytest.approx(row["self_similarity"] - row["anisotropy"])
    assert row["intra_similarity_adjusted"] == pytest.approx(row["intra_similarity"] - row["anisotropy"])
    assert row["mev_adjusted"] == pytest.approx(row["mev"] - row["mev_baseline"])
    common = samples.words[0]
    assert row["self_similarity"] == pytest.approx(ctx.self_similarity(vectors[common]))
    assert row["mev_baseline"] == pytest.approx(ctx.mev(vectors[samples.baseline]))
    assert ctx.layer_measures(vectors, occurrences.sentence, samples, centered=True)["mev"] == pytest.approx(
        ctx.mev(vectors[common], centered=True))
