"""CoNLL-2003 entity mentions: fixture files, IOB1 tolerance, the hub path (faked offline) and the real files."""

from __future__ import annotations

from collections import Counter

import pytest

from probing.data.conll2003 import (
    ENTITY_TYPES,
    SKIP_I_WITHOUT_B,
    load_conll2003_from_hub,
    mentions_from_tagged_sentence,
    read_conll2003,
)
from probing.data.records import SkipCounter
from probing.data.sources import Conll2003Source
from probing.data.splits import split_summary
from probing.errors import ConfigError, DataFormatError
from tests.helpers import FIXTURES

FIXTURES = FIXTURES / "data" / "conll2003"
FILES = [FIXTURES / name for name in ("train.txt", "valid.txt", "test.txt")]


def test_mentions_from_tagged_sentence():
    tokens = ["New", "York", "City", "is", "in", "the", "US"]
    tags = ["B-LOC", "I-LOC", "I-LOC", "O", "O", "O", "B-LOC"]
    records = mentions_from_tagged_sentence(tokens, tags, "s:1")
    assert [(r.word, r.sclass, r.target) for r in records] == [("new_york_city", "LOC", (0, 1, 2)), ("us", "LOC", (6,))]
    assert records[0].tokens == tuple(tokens) and records[0].source == "s:1"


def test_i_tag_without_b_starts_a_mention_and_is_counted():
    skips = SkipCounter()
    tags = ["I-PER", "I-PER", "B-PER", "I-ORG", "O", "I-LOC"]
    records = mentions_from_tagged_sentence(["a", "b", "c", "d", "e", "f"], tags, "s:1", skips)
    assert [(r.word, r.sclass) for r in records] == [("a_b", "PER"), ("c", "PER"), ("d", "ORG"), ("f", "LOC")]
    assert skips.counts == {SKIP_I_WITHOUT_B: 3}
    assert skips.examples[SKIP_I_WITHOUT_B] == "s:1 token 1"


def test_read_fixture_files():
    records, skips = read_conll2003(FILES)
    assert [(r.word, r.sclass) for r in records] == [
        ("eu", "ORG"), ("german", "MISC"), ("british", "MISC"), ("peter_blackburn", "PER"), ("brussels", "LOC"),
        ("leicestershire", "ORG"), ("london", "LOC"),
        ("japan", "LOC"), ("china", "PER"), ("nadim_ladki", "PER"), ("al-ain_united_arab_emirates", "LOC"),
        ("new_york", "LOC"), ("european_union", "ORG"),
    ]
    assert skips.counts == {SKIP_I_WITHOUT_B: 2}
    emirates = records[10]
    assert emirates.target == (0, 1, 2, 3) and emirates.tokens[-1] == "1996-12-06"
    assert emirates.source == f"{FILES[2]}:19"  # first line of its sentence
    assert records[0].source == f"{FILES[0]}:3"  # after "-DOCSTART-" and its blank line
    assert records[0].tokens[:3] == ("EU", "rejects", "German")


@pytest.mark.parametrize(
    "line, problem",
    [("EU NNP B-ORG", "expected 4 space-separated columns"), ("EU NNP B-NP B-COMPANY", "unknown NER tag 'B-COMPANY'"),
     ("EU NNP B-NP E-ORG", "unknown NER tag 'E-ORG'")],
)
def test_format_errors_name_the_line(tmp_path, line, problem):
    path = tmp_path / "train.txt"
    path.write_text(f"Peter NNP B-NP B-PER\n\n{line}\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read_conll2003([path])
    assert caught.value.line == 3 and problem in caught.value.problem


def test_source_pools_files_and_splits_by_word():
    data = Conll2003Source(str(FIXTURES), split={"seed": 0}).load()
    assert data.name == "conll2003" and data.classes == ["PER", "LOC", "ORG", "MISC"]
    assert data.files == FILES
    summary = split_summary(data.splits)
    assert [summary[s]["words"] for s in ("train", "dev", "test")] == [8, 2, 3]  # 13 words: round(2.6), round(2.0)
    assert data.skips.total() == 2


def test_source_missing_file_says_to_set_data_dir(tmp_path):
    (tmp_path / "train.txt").write_text("EU NNP B-NP B-ORG\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        Conll2003Source(str(tmp_path)).load()
    assert "valid.txt" in caught.value.problem and "data.data_dir" in caught.value.fix


def test_hub_offline_says_to_set_data_dir():
    with pytest.raises(DataFormatError) as caught:
        load_conll2003_from_hub("conll2003")
    assert "data.data_dir" in caught.value.fix and "train.txt" in caught.value.fix


def test_hub_rows_are_mapped_through_class_label_names(monkeypatch):
    import datasets

    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
    features = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names)),
        }
    )
    rows = {"tokens": [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]], "ner_tags": [[3, 0, 7, 0], [1, 2]]}
    test_rows = {"tokens": [["Japan"]], "ner_tags": [[6]]}
    fake = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(rows, features=features),
            "test": datasets.Dataset.from_dict(test_rows, features=features),
        }
    )
    monkeypatch.setattr(datasets, "load_dataset", lambda name: fake)
    records, skips = load_conll2003_from_hub("conll2003")
    assert [(r.word, r.sclass, r.source) for r in records] == [
        ("eu", "ORG", "conll2003:train:0"), ("german", "MISC", "conll2003:train:0"),
        ("peter_blackburn", "PER", "conll2003:train:1"), ("japan", "LOC", "conll2003:test:0"),
    ]
    assert skips.counts == {SKIP_I_WITHOUT_B: 1}
    data = Conll2003Source(None, split={"test_fraction": 0.0, "dev_fraction": 0.0}).load()
    assert data.files == [] and len(data.splits["train"]) == 4


