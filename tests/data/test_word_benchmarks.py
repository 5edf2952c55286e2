"""Word-benchmark readers: faruqui tab files and vecto CSVs, and malformed lines refused with file, line and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from probing.data.word_benchmarks import read_analogies, read_categorization, read_similarity
from probing.errors import DataFormatError


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def test_a_faruqui_file_with_crlf_line_ends_and_a_blank_line(tmp_path):
    benchmark = read_similarity(write(tmp_path / "EN-TOY.txt", "tiger\tcat\t7.35\r\n\r\nJerusalem\tIsrael\t8\r\n"))
    assert benchmark.name == "EN-TOY" and benchmark.path == str(tmp_path / "EN-TOY.txt")
    assert benchmark.pairs == [("tiger", "cat", 7.35), ("Jerusalem", "Israel", 8.0)]
    assert read_similarity(write(tmp_path / "spaces.txt", "old  new 1.58\n")).pairs == [("old", "new", 1.58)]


def test_vecto_csvs_with_and_without_the_index_column(tmp_path):
    indexed = write(tmp_path / "rw.csv", ",word1,word2,similarity\n0,squishing,squirt,5.88\n1,undated,undatable,5.83\n")
    assert read_similarity(indexed).pairs == [("squishing", "squirt", 5.88), ("undated", "undatable", 5.83)]
    plain = write(tmp_path / "plain.csv", "word1,word2,similarity\nsun,sunlight,50\n")
    assert read_similarity(plain).pairs == [("sun", "sunlight", 50.0)]


@pytest.mark.parametrize("name,text,line,problem", [
    ("cols.txt", "tiger\tcat\t7.35\ntiger\tcat\n", 2, "has 2 columns, expected 3"),
    ("score.txt", "tiger\tcat\tseven\n", 1, "the score 'seven' is not a finite number"),
    ("nan.txt", "tiger\tcat\tnan\n", 1, "the score 'nan' is not a finite number"),
    ("empty.txt", "tiger\t\t7\n", 1, "has an empty column"),
    ("cols.csv", ",word1,word2,similarity\n0,tiger,cat,7,extra\n", 2, "has 5 columns, expected 4"),
    ("header.csv", "similarity\n", 1, "has 1 columns, expected 3"),
])
def test_a_malformed_line_is_one_error_naming_file_line_and_fix(tmp_path, name, text, line, problem):
    path = write(tmp_path / name, text)
    with pytest.raises(DataFormatError) as error:
        read_similarity(path)
    assert (error.value.path, error.value.line) == (str(path), line) and problem in error.value.problem
    assert str(error.value).startswith(f"{path}:{line}: ") and "Fix: " in str(error.value)
    assert "\n" not in str(error.value)


def test_an_empty_or_missing_file_is_refused(tmp_path):
    with pytest.raises(DataFormatError, match="holds no word pairs. Fix: "):
        read_similarity(write(tmp_path / "blank.txt", "\n\n"))
    with pytest.raises(DataFormatError, match="file not found. Fix: set `analysis.benchmarks`"):
        read_similarity(tmp_path / "nowhere.txt")


def test_analogies_and_categories(tmp_path):
    analogies = read_analogies(write(tmp_path / "google.csv", ",type,word1,word2,word3,target\n"
                                                             "0,capital-common-countries,Athens,Greece,Baghdad,Iraq\n"))
    assert analogies.questions == [("Athens", "Greece", "Baghdad", "Iraq")]
    assert analogies.types == ["capital-common-countries"]
    categories = read_categorization(write(tmp_path / "bless.csv", ",category,word\n0,water_animal,carp\n"))
    assert categories.items == [("water_animal", "carp")] and categories.name == "bless"
    with pytest.raises(DataFormatError, match=r"bad.csv:2: has 2 columns, expected 3"):
        read_categorization(write(tmp_path / "bad.csv", ",category,word\n0,carp\n"))


def test_the_real_benchmark_files(shared_data):
    faruqui, vecto = shared_data / "word_similarity" / "faruqui", shared_data / "word_similarity" / "vecto"
    sizes = {"EN-SIMLEX-999": 999, "EN-MEN-TR-3k": 3000, "EN-WS-353-ALL": 353, "EN-RW-STANFORD": 2034,
             "EN-SimVerb-3500": 3500, "EN-MTurk-287": 287}  # 286 newlines, last line unterminated
    for name, size in sizes.items():
        assert len(read_similarity(faruqui / f"{name}.txt").pairs) == size, name
    assert read_similarity(faruqui / "EN-SIMLEX-999.txt").pairs[1] == ("smart", "intelligent", 9.2)
    assert [len(read_similarity(vecto / name).pairs) for name in ("simlex999.csv", "men.csv", "rw.csv")] == [
        999, 3000, 2034]
    sets = shared_data / "word_analogy_categorization" / "vecto"
    assert len(read_analogies(sets / "word-analogy" / "google-analogies.csv").questions) == 19544
    assert len(read_categorization(sets / "word-categorization" / "bless.csv").items) == 200  # 17 rows without a word
