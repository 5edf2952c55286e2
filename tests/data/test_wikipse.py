"""Wiki-PSE readers on fixture files in the exact distributed format (corpus lines from Zhao et al. 2020, Table 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probing.data.records import SkipCounter
from probing.data.sources import WikiPseSource
from probing.data.splits import split_summary
from probing.data.wikipse import read_corpus, read_disjoint_lists, read_sclasses, read_word_list
from probing.errors import ConfigError, DataFormatError
from tests.helpers import FIXTURES

FIXTURES = FIXTURES / "data" / "wiki_pse"
CLASSES = ["location", "person", "organization", "art", "living_thing", "food", "computer-programming_language"]


def fixture_word_split() -> dict[str, str]:
    train = read_word_list(FIXTURES / "train.tsv", CLASSES)
    test = read_word_list(FIXTURES / "test.tsv", CLASSES)
    return {word: "train" for word in train} | {word: "test" for word in test}


def write(tmp_path: Path, text: str, name: str = "corpus.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_sclasses_keeps_file_order_without_dash():
    assert read_sclasses(FIXTURES / "semantic_classes.txt") == CLASSES


def test_read_sclasses_rejects_a_line_without_count(tmp_path):
    path = write(tmp_path, "-location 12\n-person\n", "semantic_classes.txt")
    with pytest.raises(DataFormatError, match=":2: expected '-sclass count'"):
        read_sclasses(path)


def test_read_word_list_parses_classes_and_frequencies():
    words = read_word_list(FIXTURES / "train.tsv", CLASSES)
    assert list(words) == ["roberta", "larch", "apple", "ken_williams"]
    assert words["roberta"] == {"art": 84, "person": 7, "location": 7}
    assert words["larch"] == {"living_thing": 37, "computer-programming_language": 3}


@pytest.mark.parametrize(
    "line, problem",
    [
        ("@apple@ -food=3", "malformed word-list line"),
        ("apple\t-food=3", "malformed word-list line"),
        ("@apple@\t", "malformed word-list line"),
        ("@apple@\tfood=3", "malformed s-class entry 'food=3'"),
        ("@apple@\t-fruit=3", "unknown s-class 'fruit'"),
        ("@apple@\t-food=three", "frequency 'three'"),
        ("@apple@\t-food=-3", "frequency '-3'"),
    ],
)
def test_read_word_list_errors_name_the_line(tmp_path, line, problem):
    path = write(tmp_path, f"@pear@\t-food=1\n{line}\n", "train.tsv")
    with pytest.raises(DataFormatError) as caught:
        read_word_list(path, CLASSES)
    assert caught.value.line == 2
    assert problem in caught.value.problem


def test_read_word_list_rejects_a_duplicate_word(tmp_path):
    path = write(tmp_path, "@pear@\t-food=1\n@pear@\t-food=2\n", "train.tsv")
    with pytest.raises(DataFormatError, match=":2: word 'pear' is listed twice"):
        read_word_list(path, CLASSES)


def test_read_corpus_one_record_per_annotated_occurrence():
    records, skips = read_corpus(FIXTURES / "corpus.txt", CLASSES, fixture_word_split())
    assert len(records) == 17
    assert skips.counts == {"empty line": 1, "annotated word in neither train.tsv nor test.tsv": 1}
    first = records[0]
    assert first.tokens[-2:] == ("roberta", ".") and first.target == (9,)
    assert (first.word, first.sclass) == ("roberta", "art")
    assert first.source.endswith("corpus.txt:1")
    combos = sorted({r.combination for r in records})
    assert combos == [
        ("apple", "food"), ("apple", "organization"),
        ("ken_williams", "person"),
        ("larch", "computer-programming_language"), ("larch", "living_thing"),
        ("party_of_progress_and_socialism", "organization"), ("pine", "living_thing"), ("quorn", "location"),
        ("roberta", "art"), ("roberta", "location"), ("roberta", "person"),
    ]


def test_multiword_names_are_expanded_and_other_annotations_become_plain_words():
    records, _ = read_corpus(FIXTURES / "corpus.txt", CLASSES, fixture_word_split())
    line5 = [r for r in records if r.source.endswith(":5")]
    assert [r.word for r in line5] == ["ken_williams", "roberta"]
    assert line5[0].tokens[:7] == ("ken", "williams", ":", "along", "with", "wife", "roberta")
    assert line5[0].target == (0, 1)
    assert line5[1].target == (6,)
    assert line5[0].tokens == line5[1].tokens
    party, quorn = [r for r in records if r.source.endswith(":12")]
    assert party.target == (1, 2, 3, 4, 5)
    assert [party.tokens[i] for i in party.target] == ["party", "of", "progress", "and", "socialism"]
    assert quorn.target == (9,) and quorn.tokens[9] == "quorn"
    assert party.tokens[-4:] == ("to", "info@quorn.org", "@", "noon")  # e-mail and lone "@" are text


def test_word_is_lower_cased_but_tokens_keep_their_case(tmp_path):
    path = write(tmp_path, "visit @New_York@-location now\n")
    (record,), _ = read_corpus(path, CLASSES, {"new_york": "train"})
    assert record.word == "new_york"
    assert record.tokens == ("visit", "New", "York", "now") and record.target == (1, 2)


@pytest.mark.parametrize("token", ["@apple@", "@apple@-", "@apple@organization", "@_apple@-food"])
def test_malformed_annotations_are_errors_with_line(tmp_path, token):
    path = write(tmp_path, f"fine line\nshe eats an {token} .\n")
    with pytest.raises(DataFormatError) as caught:
        read_corpus(path, CLASSES, {"apple": "train"})
    assert caught.value.line == 2
    assert f"malformed annotation {token!r}" == caught.value.problem


def test_unknown_sclass_is_an_error(tmp_path):
    path = write(tmp_path, "she eats an @apple@-fruit .\n")
    with pytest.raises(DataFormatError, match=":1: unknown s-class 'fruit'"):
        read_corpus(path, CLASSES, {"apple": "train"})


def test_ordinary_at_signs_are_text(tmp_path):
    path = write(tmp_path, "mail me@example.com or @handle , @ or @@ about @apple@-food\n")
    (record,), _ = read_corpus(path, CLASSES, {"apple": "train"})
    assert record.tokens[:8] == ("mail", "me@example.com", "or", "@handle", ",", "@", "or", "@@")
    assert record.target == (9,)


def test_source_uses_the_fixed_test_words_and_splits_train_words():
    split = {"seed": 0, "max_contexts_per_combination": None}
    source = WikiPseSource(str(FIXTURES / "corpus.txt"), str(FIXTURES), split=split)
    data = source.load()
    assert data.name == "wikipse"
    assert data.classes == CLASSES
    test_words = {r.word for r in data.splits["test"]}
    assert test_words == {"party_of_progress_and_socialism", "quorn", "pine"}
    summary = split_summary(data.splits)
    assert summary["test"] == {"words": 3, "combinations": 3, "contexts": 3}
    assert summary["dev"]["words"] == 1  # round(0.2 * 4 training words with contexts)
    assert summary["train"]["words"] == 3
    assert summary["train"]["contexts"] + summary["dev"]["contexts"] == 14
    assert [p.name for p in data.files] == ["corpus.txt", "semantic_classes.txt", "train.tsv", "test.tsv"]
    assert data.skips.total() == 2


def test_source_cap_applies_per_combination():
    split = {"dev_fraction": 0.0, "max_contexts_per_combination": 1}
    source = WikiPseSource(str(FIXTURES / "corpus.txt"), str(FIXTURES), split=split)
    data = source.load()
    assert len(data.splits["dev"]) == 0
    assert len(data.splits["train"]) == 8  # one context for each of the 8 train-word combinations


def test_source_rejects_words_in_both_lists(tmp_path):
    for name in ("semantic_classes.txt", "train.tsv"):
        (tmp_path / name).write_text((FIXTURES / name).read_text(encoding="utf-8"), encoding="utf-8")
    write(tmp_path, "@apple@\t-food=1\n", "test.tsv")
    with pytest.raises(DataFormatError, match="1 words are also in train.tsv \\(e.g. 'apple'\\)"):
        WikiPseSource(str(FIXTURES / "corpus.txt"), str(tmp_path)).load()


def test_source_missing_lists_dir_names_the_config_key(tmp_path):
    with pytest.raises(DataFormatError) as caught:
        WikiPseSource(str(FIXTURES / "corpus.txt"), str(tmp_path / "missing")).load()
    assert caught.value.problem == "file not found" and "data.lists_dir" in caught.value.fix


def copy_lists(tmp_path: Path) -> Path:
    for name in ("semantic_classes.txt", "train.tsv", "test.tsv"):
        write(tmp_path, (FIXTURES / name).read_text(encoding="utf-8"), name)
    return tmp_path


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_an_empty_corpus_is_refused_by_name(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(DataFormatError) as caught:
        read_corpus(path, CLASSES, fixture_word_split())
    assert caught.value.path == str(path) and caught.value.line is None
    assert "no context lines" in caught.value.problem and "data.corpus" in caught.value.fix


def test_an_empty_class_list_is_refused_by_name(tmp_path):
    path = write(tmp_path, "", "semantic_classes.txt")
    with pytest.raises(DataFormatError) as caught:
        read_sclasses(path)
    assert caught.value.path == str(path) and "no s-class lines" in caught.value.problem


@pytest.mark.parametrize("name", ["train.tsv", "test.tsv"])
@pytest.mark.parametrize("text", ["", "@@\t-location=109\n"])
def test_an_empty_word_list_is_refused_by_name(tmp_path, name, text):
    folder = copy_lists(tmp_path)
    write(folder, text, name)
    with pytest.raises(DataFormatError) as caught:
        read_disjoint_lists(folder / "train.tsv", folder / "test.tsv", CLASSES, SkipCounter())
    assert caught.value.path == str(folder / name) and "no word lines" in caught.value.problem
    with pytest.raises(DataFormatError, match=f"{name}: no word lines"):
        WikiPseSource(str(FIXTURES / "corpus.txt"), str(folder)).load()


def test_a_corpus_without_listed_words_is_refused_naming_corpus_and_lists(tmp_path):
    corpus = write(tmp_path, "the @oak@-living_thing grows .\n")
    with pytest.raises(DataFormatError) as caught:
        WikiPseSource(str(corpus), str(FIXTURES)).load()
    assert str(corpus) in caught.value.path and str(FIXTURES / "train.tsv") in caught.value.path
    assert "no records" in caught.value.problem and "1 annotated word in neither" in caught.value.problem


def test_a_corpus_without_test_words_leaves_the_test_split_empty_and_says_so(tmp_path):
    corpus = write(tmp_path, "the @larch@-living_thing grows .\n")
    with pytest.raises(ConfigError) as caught:
        WikiPseSource(str(corpus), str(FIXTURES), split={"dev_fraction": 0.0}).load()
    message = str(caught.value)
    assert "test split is empty" in message and "none of the 3 fixed test words" in message
    assert str(corpus) in message and str(FIXTURES / "test.tsv") in message


def test_corpus_given_as_a_list_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^corpus must be one path"):
        WikiPseSource([str(FIXTURES / "corpus.txt")], str(FIXTURES))