@pytest.mark.shared_data
def test_real_files_match_the_published_mention_counts(shared_data):
    expected = {
        "train.txt": {"LOC": 7140, "MISC": 3438, "ORG": 6321, "PER": 6600},
        "valid.txt": {"LOC": 1837, "MISC": 922, "ORG": 1341, "PER": 1842},
        "test.txt": {"LOC": 1668, "MISC": 702, "ORG": 1661, "PER": 1617},
    }
    for name, counts in expected.items():
        records, skips = read_conll2003([shared_data / "conll2003" / name])
        assert dict(Counter(r.sclass for r in records)) == counts, name
        assert skips.total() == 0, name  # the files are IOB2
    assert set(ENTITY_TYPES) == set(expected["train.txt"])


def copy_fixtures(tmp_path):
    for path in FILES:
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_files_given_as_one_string_is_one_file():
    data = Conll2003Source(str(FIXTURES), files="valid.txt", split={"test_fraction": 0.0, "dev_fraction": 0.0}).load()
    assert data.files == [FIXTURES / "valid.txt"]
    assert [r.word for r in data.splits["train"]] == ["leicestershire", "london"]


def test_an_empty_files_list_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^files must be a path or a non-empty list"):
        Conll2003Source(str(FIXTURES), files=[])


@pytest.mark.parametrize("text", ["", "\n\n", "-DOCSTART- -X- -X- O\n\n"])
def test_a_file_without_token_lines_is_refused_by_name(tmp_path, text):
    folder = copy_fixtures(tmp_path)
    (folder / "train.txt").write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        Conll2003Source(str(folder)).load()
    assert caught.value.path == str(folder / "train.txt") and caught.value.line is None
    assert "no token lines" in caught.value.problem and "data.source.files" in caught.value.fix


def test_files_without_any_mention_are_refused_naming_them(tmp_path):
    for name in ("train.txt", "valid.txt", "test.txt"):
        (tmp_path / name).write_text("the DT B-NP O\ncat NN I-NP O\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        Conll2003Source(str(tmp_path)).load()
    assert all(str(tmp_path / name) in caught.value.path for name in ("train.txt", "valid.txt", "test.txt"))
    assert "no records" in caught.value.problem and "no entity mention" in caught.value.problem


def test_too_few_words_for_the_dev_split_names_the_setting_and_files(tmp_path):
    for name in ("train.txt", "valid.txt", "test.txt"):
        (tmp_path / name).write_text("Paris NNP B-NP B-LOC\nand CC O O\nEU NNP B-NP B-ORG\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Conll2003Source(str(tmp_path), split={"test_fraction": 0.0, "dev_fraction": 0.2}).load()
    message = str(caught.value)
    assert "dev split is empty" in message and "split.dev_fraction=0.2 " in message
    assert str(tmp_path / "valid.txt") in message


def test_a_hub_repository_with_a_loading_script_is_one_error_naming_the_offline_fix(monkeypatch):
    import datasets

    def script_repository(name):  # what datasets >= 4 raises for a repository that only has a loading script
        raise RuntimeError(f"Dataset scripts are no longer supported, but found {name}.py")

    monkeypatch.setattr(datasets, "load_dataset", script_repository)
    with pytest.raises(DataFormatError, match="no longer supported") as error:
        load_conll2003_from_hub("conll2003")
    assert "data.data_dir" in str(error.value)
