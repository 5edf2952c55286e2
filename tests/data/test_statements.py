"""Statement tasks: the CSV and JSONL readers (one `error:` line naming file, line and fix), the seeded stratified
split, the records the stores take, and the generated number comparisons against the paper's own files."""

from __future__ import annotations

import csv
import json
from collections import Counter

import numpy as np
import pytest

from probing.data.number_statements import comparisons, number_word, statement
from probing.data.statements import (
    GeometryOfTruth,
    StatementFile,
    UserStatements,
    bundled_statements,
    read_statement_task,
    stratified_split,
)
from probing.errors import ConfigError, DataFormatError


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_a_csv_of_text_and_label_is_split_stratified_by_label(tmp_path):
    rows = "".join(f'"Text {i}, with a comma.",{"yes" if i % 4 == 0 else "no"}\n' for i in range(40))
    data = StatementFile(str(write(tmp_path / "mine.csv", "text,label\n" + rows)), name="mine", seed=3)
    task = data.load_statements()
    assert task.labels == ["no", "yes"]
    sizes = {split: len(task.splits[split]) for split in task.splits}
    # 10 "yes": 2 test, 2 dev (0.2 of 8), 6 train; 30 "no": 6 test, 5 dev (0.2 of 24 = 4.8), 19 train
    assert sizes == {"train": 25, "dev": 7, "test": 8}
    assert task.summary()["test"] == {"no": 6, "yes": 2}
    every = sorted(text for split in task.splits.values() for text in split.texts)
    assert every == sorted(f"Text {i}, with a comma." for i in range(40))
    train = task.splits["train"]
    assert list(train.sources) == sorted(train.sources, key=lambda s: int(s.rsplit(":", 1)[1]))  # file order
    assert train.sources[0].startswith(f"{tmp_path / 'mine.csv'}:")
    assert task.split == {"seed": 3, "dev_fraction": 0.2, "test_fraction": 0.2}


def test_the_split_is_seeded():
    labels = np.array([0, 1] * 50)
    first, again, other = (stratified_split(labels, 0.2, 0.2, seed) for seed in (0, 0, 1))
    assert all(np.array_equal(first[s], again[s]) for s in first)
    assert not np.array_equal(first["test"], other["test"])
    assert sorted(np.concatenate(list(first.values())).tolist()) == list(range(100))


def test_a_statement_is_one_record_whose_target_is_its_whole_text(tmp_path):
    path = write(tmp_path / "s.jsonl", "\n".join(json.dumps({"text": t, "label": i % 2})
                                                   for i, t in enumerate(["The  sky is blue.", "Two is three."] * 5)))
    task = StatementFile(str(path), dev_fraction=0.25, test_fraction=0.25).load_statements()
    assert task.labels == ["0", "1"]
    records = task.store_data().splits["train"]
    record = records[0]
    assert record.tokens == ("The", "sky", "is", "blue.") and record.target == (0, 1, 2, 3)
    assert record.sclass == "0" and task.store_data().classes == ["0", "1"]


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("statement,country\nA.,x\n", 1, "no label column"),
    ("words,label\nA.,1\n", 1, 'no "statement" (or "text") column'),
    ("statement,label\nA.,1\nB.,0,extra\n", 3, "3 fields for the header's 2"),
    ("statement,label\nA.,1\nB.,\n", 3, "an empty label"),
])
def test_a_csv_that_does_not_fit_names_its_file_line_and_fix(tmp_path, text, line, problem):
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(DataFormatError) as caught:
        StatementFile(str(path)).load_statements()
    error = caught.value
    assert (error.path, error.line) == (str(path), line) and problem in error.problem
    assert "Fix:" in str(error) and "\n" not in str(error)


@pytest.mark.parametrize(("line", "problem"), [
    ('{"text": "A."', "invalid JSON"),
    ('{"label": 1}', 'no "text" string'),
    ('{"text": "A.", "label": [1]}', "is not a non-empty string or an integer"),
])
def test_a_jsonl_line_that_does_not_fit_names_its_line(tmp_path, line, problem):
    path = write(tmp_path / "bad.jsonl", '{"text": "B.", "label": 0}\n' + line + "\n")
    with pytest.raises(DataFormatError) as caught:
        StatementFile(str(path)).load_statements()
    assert caught.value.line == 2 and problem in caught.value.problem


def test_one_label_or_a_missing_setting_is_refused(tmp_path):
    path = write(tmp_path / "one.csv", "text,label\nA.,1\nB.,1\n")
    with pytest.raises(DataFormatError, match="every text has the label '1'"):
        StatementFile(str(path)).load_statements()
    with pytest.raises(ConfigError, match="path is not set"):
        UserStatements(None)
    with pytest.raises(ConfigError, match=f"^path={tmp_path / 'none.csv'}: file not found. Fix: path="):
        UserStatements(str(tmp_path / "none.csv"))
    with pytest.raises(ConfigError, match=f"^path={tmp_path}: is a folder, not a file. Fix: path="):
        UserStatements(str(tmp_path))
    with pytest.raises(ConfigError, match="data_dir is not set"):
        GeometryOfTruth(None)
    with pytest.raises(ConfigError, match="data=streusle is not the data of a statement task"):
        read_statement_task(object(), "streusle")


def test_number_words_and_statements_are_written_as_the_paper_writes_them():
    assert [number_word(n) for n in (0, 13, 20, 51, 60, 99)] == ["zero", "thirteen", "twenty", "fifty-one", "sixty",
                                                                 "ninety-nine"]
    assert statement(51, 52, "larger") == "Fifty-one is larger than fifty-two."
    rows = comparisons(count=40, seed=1)
    assert len(rows) == 80 and comparisons(count=40, seed=1) == rows
    for row in rows:
        assert row["label"] == int(row["n1"] > row["n2"] if row["relation"] == "larger" else row["n1"] < row["n2"])
    assert Counter((row["relation"], row["label"]) for row in rows) == {(r, b): 20 for r in ("larger", "smaller")
                                                                        for b in (0, 1)}


def test_the_bundled_sample_is_the_generator_at_seed_0(tmp_path):
    with bundled_statements().open(encoding="utf-8") as handle:
        shipped = list(csv.DictReader(handle))
    assert shipped == [{key: str(value) for key, value in row.items()} for row in comparisons(count=300, seed=0)]
    task = StatementFile(None).load_statements()
    assert task.labels == ["0", "1"] and sum(len(split) for split in task.splits.values()) == 600


@pytest.mark.shared_data
def test_the_generated_statements_match_the_papers_larger_than_file(shared_data):
    with (shared_data / "geometry_of_truth" / "larger_than.csv").open(encoding="utf-8") as handle:
        paper = list(csv.DictReader(handle))
    for row in paper[:200]:
        a, b = int(row["n1"]), int(row["n2"])
        assert statement(a, b, "larger") == row["statement"] and int(a > b) == int(row["label"])
    task = GeometryOfTruth(str(shared_data / "geometry_of_truth"), "cities").load_statements()
    assert sum(len(split) for split in task.splits.values()) == 1496 and task.labels == ["0", "1"]
