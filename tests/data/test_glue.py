"""GLUE SST-2 and MRPC TSVs as labelled texts: fixtures, the BOM, row errors, the hub path (faked) and real counts."""

from __future__ import annotations

from collections import Counter

import pytest

from probing.data.glue import load_glue_from_hub, read_glue_tsv
from probing.data.task_records import GLUE_LABELS, TextExample
from probing.data.task_sources import GlueSource
from probing.errors import ConfigError, DataFormatError
from tests.helpers import FIXTURES

GLUE = FIXTURES / "data" / "glue"
SST2, MRPC = GLUE / "SST-2", GLUE / "MRPC"
SST2_HEADER = "sentence\tlabel\n"


def test_sst2_rows_stripped_with_their_lines():
    examples = read_glue_tsv(SST2 / "train.tsv", "sst2")
    path = SST2 / "train.tsv"
    assert examples == [
        TextExample("a gentle , funny film", "1", None, f"{path}:2"),
        TextExample("the plot goes nowhere", "0", None, f"{path}:3"),
        TextExample("sharp writing and a warm heart", "1", None, f"{path}:4"),
    ]


def test_mrpc_pairs_after_the_byte_order_mark():
    path = MRPC / "train.tsv"
    assert path.read_bytes().startswith(b"\xef\xbb\xbfQuality")
    examples = read_glue_tsv(path, "mrpc")
    assert [(e.label, e.text, e.text_pair) for e in examples] == [
        ("1", 'The council approved the "new budget on Monday.', "On Monday the council passed the new budget."),
        ("0", "Shares fell 3 percent.", "The firm hired 20 staff."),
    ]
    assert examples[1].source == f"{path}:3"


def test_columns_are_found_by_header_name(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("label\tidx\tsentence\n0\t7\tdull\n", encoding="utf-8")
    assert read_glue_tsv(path, "sst2") == [TextExample("dull", "0", None, f"{path}:2")]


@pytest.mark.parametrize(
    "task, text, line, problem",
    [
        ("sst2", "text\tlabel\nfine\t1\n", 1, "the header has no column 'sentence'"),
        ("mrpc", "Quality\t#1 ID\t#2 ID\t#1 String\n1\t1\t2\ta\n", 1, "the header has no column '#2 String'"),
        ("sst2", f"{SST2_HEADER}fine\t1\njust text\n", 3, "1 tab-separated columns, the header needs 2"),
        ("sst2", f"{SST2_HEADER}fine\tpositive\n", 2, "label 'positive' is not 0 or 1"),
        ("sst2", f"{SST2_HEADER}fine\t2\n", 2, "label '2' is not 0 or 1"),
        ("sst2", f"{SST2_HEADER}fine\t1\n\nbad\t0\n", 3, "blank line"),
        ("sst2", f"{SST2_HEADER} \t1\n", 2, "empty text"),
        ("mrpc", "Quality\t#1 String\t#2 String\n1\ta\t\n", 2, "empty text_pair"),
    ],
)
def test_row_errors_name_the_line(tmp_path, task, text, line, problem):
    path = tmp_path / "train.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read_glue_tsv(path, task)
    assert caught.value.path == str(path) and caught.value.line == line
    assert problem in caught.value.problem and "Fix:" in str(caught.value)


@pytest.mark.parametrize("text, problem", [("", "empty file"), (SST2_HEADER, "no example rows")])
def test_empty_files_are_errors(tmp_path, text, problem):
    path = tmp_path / "train.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError, match=problem):
        read_glue_tsv(path, "sst2")


def test_source_reads_train_and_dev():
    data = GlueSource("mrpc", str(MRPC)).load()
    assert data.name == "mrpc" and not data.token_level and data.labels == list(GLUE_LABELS)
    assert {split: len(examples) for split, examples in data.splits.items()} == {"train": 2, "dev": 1}
    assert data.files == [MRPC / "train.tsv", MRPC / "dev.tsv"] and data.skips.total() == 0


def test_source_missing_file_says_to_set_data_dir(tmp_path):
    (tmp_path / "train.tsv").write_text(f"{SST2_HEADER}fine\t1\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        GlueSource("sst2", str(tmp_path)).load()
    assert caught.value.path == str(tmp_path / "dev.tsv") and "data.data_dir" in caught.value.fix


def test_unknown_task_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^task=.* is not one of sst2, mrpc"):
        GlueSource("qnli")


def fake_glue(task):
    import datasets

    label = datasets.ClassLabel(names=["negative", "positive"] if task == "sst2" else ["not_equivalent", "equivalent"])
    texts = {"sentence": datasets.Value("string")} if task == "sst2" else {
        "sentence1": datasets.Value("string"), "sentence2": datasets.Value("string")}
    features = datasets.Features({**texts, "label": label, "idx": datasets.Value("int32")})

    def rows(labels):
        columns = {name: [f"{name} {i} " for i in range(len(labels))] for name in texts}
        return datasets.Dataset.from_dict({**columns, "label": labels, "idx": list(range(len(labels)))}, features)

    return datasets.DatasetDict({"train": rows([0, 1, 1]), "validation": rows([1]), "test": rows([-1, -1])})


@pytest.mark.parametrize("task", ["sst2", "mrpc"])
def test_hub_rows_become_examples_without_the_unlabelled_test(monkeypatch, task):
    import datasets

    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config: calls.append((name, config)) or fake_glue(task))
    data = GlueSource(task).load()
    assert calls == [("glue", task)] and data.files == []
    assert {split: len(examples) for split, examples in data.splits.items()} == {"train": 3, "dev": 1}
    first = data.splits["train"][1]
    assert first.label == "1" and first.source == f"glue/{task}:train:1"
    if task == "sst2":
        assert (first.text, first.text_pair) == ("sentence 1", None)
    else:
        assert (first.text, first.text_pair) == ("sentence1 1", "sentence2 1")


def test_hub_offline_says_to_set_data_dir():
    with pytest.raises(DataFormatError) as caught:
        load_glue_from_hub("glue", "sst2")
    assert "data.data_dir" in caught.value.fix


@pytest.mark.shared_data
def test_real_sizes_and_label_counts(shared_data):
    expected = {
        "sst2": {"train": {"0": 29780, "1": 37569}, "dev": {"0": 428, "1": 444}},  # glue/README.md
        "mrpc": {"train": {"0": 1194, "1": 2474}, "dev": {"0": 129, "1": 279}},  # 3,668 and 408 pairs
    }
    for task, folder in (("sst2", "SST-2"), ("mrpc", "MRPC")):
        data = GlueSource(task, str(shared_data / "glue" / folder)).load()
        counts = {split: dict(Counter(e.label for e in examples)) for split, examples in data.splits.items()}
        assert counts == expected[task], task
    assert sum(expected["sst2"]["dev"].values()) == 872 and sum(expected["mrpc"]["train"].values()) == 3668
