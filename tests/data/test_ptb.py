"""Penn Treebank .mrg trees as POS-tagged sentences: hand-counted fixtures, traces, bracket errors, zips, real data."""

from __future__ import annotations

import zipfile

import pytest

from probing.data.ptb import SKIP_ONLY_EMPTY_ELEMENTS, parse_trees, ptb_files, read_ptb
from probing.data.records import SkipCounter
from probing.data.task_sources import SKIP_FILE_IN_NO_SPLIT, PosSource
from probing.errors import ConfigError, DataFormatError
from tests.helpers import FIXTURES

PTB = FIXTURES / "data" / "ptb"
TRAIN_FILE, DEV_FILE = PTB / "wsj_0001.mrg", PTB / "wsj_0160.mrg"


def read(path, skips=None):
    return read_ptb([path], skips if skips is not None else SkipCounter())


def test_fixture_sentences_without_traces():
    sentences = read(TRAIN_FILE)
    assert [s.tokens for s in sentences] == [
        ("Mary", "Smith", "will", "chair", "the", "board", "."),
        ("The", "plant", "was", "sold", "to", "investors", "."),  # (-NONE- *-1) dropped
        ("``", "We", "agree", ",", "''", "said", "Jones", "."),  # (-NONE- *T*-2) dropped
    ]
    assert [s.tags for s in sentences] == [
        ("NNP", "NNP", "MD", "VB", "DT", "NN", "."),
        ("DT", "NN", "VBD", "VBN", "IN", "NNS", "."),
        ("``", "PRP", "VBP", ",", "''", "VBD", "NNP", "."),
    ]
    assert [s.source for s in sentences] == [f"{TRAIN_FILE}:{line}" for line in (2, 8, 15)]


def test_parse_trees_keeps_labels_and_lines():
    lines = enumerate(["( (S (NP (DT a)", "(NN cat)) (VP (VBZ sits))))", "(X (Y z))"], start=1)
    trees = list(parse_trees(lines, "mem"))
    assert [(line, tree.label) for line, tree in trees] == [(1, ""), (3, "X")]
    sentence = trees[0][1].children[0]
    assert sentence.label == "S" and [child.label for child in sentence.children] == ["NP", "VP"]


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("( (S (NN a) )\n( (S (NN b) ))\n", 1, "never closed"),
        ("( (S (NN a) ))\n(NN b) )\n", 2, "')' closes no open bracket"),
        ("( (S (NN a) ))\nstray\n", 2, "'stray' outside any bracket"),
        ("( (S (NN a)\n (VB) ))\n", 2, "(VB) has no word or subtree"),
        ("( (S (NN a) () ))\n", 1, "empty brackets"),
        ("( (NP dogs cats) )\n", 1, "NP holds the word 'dogs' beside other children"),
        ("( (NP (DT the) dogs) )\n", 1, "NP holds the word 'dogs' beside other children"),
        ("( (NN a) b )\n", 1, "an unlabelled node holds the word 'b'"),
    ],
)
def test_malformed_brackets_name_the_line(tmp_path, text, line, problem):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read(path)
    assert caught.value.path == str(path) and caught.value.line == line
    assert problem in caught.value.problem and "Fix:" in str(caught.value)


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="no trees"):
        read(path)


def test_tree_of_empty_elements_only_is_counted(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text("( (S (-NONE- *) ))\n( (S (NN a) ))\n", encoding="utf-8")
    skips = SkipCounter()
    assert [s.tokens for s in read(path, skips)] == [("a",)]
    assert skips.counts == {SKIP_ONLY_EMPTY_ELEMENTS: 1} and skips.examples[SKIP_ONLY_EMPTY_ELEMENTS] == f"{path}:1"


def test_source_splits_a_folder_by_file_number():
    data = PosSource("ptb", str(PTB)).load()
    assert data.name == "pos" and data.token_level
    assert {split: len(sentences) for split, sentences in data.splits.items()} == {"train": 3, "dev": 1}
    assert data.splits["dev"][0].tokens == ("It", "rains", ".")
    assert data.labels == ["''", ",", ".", "DT", "IN", "MD", "NN", "NNP", "NNS", "PRP", "VB", "VBD", "VBN", "VBP",
                           "VBZ", "``"]
    assert data.files == [TRAIN_FILE, DEV_FILE] and data.skips.total() == 0


def make_zip(tmp_path):
    archive = tmp_path / "treebank.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        opened.writestr("treebank/combined/README", "not a tree")
        opened.writestr("treebank/combined/wsj_0160.mrg", DEV_FILE.read_bytes())
        opened.writestr("treebank/combined/wsj_0001.mrg", TRAIN_FILE.read_bytes())
        opened.writestr("treebank/combined/wsj_0200.mrg", DEV_FILE.read_bytes())
    return archive


def test_zip_members_are_read_in_place(tmp_path):
    archive = make_zip(tmp_path)
    assert [path.name for path in ptb_files([archive])] == ["wsj_0001.mrg", "wsj_0160.mrg", "wsj_0200.mrg"]
    data = PosSource("ptb", [str(archive)]).load()
    assert [len(data.splits[split]) for split in ("train", "dev")] == [3, 1]
    assert data.splits["dev"][0].source == f"{archive}/treebank/combined/wsj_0160.mrg:1"
    assert data.files == [archive]  # the archive is what gets hashed
    assert data.skips.counts == {SKIP_FILE_IN_NO_SPLIT: 1}  # wsj_0200 is in neither default split


def test_invalid_utf8_in_a_zip_member_names_the_line(tmp_path):
    archive = tmp_path / "bad.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        opened.writestr("wsj_0001.mrg", b"( (S (NN a) ))\n( (S (NN \xff) ))\n")
    with pytest.raises(DataFormatError) as caught:
        PosSource("ptb", str(archive), splits={"train": "*", "dev": "none"}).load()
    assert caught.value.path == f"{archive}/wsj_0001.mrg" and caught.value.line == 2


def test_a_broken_zip_and_a_zip_without_trees_are_errors(tmp_path):
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip")
    with pytest.raises(DataFormatError, match="not a readable zip"):
        ptb_files([broken])
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as opened:
        opened.writestr("README", "x")
    with pytest.raises(DataFormatError, match=r"no \.mrg files"):
        ptb_files([empty])


def test_custom_split_patterns_and_a_missing_dev(tmp_path):
    data = PosSource("ptb", str(PTB), splits={"train": "wsj_0160.mrg", "dev": ["wsj_0001.mrg"]}).load()
    assert [len(data.splits[split]) for split in ("train", "dev")] == [1, 3]
    with pytest.raises(DataFormatError, match="no dev data"):
        PosSource("ptb", str(PTB), splits={"train": "*.mrg", "dev": "wsj_9*.mrg"}).load()


def test_ptb_needs_paths():
    with pytest.raises(ConfigError, match=r"^paths is not set for format=ptb"):
        PosSource("ptb")


@pytest.mark.shared_data
def test_nltk_sample_sentence_and_word_counts(shared_data):
    data = PosSource("ptb", str(shared_data / "nltk_data" / "corpora" / "treebank.zip")).load()
    train, dev = data.splits["train"], data.splits["dev"]
    assert len(train) + len(dev) == 3914  # the README's count
    assert (len(train), len(dev)) == (3396, 518)  # wsj_0001-0159 / wsj_0160-0199
    # NLTK's treebank.words() has 100,676 leaves, 6,592 of them -NONE- elements.
    assert sum(len(s.tokens) for s in train + dev) == 100_676 - 6_592
    assert "-NONE-" not in data.labels and len(data.labels) == 45
    assert data.skips.total() == 0
