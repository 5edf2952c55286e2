"""Fine-tuning task records and sources: record checks, split settings, CoNLL-2003 NER sentences (files and hub)."""

from __future__ import annotations

from collections import Counter

import pytest

from probing.data.conll2003 import (
    SKIP_HUB_EMPTY_ROW,
    SKIP_IOB1_TO_IOB2,
    load_conll2003_sentences_from_hub,
    read_conll2003_sentences,
    to_iob2,
)
from probing.data.records import SkipCounter
from probing.data.splits import SPLIT_NAMES
from probing.data.task_records import NER_LABELS, REQUIRED_SPLITS, TASK_NAMES, TaggedSentence
from probing.data.task_sources import SKIP_FILE_IN_NO_SPLIT, NerSource, files_by_split, labels_in_order, split_map
from probing.data.text import hashable_files
from probing.errors import ConfigError, DataFormatError
from tests.helpers import FIXTURES

CONLL = FIXTURES / "data" / "conll2003"


def test_constants_have_one_home():
    assert TASK_NAMES == ("pos", "upos", "xpos", "ner", "sst2", "mrpc")
    assert set(REQUIRED_SPLITS) < set(SPLIT_NAMES) == {"train", "dev", "test"}
    assert sorted(NER_LABELS) == sorted(["O"] + [f"{p}-{t}" for p in "BI" for t in ("PER", "LOC", "ORG", "MISC")])


@pytest.mark.parametrize(
    "tokens, tags, message", [((), (), "empty sentence"), (("a", "b"), ("NN",), "2 tokens but 1 tags")]
)
def test_tagged_sentence_refuses_bad_records(tokens, tags, message):
    with pytest.raises(ValueError, match=message):
        TaggedSentence(tokens, tags, "f:1")


def test_split_map_takes_one_name_or_a_list():
    assert split_map("k", {"train": "a.txt", "dev": ["b.txt", "c.txt"]}) == {"train": ["a.txt"],
                                                                             "dev": ["b.txt", "c.txt"]}
    with pytest.raises(ConfigError, match=r"k\.dev must be a path or a non-empty list"):
        split_map("k", {"train": "a.txt", "dev": []})


def test_files_by_split_counts_files_in_no_split(tmp_path):
    files = [tmp_path / name for name in ("a-train.x", "a-dev.x", "notes.x")]
    skips = SkipCounter()
    chosen = files_by_split(files, {"train": ["*-train.x"], "dev": ["*-dev.x"]}, "k", skips)
    assert chosen == {"train": [files[0]], "dev": [files[1]]}
    assert skips.counts == {SKIP_FILE_IN_NO_SPLIT: 1} and skips.examples[SKIP_FILE_IN_NO_SPLIT] == str(files[2])


def test_labels_are_sorted_over_every_split():
    splits = {"train": [TaggedSentence(("b", "a"), ("VB", "DT"))], "dev": [TaggedSentence(("c",), ("CC",))]}
    assert labels_in_order(splits) == ["CC", "DT", "VB"]
    assert labels_in_order(dict(reversed(splits.items()))) == ["CC", "DT", "VB"]


def test_hashable_files_give_the_archive_of_a_member_once(tmp_path):
    archive = tmp_path / "t.zip"
    archive.write_bytes(b"")
    plain = tmp_path / "a.mrg"
    assert hashable_files([archive / "x/a.mrg", archive / "x/b.mrg", plain]) == [archive, plain]


def test_to_iob2_rewrites_mention_opening_i_tags():
    skips = SkipCounter()
    tags = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG"]
    assert to_iob2(tags, "s:1", skips) == ("B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG")
    assert skips.counts == {SKIP_IOB1_TO_IOB2: 3} and skips.examples[SKIP_IOB1_TO_IOB2] == "s:1 token 1"
    assert to_iob2(["B-PER", "I-PER", "O"], "s:2", skips) == ("B-PER", "I-PER", "O")


def test_conll_sentences_drop_docstart_and_convert_iob1():
    skips = SkipCounter()
    sentences = read_conll2003_sentences([CONLL / "test.txt"], skips)
    assert [s.tokens[0] for s in sentences] == ["SOCCER", "Nadim", "AL-AIN", "New"]
    soccer = sentences[0]
    assert soccer.source == f"{CONLL / 'test.txt'}:3" and len(soccer.tokens) == 12
    assert soccer.tags[2] == "B-LOC"  # "JAPAN I-LOC" opens a mention
    assert sentences[3].tags == ("B-LOC", "I-LOC", "B-ORG", "I-ORG", "O")  # "European I-ORG" after I-LOC
    assert skips.counts == {SKIP_IOB1_TO_IOB2: 2}


