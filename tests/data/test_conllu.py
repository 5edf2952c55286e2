"""CoNLL-U XPOS as POS-tagged sentences: multiword tokens, empty nodes, format errors, the bundled EWT sample."""

from __future__ import annotations

import pytest

from probing.data.conllu import SKIP_EMPTY_NODE, SKIP_MULTIWORD, XPOS_TAGS, read_conllu_xpos, skip_unknown_tag
from probing.data.records import SkipCounter
from probing.data.task_sources import BUNDLED_POS_FILES, PosSource, bundled_pos_paths
from probing.errors import ConfigError, DataFormatError
from tests.helpers import FIXTURES

CONLLU = FIXTURES / "data" / "conllu"
TRAIN_FILE, DEV_FILE = CONLLU / "mini-train.conllu", CONLLU / "mini-dev.conllu"
WORD = "1\tcat\tcat\tNOUN\tNN\t_\t0\troot\t0:root\t_"


def test_fixture_words_and_xpos():
    skips = SkipCounter()
    sentences = read_conllu_xpos([TRAIN_FILE], skips)
    assert [(s.tokens, s.tags) for s in sentences] == [
        (("I", "do", "n't", "know", "."), ("PRP", "VBP", "RB", "VB", ".")),  # the words of "don't", not the range
        (("Go", "home"), ("VB", "RB")),  # the empty node 1.1 is no word
    ]
    assert [s.source for s in sentences] == [f"{TRAIN_FILE}:4", f"{TRAIN_FILE}:13"]
    assert skips.counts == {SKIP_MULTIWORD: 1, SKIP_EMPTY_NODE: 1}
    assert skips.examples == {SKIP_MULTIWORD: f"{TRAIN_FILE}:5", SKIP_EMPTY_NODE: f"{TRAIN_FILE}:14"}


@pytest.mark.parametrize(
    "text, line, problem",
    [
        (f"{WORD}\n2\tsits\tsit\tVERB\tVBZ\t_\t1\n", 2, "expected 10 tab-separated columns, got 7"),
        (f"{WORD}\n2\tsits\tsit\tVERB\t_\t_\t1\tdep\t_\t_\n", 2, "no XPOS tag (column 5 is '_') for 'sits'"),
        (f"{WORD}\n3\tsits\tsit\tVERB\tVBZ\t_\t1\tdep\t_\t_\n", 2, "word ID '3' where 2 comes next"),
        (f"{WORD}\nx\tsits\tsit\tVERB\tVBZ\t_\t1\tdep\t_\t_\n", 2, "word ID 'x' where 2 comes next"),
        (f"{WORD}\n\n# sent_id = 2\n# text = nothing\n\n{WORD}\n", 3, "without word lines"),
        (f"{WORD}\n2\t\tsit\tVERB\tVBZ\t_\t1\tdep\t_\t_\n", 2, "empty FORM"),
    ],
)
def test_format_errors_name_the_line(tmp_path, text, line, problem):
    path = tmp_path / "x-train.conllu"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read_conllu_xpos([path], SkipCounter())
    assert caught.value.path == str(path) and caught.value.line == line
    assert problem in caught.value.problem and "Fix:" in str(caught.value)


