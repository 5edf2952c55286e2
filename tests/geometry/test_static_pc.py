"""PC static embeddings (Ethayarajh 2019 §4.3) checked against cases computed by hand: the first PC of rank-1 and
centred matrices and its sign, 3CosAdd on a constructed space, k-means purity of separable clusters, coverage."""

from __future__ import annotations

import numpy as np
import pytest

from probing.data.word_benchmarks import AnalogyBenchmark, CategorizationBenchmark
from probing.geometry import static_pc as pc


def test_the_first_pc_of_a_rank_one_matrix_is_its_direction_pointing_with_the_occurrences():
    u = np.array([3.0, 4.0, 0.0]) / 5
    rows = np.outer([2.0, 1.0, 0.5, -0.25], u)  # every row a multiple of u, their sum 3.25 u
    assert pc.first_pc(rows) == pytest.approx(u)
    assert pc.first_pc(-rows) == pytest.approx(-u)  # the sum now points along -u


def test_the_uncentred_pc_follows_the_mean_the_centred_one_the_spread():
    # occurrences around (10, 0) spread along the y axis: uncentred, e_1 explains most (100 vs 1 per row);
    # centred, only the spread along e_2 is left
    rows = np.array([[10.0, 1.0], [10.0, -1.0], [10.0, 1.0], [10.0, -1.0]])
    assert pc.first_pc(rows) == pytest.approx([1.0, 0.0])
    assert np.abs(pc.first_pc(rows, centered=True)) == pytest.approx([0.0, 1.0])


def test_the_centred_pc_matches_numpy_svd_of_the_centred_matrix_up_to_the_documented_sign():
    rows = np.random.default_rng(0).normal(size=(7, 4)) + [1.0, 2.0, 0.0, 0.0]
    expected = np.linalg.svd(rows - rows.mean(axis=0))[2][0]
    got = pc.first_pc(rows, centered=True)
    assert got == pytest.approx(expected if expected @ rows.sum(axis=0) >= 0 else -expected)
    assert got @ rows.sum(axis=0) >= 0 and np.linalg.norm(got) == pytest.approx(1.0)


def test_identical_occurrences_give_their_direction_even_centred():
    rows = np.array([[0.0, 2.0], [0.0, 2.0]])
    assert pc.first_pc(rows, centered=True) == pytest.approx([0.0, 1.0])
    assert pc.first_pc(np.zeros((3, 2))) == pytest.approx([0.0, 0.0])


def test_static_embeddings_take_each_words_rows():
    vectors = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, -1.0], [0.0, -3.0]])
    space = pc.static_embeddings(vectors, {"a": np.array([0, 1]), "b": np.array([2, 3])})
    assert space["a"] == pytest.approx([1.0, 0.0]) and space["b"] == pytest.approx([0.0, -1.0])


# man - woman + king = queen along a "gender" and a "royalty" axis; "prince" is near but further
TOY = {"man": [1.0, 0.0, 0.1], "woman": [0.0, 1.0, 0.1], "king": [1.0, 0.0, 1.0], "queen": [0.0, 1.0, 1.0],
       "prince": [1.0, 0.3, 1.0], "apple": [0.2, 0.2, -1.0]}


def test_3cosadd_answers_and_coverage_on_a_constructed_space():
    space = {word: np.asarray(vector) for word, vector in TOY.items()}
    benchmark = AnalogyBenchmark("toy", questions=[("Man", "Woman", "King", "Queen"),  # correct
                                                   ("woman", "man", "queen", "apple"),  # answer is king: wrong
                                                   ("man", "woman", "duke", "duchess")],  # not covered
                                 types=["g", "g", "g"])
    result = pc.analogy_accuracy(space, benchmark, str.lower)
    assert (result["covered"], result["correct"], result["questions"]) == (2, 1, 3)
    assert result["score"] == 0.5 and result["missing_words"] == 2 and result["missing_examples"] == ["duke",
                                                                                                     "duchess"]
    assert result["vocabulary"] == 6


def test_3cosadd_leaves_the_question_words_out_of_the_answers():
    # b - a + c = c exactly: without the exclusion the answer would be c itself
    space = {"a": np.array([1.0, 0.0]), "b": np.array([1.0, 0.0]), "c": np.array([0.0, 1.0]),
             "d": np.array([0.1, 1.0])}
    result = pc.analogy_accuracy(space, AnalogyBenchmark("t", [("a", "b", "c", "d")], ["x"]))
    assert result["score"] == 1.0


def test_purity_by_hand():
    # clusters {0: x x y}, {1: y z}: majorities 2 + 1 of 5
    assert pc.purity(np.array([0, 0, 0, 1, 1]), ["x", "x", "y", "y", "z"]) == pytest.approx(3 / 5)


def test_kmeans_separates_two_clear_groups_and_counts_coverage():
    space = {"cat": np.array([1.0, 0.05]), "dog": np.array([1.0, -0.05]), "cow": np.array([0.9, 0.0]),
             "oak": np.array([0.0, 1.0]), "pine": np.array([0.05, 1.0])}
    benchmark = CategorizationBenchmark("toy", items=[("animal", "cat"), ("animal", "dog"), ("animal", "Cow"),
                                                      ("tree", "oak"), ("tree", "pine"), ("tree", "larch")])
    result = pc.categorization_purity(space, benchmark, str.lower, restarts=3, seed=1)
    assert result["score"] == 1.0 and (result["covered"], result["items"]) == (5, 6)
    assert (result["categories"], result["categories_covered"], result["missing_words"]) == (2, 2, 1)


def test_categorisation_without_two_covered_categories_has_no_score():
    space = {"cat": np.array([1.0, 0.0]), "dog": np.array([0.0, 1.0])}
    benchmark = CategorizationBenchmark("toy", items=[("animal", "cat"), ("animal", "dog"), ("tree", "oak")])
    assert pc.categorization_purity(space, benchmark)["score"] is None


def test_spherical_kmeans_is_seeded():
    units = np.random.default_rng(3).normal(size=(30, 5))
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    assert np.array_equal(pc.spherical_kmeans(units, 4, seed=7), pc.spherical_kmeans(units, 4, seed=7))


@pytest.mark.parametrize("shape", [(40, 6), (3, 6)])
def test_the_gram_shortcut_matches_numpy_svd_for_tall_and_wide_matrices(shape):
    matrix = np.random.default_rng(1).normal(size=shape)
    expected = np.linalg.svd(matrix)[2][0]
    got = pc.top_right_singular_vector(matrix)
    assert abs(got @ expected) == pytest.approx(1.0) and np.linalg.norm(got) == pytest.approx(1.0)