def test_ner_source_keeps_the_official_split():
    data = NerSource(str(CONLL)).load()
    assert data.name == "ner" and data.token_level and data.labels == list(NER_LABELS)
    assert {split: len(sentences) for split, sentences in data.splits.items()} == {"train": 3, "dev": 2, "test": 4}
    assert data.splits["train"][1] == TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"),
                                                     f"{CONLL / 'train.txt'}:13")
    assert data.files == [CONLL / name for name in ("train.txt", "valid.txt", "test.txt")]
    assert data.skips.counts == {SKIP_IOB1_TO_IOB2: 2}


@pytest.mark.parametrize(
    "line, problem",
    [("EU NNP B-NP", "expected 4 space-separated columns"), ("EU NNP B-NP B-COMPANY", "unknown NER tag 'B-COMPANY'")],
)
def test_ner_line_errors_name_file_and_line(tmp_path, line, problem):
    path = tmp_path / "train.txt"
    path.write_text(f"-DOCSTART- -X- -X- O\n\nPeter NNP B-NP B-PER\n{line}\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read_conll2003_sentences([path], SkipCounter())
    assert caught.value.path == str(path) and caught.value.line == 4 and problem in caught.value.problem


def test_ner_file_without_tokens_is_an_error(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="no token lines"):
        read_conll2003_sentences([path], SkipCounter())


def test_ner_source_files_setting():
    data = NerSource(str(CONLL), files={"train": ["train.txt", "test.txt"], "dev": "valid.txt"}).load()
    assert {split: len(sentences) for split, sentences in data.splits.items()} == {"train": 7, "dev": 2}
    with pytest.raises(DataFormatError, match="no dev data"):
        NerSource(str(CONLL), files={"train": "train.txt"}).load()
    with pytest.raises(DataFormatError, match="missing CoNLL-2003 files"):
        NerSource(str(CONLL), files={"train": "train.txt", "dev": "nope.txt"}).load()


def test_ner_source_on_a_folder_without_test_txt_has_no_test_split(tmp_path):
    for name in ("train.txt", "valid.txt"):
        (tmp_path / name).write_text((CONLL / name).read_text(encoding="utf-8"), encoding="utf-8")
    data = NerSource(str(tmp_path)).load()
    assert {split: len(sentences) for split, sentences in data.splits.items()} == {"train": 3, "dev": 2}
    assert data.files == [tmp_path / "train.txt", tmp_path / "valid.txt"]
    # a test file named in data.source.files must be there: only the default test.txt may be missing
    with pytest.raises(DataFormatError, match="missing CoNLL-2003 files") as caught:
        NerSource(str(tmp_path), files={"train": "train.txt", "dev": "valid.txt", "test": "test.txt"}).load()
    assert "test.txt" in caught.value.problem
    (tmp_path / "valid.txt").unlink()
    with pytest.raises(DataFormatError, match="missing CoNLL-2003 files") as caught:
        NerSource(str(tmp_path)).load()
    assert "valid.txt" in caught.value.problem and "test.txt" not in caught.value.problem


def fake_conll(monkeypatch):
    import datasets

    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=list(NER_LABELS)))})

    def rows(tokens, tags):
        return datasets.Dataset.from_dict({"tokens": tokens, "ner_tags": tags}, features=features)

    fake = datasets.DatasetDict({
        "train": rows([["-DOCSTART-"], ["EU", "rejects", "German"], []], [[0], [3, 0, 7], []]),
        "validation": rows([["Peter", "Blackburn"]], [[2, 2]]),
        "test": rows([["Japan"]], [[5]]),
    })
    monkeypatch.setattr(datasets, "load_dataset", lambda name: fake)


def test_hub_rows_become_sentences(monkeypatch):
    fake_conll(monkeypatch)
    skips = SkipCounter()
    splits = load_conll2003_sentences_from_hub("conll2003", skips)
    assert splits == {
        "train": [TaggedSentence(("EU", "rejects", "German"), ("B-ORG", "O", "B-MISC"), "conll2003:train:1")],
        "dev": [TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"), "conll2003:validation:0")],
        "test": [TaggedSentence(("Japan",), ("B-LOC",), "conll2003:test:0")],
    }
    assert skips.counts == {SKIP_HUB_EMPTY_ROW: 2, SKIP_IOB1_TO_IOB2: 1}
    data = NerSource().load()
    assert data.files == [] and data.labels == list(NER_LABELS) and len(data.splits["train"]) == 1


@pytest.mark.shared_data
def test_real_conll_sentences_tokens_and_mentions(shared_data):
    data = NerSource(str(shared_data / "conll2003")).load()
    sizes = {split: (len(s), sum(len(x.tokens) for x in s)) for split, s in data.splits.items()}
    assert sizes == {"train": (14041, 203621), "dev": (3250, 51362), "test": (3453, 46435)}  # the README's counts
    assert data.skips.total() == 0  # IOB2 throughout: nothing converted
    begins = Counter(tag for sentence in data.splits["train"] for tag in sentence.tags if tag.startswith("B-"))
    assert begins == {"B-LOC": 7140, "B-MISC": 3438, "B-ORG": 6321, "B-PER": 6600}
