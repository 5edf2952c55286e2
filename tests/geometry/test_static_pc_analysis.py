"""probing/geometry/static_pc_analysis.py, its own functions on hand-made spaces: the benchmark rows of `evaluate`
(benchmark words lower-cased like the occurrences, or not), and the two files it writes, value for value. The whole
analysis on the tiny BERT runs in tests/tasks/test_analyze_static_pc.py."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from probing.data.word_benchmarks import AnalogyBenchmark, CategorizationBenchmark, SimilarityBenchmark
from probing.geometry.static_pc_analysis import all_rows, evaluate, score_text, write_static_pc_files

# cos(cat, dog) = 2/sqrt(5) = 0.894, cos(dog, car) = 1/sqrt(5) = 0.447, cos(cat, car) = 0; man : king :: woman : queen
# by 3CosAdd (king - man + woman = queen exactly)
SPACE = {word: np.asarray(vector, np.float32) for word, vector in {
    "cat": [1, 0, 0], "dog": [2, 1, 0], "car": [0, 1, 0],
    "man": [0, 0, 1], "king": [0, 1, 1], "woman": [1, 0, 1], "queen": [1, 1, 1]}.items()}
SIMILARITY = SimilarityBenchmark("sim", [("Cat", "dog", 9.0), ("cat", "car", 1.0), ("dog", "car", 5.0),
                                         ("cat", "zebra", 3.0)])
ANALOGY = AnalogyBenchmark("ana", [("Man", "king", "woman", "queen"), ("cat", "dog", "zebra", "car")], ["x", "x"])
CATEGORIES = CategorizationBenchmark("cat", [("animal", "cat"), ("animal", "Dog"), ("person", "king"),
                                             ("person", "queen"), ("animal", "zebra")])
FILES = {"benchmarks": [SIMILARITY], "analogies": [ANALOGY], "categorization": [CATEGORIES]}
RESTARTS, SEED = 3, 0


def test_lower_cased_benchmark_words_find_the_occurrences_words():
    block = evaluate(SPACE, FILES, True, "spearman", RESTARTS, SEED)
    [similarity], [analogy], [categorization] = block["similarity"], block["analogy"], block["categorization"]
    # model 0.894, 0, 0.447 against humans 9, 1, 5: the same order
    assert (similarity["score"], similarity["covered"], similarity["pairs"]) == (pytest.approx(1.0), 3, 4)
    assert similarity["missing_examples"] == ["zebra"] and similarity["correlation"] == "spearman"
    assert (analogy["score"], analogy["covered"], analogy["correct"], analogy["missing_words"]) == (1.0, 1, 1, 1)
    # cat/dog against king/queen: two clean groups
    assert (categorization["score"], categorization["covered"], categorization["missing_words"]) == (1.0, 4, 1)


def test_without_lower_casing_capitalised_words_are_missing():
    block = evaluate(SPACE, FILES, False, "pearson", RESTARTS, SEED)
    [similarity], [analogy], [categorization] = block["similarity"], block["analogy"], block["categorization"]
    assert (similarity["covered"], similarity["missing_words"]) == (2, 2) and similarity["correlation"] == "pearson"
    assert similarity["score"] == pytest.approx(1.0)  # two pairs: (0, 0.447) against (1, 5)
    assert (analogy["covered"], analogy["score"]) == (0, None)
    assert categorization["covered"] == 3 and categorization["missing_examples"] == ["Dog", "zebra"]


def test_no_benchmark_file_gives_empty_rows():
    assert evaluate(SPACE, {"benchmarks": [], "analogies": [], "categorization": []}, True, "spearman",
                    RESTARTS, SEED) == {"similarity": [], "analogy": [], "categorization": []}


def test_rows_and_scores_as_logged():
    assert all_rows({"similarity": [1], "analogy": [2, 3], "categorization": [4]}) == [1, 2, 3, 4]
    assert score_text(None) == "-" and score_text(0.12345) == "0.123" and score_text(1) == "1.000"


def test_the_csv_and_the_vectors_file(tmp_path):
    block = {"similarity": [{"benchmark": "sim", "score": 0.5, "covered": 3, "pairs": 4, "missing_words": 1}],
             "analogy": [{"benchmark": "ana", "task": "analogy", "score": None, "covered": 0, "questions": 2,
                          "missing_words": 3}],
             "categorization": [{"benchmark": "cat", "task": "categorization", "score": 2 / 3, "covered": 4,
                                 "items": 5, "missing_words": 1}]}
    space = {"cat": np.array([1.0, -0.25], np.float32), "dog": np.array([1 / 3, 0.0], np.float32)}
    run = tmp_path / "new" / "run"
    write_static_pc_files({"layer": 2, "static_pc": block}, space, run)
    with open(run / "static_pc.csv", newline="", encoding="utf-8") as handle:
        assert list(csv.reader(handle)) == [
            ["layer", "benchmark", "task", "score", "covered", "of", "missing_words"],
            ["2", "sim", "similarity", "0.500000", "3", "4", "1"],
            ["2", "ana", "analogy", "", "0", "2", "3"],
            ["2", "cat", "categorization", "0.666667", "4", "5", "1"]]
    assert (run / "static_pc_vectors.txt").read_text(encoding="utf-8") == (
        "2 2\ncat 1.000000 -0.250000\ndog 0.333333 0.000000\n")