@pytest.mark.parametrize("token, line, problem, fix", [
    ("1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_", 4,
     "a sentence block without word lines: its multiword token 1-2 \"don't\" is followed by none of the words it spans",
     "after a multiword-token line give one word line per word it spans (e.g. 1-2 don't, then 1 do and 2 n't)"),
    ("1.1\tgone\t_\t_\t_\t_\t_\t_\t_\t_", 4,
     "a sentence block without word lines: its empty node 1.1 'gone' is no word",
     "give the sentence its word lines (IDs 1, 2, ...)"),
])
def test_a_block_of_tokens_without_words_is_named_for_what_it_holds(tmp_path, token, line, problem, fix):
    """It was called a block of comments only."""
    path = tmp_path / "x-train.conllu"
    path.write_text(f"{WORD}\n\n# text = don't\n{token}\n\n{WORD}\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read_conllu_xpos([path], SkipCounter())
    assert (caught.value.path, caught.value.line, caught.value.problem) == (str(path), line, problem)
    assert caught.value.fix.startswith(fix) and "comments only" not in str(caught.value)


def test_a_sentence_with_a_tag_outside_the_penn_treebank_set_is_left_out_and_counted(tmp_path):
    path = tmp_path / "typo-train.conllu"
    odd = "2\tsits\tsit\tVERB\tFOO\t_\t1\tdep\t_\t_"
    path.write_text(f"{WORD}\n\n{WORD}\n{odd}\n\n{WORD}\n", encoding="utf-8")
    skips = SkipCounter()
    sentences = read_conllu_xpos([path], skips)
    assert [s.source for s in sentences] == [f"{path}:1", f"{path}:6"]  # the sentence of lines 3-4 is left out
    reason = skip_unknown_tag("FOO")
    assert skips.counts == {reason: 1} and skips.examples == {reason: f"{path}:4"}
    assert "1 sentence with XPOS tag 'FOO', outside the Penn Treebank tag set, left out" in skips.summary()
    (tmp_path / "typo-dev.conllu").write_text(f"{WORD}\n", encoding="utf-8")
    data = PosSource(paths=str(tmp_path), splits={"train": "*train*", "dev": "*dev*"}).load()
    assert data.skips.counts == {reason: 1} and data.labels == ["NN"]


def test_every_tag_of_the_bundled_ewt_sample_is_known():
    data = PosSource().load()
    assert set(data.labels) <= XPOS_TAGS and len(data.labels) == 49
    assert not [reason for reason in data.skips.counts if "XPOS" in reason]


def test_word_ids_restart_per_sentence_and_the_last_blank_line_is_optional(tmp_path):
    path = tmp_path / "x-train.conllu"
    path.write_text(f"{WORD}\n\n{WORD}\n2\tsat\tsit\tVERB\tVBD\t_\t1\tdep\t_\t_", encoding="utf-8")
    sentences = read_conllu_xpos([path], SkipCounter())
    assert [s.tokens for s in sentences] == [("cat",), ("cat", "sat")]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_a_file_without_words_is_an_error(tmp_path, text):
    path = tmp_path / "x-train.conllu"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read_conllu_xpos([path], SkipCounter())
    assert caught.value.path == str(path)


def test_source_on_a_folder_splits_by_file_name():
    data = PosSource("conllu", str(CONLLU)).load()
    assert {split: len(sentences) for split, sentences in data.splits.items()} == {"train": 2, "dev": 1}
    assert data.labels == [".", "NNS", "PRP", "RB", "VB", "VBP"]  # train and dev tags, sorted
    assert data.files == [TRAIN_FILE, DEV_FILE]
    assert data.skips.counts == {SKIP_MULTIWORD: 1, SKIP_EMPTY_NODE: 1}


def test_source_with_explicit_split_patterns():
    data = PosSource(paths=[str(DEV_FILE), str(TRAIN_FILE)], splits={"train": "*-dev.conllu", "dev": "*train*"}).load()
    assert [len(data.splits[split]) for split in ("train", "dev")] == [1, 2]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"format": "xml"}, r"^format='xml' is not one of conllu, ptb"),
        ({"splits": {"train": "*", "validation": "*"}}, r"names the split 'validation'"),
        ({"splits": ["*-train.conllu"]}, r"data\.source\.splits must map splits to file names"),
        ({"paths": []}, r"^paths must be a path or a non-empty list"),
    ],
)
def test_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        PosSource(**kwargs)


def test_missing_paths_and_empty_folders_are_errors(tmp_path):
    with pytest.raises(DataFormatError, match="no such file or folder") as caught:
        PosSource(paths=str(tmp_path / "gone-train.conllu")).load()
    assert "data.source.paths" in caught.value.fix
    with pytest.raises(DataFormatError, match=r"no \*\.conllu files in the folder"):
        PosSource(paths=str(tmp_path)).load()


def test_a_file_in_two_splits_is_a_config_error():
    with pytest.raises(ConfigError, match="matches the patterns of splits"):
        PosSource(paths=str(TRAIN_FILE), splits={"train": "*train*", "dev": "mini-*"}).load()


def test_bundled_sample_is_the_default():
    data = PosSource().load()
    train, dev = data.splits["train"], data.splits["dev"]
    assert (len(train), len(dev)) == (651, 189)  # the sizes its README states
    assert (sum(len(s.tokens) for s in train), sum(len(s.tokens) for s in dev)) == (8304, 2541)
    assert data.files == bundled_pos_paths() and [path.name for path in data.files] == list(BUNDLED_POS_FILES)
    assert data.labels == sorted({tag for s in train + dev for tag in s.tags}) and "NN" in data.labels
    assert data.skips.counts[SKIP_MULTIWORD] > 0
    folder = data.files[0].parent
    assert (folder / "LICENSE.txt").read_text(encoding="utf-8").startswith("Attribution-ShareAlike 4.0")
    assert "CC BY-SA 4.0" in (folder / "README.md").read_text(encoding="utf-8")


def documents(path):
    """Sentence blocks grouped by document, as the sample's README cuts them."""
    docs: list[list[str]] = []
    for block in path.read_text(encoding="utf-8").strip("\n").split("\n\n"):
        if block.startswith("# newdoc") or not docs:
            docs.append([])
        docs[-1].append(block)
    return docs


@pytest.mark.shared_data
def test_ewt_counts_and_the_bundled_cut(shared_data):
    ewt = shared_data / "ud_english_ewt"
    data = PosSource(paths=str(ewt), splits={"train": "*-dev.conllu", "dev": "*-test.conllu"}).load()
    assert (len(data.splits["train"]), len(data.splits["dev"])) == (2001, 2077)  # EWT's README
    assert data.skips.counts == {SKIP_MULTIWORD: 713, SKIP_EMPTY_NODE: 6}
    for source, step, bundled in zip(("en_ewt-ud-dev.conllu", "en_ewt-ud-test.conllu"), (3, 10), bundled_pos_paths()):
        cut = "".join(block + "\n\n" for doc in documents(ewt / source)[::step] for block in doc)
        assert bundled.read_text(encoding="utf-8") == cut, bundled.name
