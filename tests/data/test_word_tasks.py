"""Word-level probing tasks: CoNLL-U columns (UPOS, XPOS, DEPREL pairs, FEATS), CoNLL-2003 entity types, STREUSLE
supersenses and JSONL tasks, with the splits rule, unseen labels and the "every word" rows computed by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probing.data.conllu import SKIP_EMPTY_NODE, SKIP_MULTIWORD
from probing.data.streusle import NOUN_SUPERSENSES, SKIP_VERB
from probing.data.task_sources import bundled_pos_paths
from probing.data.word_tasks import (
    SKIP_ROOT,
    Conll2003WordTask,
    ConlluWordTask,
    JsonlWordTask,
    StreusleWordTask,
    read_word_task,
    skip_no_tag,
    unseen_label_summary,
)
from probing.errors import ConfigError, DataFormatError


def conllu_line(*columns) -> str:
    """A CoNLL-U word line; LEMMA, DEPS and MISC are "_"."""
    word_id, form, upos, xpos, feats, head, deprel = columns
    return "\t".join(map(str, (word_id, form, "_", upos, xpos, feats, head, deprel, "_", "_")))


TRAIN = [
    "# sent_id = 1",                                                      # line 1
    conllu_line(1, "The", "DET", "DT", "Definite=Def|PronType=Art", 2, "det"),
    conllu_line(2, "cats", "NOUN", "NNS", "Number=Plur", 5, "nsubj"),
    "3-4\tdon't\t_\t_\t_\t_\t_\t_\t_\t_",                                  # multiword token, skipped
    conllu_line(3, "do", "AUX", "VBP", "Mood=Ind|Number=Plur", 5, "aux"),
    conllu_line(4, "n't", "PART", "RB", "Polarity=Neg", 5, "advmod"),
    conllu_line(5, "sleep", "VERB", "VB", "VerbForm=Inf", 0, "root"),      # line 7: root arc
    conllu_line(6, ".", "PUNCT", ".", "_", 5, "punct"),
    "",
    conllu_line(1, "Dog", "NOUN", "NN", "Number=Sing", 2, "nsubj"),        # line 10
    conllu_line(2, "barks", "VERB", "VBZ", "Number=Sing|Person=3", 0, "root"),
    "2.1\tbark\t_\t_\t_\t_\t_\t_\t_\t_",                                   # empty node, skipped
    conllu_line(3, "loudly", "_", "RB", "_", 2, "advmod:emph"),            # no UPOS: skipped for upos only
    "",
]
DEV = [
    conllu_line(1, "Wow", "INTJ", "UH", "_", 2, "discourse"),              # labels train never saw
    conllu_line(2, "cats", "NOUN", "NNS", "Number=Plur", 0, "root"),
    conllu_line(3, "!", "PUNCT", ".", "_", 2, "punct"),
]
TEST = [
    "# text = Cats sleep",
    conllu_line(1, "Cats", "NOUN", "NNS", "Number=Plur", 2, "nsubj"),
    conllu_line(2, "sleep", "VERB", "VBP", "_", 0, "root"),
]
S0 = ("The", "cats", "do", "n't", "sleep", ".")
S1 = ("Dog", "barks", "loudly")


@pytest.fixture
def treebank(tmp_path):
    for split, lines in (("train", TRAIN), ("dev", DEV), ("test", TEST)):
        (tmp_path / f"x-{split}.conllu").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def examples(split, labels):
    """(sentence, word, label) of each example, or (sentence, word, second, label) for pair tasks."""
    rows = zip(split.sentence.tolist(), split.word.tolist(), split.label.tolist())
    if split.second is None:
        return [(s, w, labels[label]) for s, w, label in rows]
    return [(s, w, second, labels[label]) for (s, w, label), second in zip(rows, split.second.tolist())]


def test_upos_one_example_per_tagged_word(treebank):
    data = ConlluWordTask("upos", paths=str(treebank)).load_word_task()
    assert data.name == "upos" and not data.pair
    assert data.labels == ["AUX", "DET", "NOUN", "PART", "PUNCT", "VERB"]  # train's, sorted
    train = data.splits["train"]
    assert train.sentences == (S0, S1)
    assert train.sources == (f"{treebank / 'x-train.conllu'}:2", f"{treebank / 'x-train.conllu'}:10")
    assert examples(train, data.labels) == [
        (0, 0, "DET"), (0, 1, "NOUN"), (0, 2, "AUX"), (0, 3, "PART"), (0, 4, "VERB"), (0, 5, "PUNCT"),
        (1, 0, "NOUN"), (1, 1, "VERB"),  # "loudly" has UPOS "_"
    ]
    assert train.second is None and train.every_second_rows() is None
    assert train.word_types() == ["The", "cats", "do", "n't", "sleep", ".", "Dog", "barks"]
    assert data.skips.counts == {SKIP_MULTIWORD: 1, SKIP_EMPTY_NODE: 1, skip_no_tag("upos"): 1}
    assert data.files == [treebank / f"x-{split}.conllu" for split in ("train", "dev", "test")]


def test_xpos_labels_as_written(treebank):
    data = ConlluWordTask("xpos", paths=str(treebank)).load_word_task()
    assert examples(data.splits["train"], data.labels) == [
        (0, 0, "DT"), (0, 1, "NNS"), (0, 2, "VBP"), (0, 3, "RB"), (0, 4, "VB"), (0, 5, "."),
        (1, 0, "NN"), (1, 1, "VBZ"), (1, 2, "RB"),
    ]
    assert examples(data.splits["test"], data.labels) == [(0, 0, "NNS"), (0, 1, "VBP")]
    assert data.unseen_labels == {"dev": {"UH": 1}, "test": {}}


def test_deprel_pairs_dependent_and_head_root_arcs_skipped(treebank):
    data = ConlluWordTask("deprel", paths=str(treebank)).load_word_task()
    assert data.name == "deprel" and data.pair
    assert data.labels == ["advmod", "advmod:emph", "aux", "det", "nsubj", "punct"]  # subtypes kept
    train = data.splits["train"]
    assert examples(train, data.labels) == [  # (sentence, dependent, head, label), 0-based positions
        (0, 0, 1, "det"), (0, 1, 4, "nsubj"), (0, 2, 4, "aux"), (0, 3, 4, "advmod"), (0, 5, 4, "punct"),
        (1, 0, 1, "nsubj"), (1, 2, 1, "advmod:emph"),
    ]
    assert data.skips.counts[SKIP_ROOT] == 4  # one per sentence: 2 train, 1 dev, 1 test
    assert data.skips.examples[SKIP_ROOT] == f"{treebank / 'x-train.conllu'}:7"
    assert examples(data.splits["dev"], data.labels) == [(0, 2, 1, "punct")]
    assert data.unseen_labels == {"dev": {"discourse": 1}, "test": {}}
    assert examples(data.splits["test"], data.labels) == [(0, 0, 1, "nsubj")]


def test_every_word_rows_by_hand(treebank):
    train = ConlluWordTask("deprel", paths=str(treebank)).load_word_task().splits["train"]
    # sentence 0 has 6 words (rows 0-5), sentence 1 has 3 (rows 6-8)
    assert train.every_word_rows().tolist() == [0, 1, 2, 3, 5, 6, 8]
    assert train.every_second_rows().tolist() == [1, 4, 4, 4, 4, 7, 7]
    every = train.every_word()
    assert every == [(S0, i) for i in range(6)] + [(S1, i) for i in range(3)]
    words = [tokens[position] for tokens, position in every]
    assert [words[row] for row in train.every_word_rows()] == ["The", "cats", "do", "n't", ".", "Dog", "loudly"]
    assert [words[row] for row in train.every_second_rows()] == ["cats", "sleep", "sleep", "sleep", "sleep",
                                                                 "barks", "barks"]
    assert train.every_word_rows().dtype == np.int64 and len(train) == 7


def test_feats_number(treebank):
    data = ConlluWordTask("feats", feature="Number", paths=str(treebank)).load_word_task()
    assert data.name == "feats-Number" and data.labels == ["Plur", "Sing"]
    assert examples(data.splits["train"], data.labels) == [(0, 1, "Plur"), (0, 2, "Plur"), (1, 0, "Sing"),
                                                           (1, 1, "Sing")]
    assert examples(data.splits["dev"], data.labels) == [(0, 1, "Plur")]
    assert data.skips.counts == {SKIP_MULTIWORD: 1, SKIP_EMPTY_NODE: 1}  # words without Number are no skips


def test_unseen_labels_are_left_out_counted_and_summarised(treebank):
    data = ConlluWordTask("upos", paths=str(treebank)).load_word_task()
    assert "INTJ" not in data.labels
    assert examples(data.splits["dev"], data.labels) == [(0, 1, "NOUN"), (0, 2, "PUNCT")]
    assert data.unseen_labels == {"dev": {"INTJ": 1}, "test": {}}
    assert unseen_label_summary(data) == "dev: 1 examples left out, label not in train: INTJ (1)"
    assert unseen_label_summary(ConlluWordTask("feats", "Number", str(treebank)).load_word_task()) == \
        "no unseen labels"


def test_dev_left_without_seen_labels_is_an_error(treebank):
    (treebank / "x-dev.conllu").write_text(conllu_line(1, "Wow", "INTJ", "UH", "_", 0, "root") + "\n")
    with pytest.raises(DataFormatError, match="no dev example has a label seen in train"):
        ConlluWordTask("upos", paths=str(treebank)).load_word_task()


@pytest.mark.parametrize(
    "column, bad_line, problem",
    [
        ("upos", "2\tcat\t_\tNOUN\tNN\t_\t1\tdep\t_", "expected 10 tab-separated columns, got 9"),
        ("upos", conllu_line(3, "cat", "NOUN", "NN", "_", 1, "dep"), "word ID '3' where 2 comes next"),
        ("deprel", conllu_line(2, "cat", "NOUN", "NN", "_", "x", "dep"), "HEAD 'x' of 'cat' is not an integer"),
        ("deprel", conllu_line(2, "cat", "NOUN", "NN", "_", 3, "dep"), "HEAD 3 of 'cat' is outside the sentence's 2"),
        ("deprel", conllu_line(2, "cat", "NOUN", "NN", "_", -1, "dep"), "HEAD '-1' of 'cat' is not an integer"),
        ("deprel", conllu_line(2, "cat", "NOUN", "NN", "_", 2, "dep"), "HEAD 2 of 'cat' is its own ID"),
        ("feats", conllu_line(2, "cat", "NOUN", "NN", "Plur", 1, "dep"), "FEATS entry 'Plur' is not Name=Value"),
    ],
)
def test_bad_conllu_lines_name_file_and_line(tmp_path, column, bad_line, problem):
    path = tmp_path / "x-train.conllu"
    path.write_text(conllu_line(1, "a", "DET", "DT", "_", 0, "root") + "\n" + bad_line + "\n", encoding="utf-8")
    feature = "Number" if column == "feats" else None
    with pytest.raises(DataFormatError) as caught:
        ConlluWordTask(column, feature, paths=str(path)).load_word_task()
    assert (caught.value.path, caught.value.line) == (str(path), 2)
    assert problem in caught.value.problem and "Fix:" in str(caught.value)


def test_an_empty_conllu_file_is_an_error(tmp_path):
    path = tmp_path / "x-train.conllu"
    path.write_text("", encoding="utf-8")
    with pytest.raises(DataFormatError, match="no sentences") as caught:
        ConlluWordTask(paths=str(path)).load_word_task()
    assert caught.value.path == str(path) and "data.source.paths" in caught.value.fix


def words_headed_by(*heads) -> list[str]:
    """The word lines w1, w2, ... of one sentence, word i headed by heads[i - 1] (UPOS X, XPOS Ti, DEPREL di)."""
    return [conllu_line(i, f"w{i}", "X", f"T{i}", "_", head, f"d{i}") for i, head in enumerate(heads, start=1)]


@pytest.mark.parametrize(
    "heads, word, cycle",
    [
        ((0, 3, 2), 2, "2 'w2' -> 3 'w3' -> 2 'w2'"),
        ((2, 1, 0), 1, "1 'w1' -> 2 'w2' -> 1 'w1'"),
        ((2, 3, 4, 2), 2, "2 'w2' -> 3 'w3' -> 4 'w4' -> 2 'w2'"),  # word 1 hangs from the cycle
    ],
)
def test_cyclic_heads_are_refused_at_the_first_word_of_the_cycle(tmp_path, heads, word, cycle):
    path = tmp_path / "x-train.conllu"
    # a proper one-word sentence first (lines 1-2), so the cyclic sentence's word i is on line 2 + i
    path.write_text("\n".join([*words_headed_by(0), "", *words_headed_by(*heads)]) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        ConlluWordTask("deprel", paths=str(path)).load_word_task()
    assert (caught.value.path, caught.value.line) == (str(path), 2 + word)
    assert caught.value.problem == f"the HEADs of {cycle} form a cycle: these words never reach the root 0"
    assert "task=upos" in caught.value.fix


def test_a_chain_of_heads_down_to_the_root_is_a_tree(tmp_path):
    chain = words_headed_by(0, 1, 2, 3, 4)  # w5 -> w4 -> w3 -> w2 -> w1 -> root
    (tmp_path / "x-train.conllu").write_text("\n".join([*chain, "", *chain]) + "\n", encoding="utf-8")
    (tmp_path / "x-dev.conllu").write_text("\n".join(chain) + "\n", encoding="utf-8")
    data = ConlluWordTask("deprel", paths=str(tmp_path), dev_fraction=0.5).load_word_task()
    assert examples(data.splits["test"], data.labels) == [(0, 1, 0, "d2"), (0, 2, 1, "d3"), (0, 3, 2, "d4"),
                                                          (0, 4, 3, "d5")]


def test_a_file_whose_every_head_is_the_root_has_no_word_pairs(tmp_path):
    train, dev = tmp_path / "x-train.conllu", tmp_path / "x-dev.conllu"
    train.write_text("\n".join([*words_headed_by(0, 1), "", *words_headed_by(2, 0)]) + "\n", encoding="utf-8")
    dev.write_text("\n".join([*words_headed_by(0, 0, 0), "", *words_headed_by(0, 0)]) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        ConlluWordTask("deprel", paths=str(tmp_path)).load_word_task()
    assert (caught.value.path, caught.value.line) == (str(dev), None)
    assert caught.value.problem == ("every word's HEAD is 0, so every arc is a root and there are no word pairs: "
                                    "the file has no dependency trees")
    assert "a treebank with heads" in caught.value.fix and "task=upos" in caught.value.fix
    xpos = ConlluWordTask("xpos", paths=str(tmp_path), dev_fraction=0.5).load_word_task()  # reads no heads
    assert xpos.splits["test"].sentences == (("w1", "w2", "w3"), ("w1", "w2"))


def feature_values(path) -> dict[str, dict[str, int]]:
    """Each FEATS feature of a CoNLL-U file: how many words have each of its values, read line by line."""
    values: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        columns = line.split("\t")
        if len(columns) == 10 and columns[0].isdigit() and columns[5] != "_":
            for entry in columns[5].split("|"):
                name, _, value = entry.partition("=")
                counts = values.setdefault(name, {})
                counts[value] = counts.get(value, 0) + 1
    return values


@pytest.mark.parametrize("feature", ["Poss", "Abbr", "Reflex", "Typo", "Foreign", "Voice"])
def test_a_feature_with_one_value_in_training_is_refused_naming_features_with_more(feature):
    values = feature_values(bundled_pos_paths()[0])  # the bundled training file
    ((only, count),) = values[feature].items()
    several = sorted(name for name, counts in values.items() if len(counts) >= 2)
    assert {"Case", "Number", "Tense"} <= set(several) and feature not in several
    with pytest.raises(ConfigError) as caught:
        ConlluWordTask("feats", feature=feature).load_word_task()
    assert str(caught.value) == (
        f"feature={feature}: the training split has only the label {only!r} ({count} examples), so there is "
        "nothing to tell apart. Fix: a feature with at least two values, e.g. feature=Number; the features "
        f"with two or more values in the training files: {', '.join(several)}")


def test_a_column_with_one_label_in_training_is_refused(tmp_path):
    sentence = words_headed_by(0, 1, 1)  # every UPOS is X
    (tmp_path / "x-train.conllu").write_text("\n".join([*sentence, "", *sentence]) + "\n", encoding="utf-8")
    (tmp_path / "x-dev.conllu").write_text("\n".join(sentence) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        ConlluWordTask("upos", paths=str(tmp_path)).load_word_task()
    assert (caught.value.path, caught.value.line) == (str(tmp_path), None)
    assert caught.value.problem == "the training split has only the label 'X' (6 examples), so there is nothing to " \
                                   "tell apart"
    assert "at least two different UPOS labels" in caught.value.fix


@pytest.mark.parametrize(
    "task, kwargs, message",
    [
        (ConlluWordTask, {"column": "lemma"}, r"^column='lemma' is not one of upos, xpos, deprel, feats"),
        (ConlluWordTask, {"column": "feats"}, r"^feature=None .* Fix: feature=Number"),
        (ConlluWordTask, {"column": "upos", "feature": "Number"}, r"^feature='Number' only applies to column=feats"),
        (ConlluWordTask, {"dev_fraction": 0}, r"^dev_fraction=0 leaves its split empty"),
        (ConlluWordTask, {"dev_fraction": 1.5}, r"^dev_fraction=1\.5 is not a number in \[0, 1\)"),
        (ConlluWordTask, {"seed": "1"}, r"^seed='1' is not an integer"),
        (ConlluWordTask, {"splits": {"validation": "*"}}, r"data\.source\.splits names the split 'validation'"),
        (ConlluWordTask, {"paths": []}, r"^paths must be a path"),
        (StreusleWordTask, {"dev_fraction": 0.5, "test_fraction": 0.5}, r"leaves no training data"),
        (StreusleWordTask, {"include_verbs": "no"}, r"^include_verbs must be true or false"),
        (Conll2003WordTask, {"files": ["train.txt"]}, r"^files must map splits"),
        (JsonlWordTask, {}, r"^path is not set"),
    ],
)
def test_config_errors(task, kwargs, message):
    """Built in Python, a source names its own arguments where it marks them; from the config, the keys the user sets
    (tests/test_setting_keys.py)."""
    with pytest.raises(ConfigError, match=message):
        task(**kwargs)


def test_bundled_sample_upos_dev_carved_from_train_dev_file_is_test():
    data = ConlluWordTask().load_word_task()
    train_file, dev_file = bundled_pos_paths()
    splits = data.splits
    assert all(len(split) for split in splits.values())
    sources = {name: set(split.sources) for name, split in splits.items()}
    assert not (sources["train"] & sources["dev"] or sources["train"] & sources["test"]
                or sources["dev"] & sources["test"])
    # the bundled dev file (189 sentences, 2541 words, every word with a UPOS) is the probing test split
    assert all(source.startswith(f"{dev_file}:") for source in sources["test"])
    assert (len(splits["test"].sentences), len(splits["test"])) == (189, 2541)
    # dev: a fifth of the 651 training sentences, whole sentences
    assert all(source.startswith(f"{train_file}:") for source in sources["train"] | sources["dev"])
    assert (len(splits["train"].sentences), len(splits["dev"].sentences)) == (651 - 130, 130)
    assert len(splits["train"]) + len(splits["dev"]) == 8304
    again = ConlluWordTask(seed=0).load_word_task().splits
    assert again["dev"].sources == splits["dev"].sources
    assert np.array_equal(again["dev"].label, splits["dev"].label)
    assert ConlluWordTask(seed=1).load_word_task().splits["dev"].sources != splits["dev"].sources
    # the tasks of one corpus share their split sentences for a seed (deprel drops one-word sentences: no arc)
    deprel = ConlluWordTask("deprel").load_word_task().splits
    assert set(deprel["dev"].sources) <= sources["dev"] and set(deprel["train"].sources) <= sources["train"]


def test_read_word_task_logs_unseen_labels(caplog):
    with caplog.at_level("WARNING"):
        data = read_word_task(ConlluWordTask("deprel"))
    assert data.unseen_labels["test"] == {"csubj:pass": 1}  # in the bundled dev file only
    assert "test: 1 examples left out, label not in train: csubj:pass (1)" in caplog.text


def write_conll2003(path, *sentences):
    """A CoNLL-2003 file: a -DOCSTART- line, then the sentences, each a list of (WORD, POS, CHUNK, NER) rows."""
    blocks = ["-DOCSTART- -X- -X- O"] + ["\n".join(" ".join(row) for row in sentence) for sentence in sentences]
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")


def test_conll2003_entity_types(tmp_path):
    def write(name, *sentences):
        write_conll2003(tmp_path / name, *sentences)

    write("train.txt", [("John", "NNP", "B-NP", "B-PER"), ("Smith", "NNP", "I-NP", "I-PER"),
                        ("runs", "VBZ", "B-VP", "O")], [("Bonn", "NNP", "B-NP", "I-LOC")])
    write("valid.txt", [("Acme", "NNP", "B-NP", "B-ORG"), ("Ann", "NNP", "I-NP", "B-PER")])
    write("test.txt", [("Paris", "NNP", "B-NP", "B-LOC")])
    data = Conll2003WordTask(data_dir=str(tmp_path)).load_word_task()
    assert data.name == "ner" and data.labels == ["LOC", "O", "PER"]
    train = data.splits["train"]
    assert train.sentences == (("John", "Smith", "runs"), ("Bonn",))
    assert train.sources == (f"{tmp_path / 'train.txt'}:3", f"{tmp_path / 'train.txt'}:7")
    assert examples(train, data.labels) == [(0, 0, "PER"), (0, 1, "PER"), (0, 2, "O"), (1, 0, "LOC")]
    assert examples(data.splits["dev"], data.labels) == [(0, 1, "PER")]
    assert data.unseen_labels == {"dev": {"ORG": 1}, "test": {}}
    assert examples(data.splits["test"], data.labels) == [(0, 0, "LOC")]
    assert data.files == [tmp_path / name for name in ("train.txt", "valid.txt", "test.txt")]
    assert data.skips.total() == 1  # the IOB1-style I-LOC read as B-LOC, counted


def test_a_conll2003_folder_without_test_txt_probes_its_valid_file_as_test(tmp_path):
    train = [[(f"Ann{i}", "NNP", "B-NP", "B-PER"), ("ran", "VBD", "B-VP", "O")] for i in range(5)]
    write_conll2003(tmp_path / "train.txt", *train)
    write_conll2003(tmp_path / "valid.txt", [("Bonn", "NNP", "B-NP", "B-LOC"), ("Ann", "NNP", "I-NP", "B-PER")])
    data = Conll2003WordTask(data_dir=str(tmp_path), dev_fraction=0.2).load_word_task()
    assert data.files == [tmp_path / "train.txt", tmp_path / "valid.txt"]
    assert data.splits["test"].sentences == (("Bonn", "Ann"),)  # no test file: valid.txt is the probing test split
    assert examples(data.splits["test"], data.labels) == [(0, 1, "PER")] and data.unseen_labels["test"] == {"LOC": 1}
    carved = [data.splits[split].sentences for split in ("train", "dev")]
    assert (len(carved[0]), len(carved[1])) == (4, 1) and sorted(carved[0] + carved[1]) == sorted(
        tuple(word for word, *_ in sentence) for sentence in train)


def test_streusle_supersenses_last_word_of_multiword_units():
    data = StreusleWordTask().load_word_task()
    assert data.name == "supersense" and data.labels == sorted(data.labels)
    assert set(data.labels) <= set(NOUN_SUPERSENSES) and len(data.labels) > 20
    assert data.skips.counts[SKIP_VERB] > 0
    # "Salad bar is hit and miss ...": the unit "salad bar" (lines 160-161, n.FOOD) is one example, on "bar"
    where = [(name, index) for name, split in data.splits.items() for index, source in enumerate(split.sources)
             if source.endswith("streusle.ud_dev.conllulex:160")]
    assert len(where) == 1
    name, index = where[0]
    split = data.splits[name]
    assert split.sentences[index][:2] == ("Salad", "bar")
    mine = split.sentence == index
    assert [data.labels[label] for label in split.label[mine]][:1] == ["n.FOOD"]
    assert split.word[mine].tolist()[0] == 1 and 0 not in split.word[mine].tolist()
    sources = [set(split.sources) for split in data.splits.values()]
    assert not (sources[0] & sources[1] or sources[0] & sources[2] or sources[1] & sources[2])
    assert StreusleWordTask(seed=0).load_word_task().splits["test"].sources == data.splits["test"].sources


def write_jsonl(path, *items):
    path.write_text("".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items),
                    encoding="utf-8")
    return path


def test_jsonl_folder_with_labels(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", {"tokens": ["The", "cat", "sat"], "labels": ["DET", "NOUN", None]},
                "", {"tokens": ["Dogs", "bark"], "labels": ["NOUN", "VERB"]})
    write_jsonl(tmp_path / "dev.jsonl", {"tokens": ["A", "dog"], "labels": ["DET", "NOUN"]})
    write_jsonl(tmp_path / "test.jsonl", {"tokens": ["Hi", "cats"], "labels": ["INTJ", "NOUN"]},
                {"tokens": ["no", "labels"], "labels": [None, None]})
    data = JsonlWordTask(str(tmp_path)).load_word_task()
    assert data.name == "jsonl" and not data.pair and data.labels == ["DET", "NOUN", "VERB"]
    train = data.splits["train"]
    assert train.sources == (f"{tmp_path / 'train.jsonl'}:1", f"{tmp_path / 'train.jsonl'}:3")
    assert examples(train, data.labels) == [(0, 0, "DET"), (0, 1, "NOUN"), (1, 0, "NOUN"), (1, 1, "VERB")]
    assert train.every_word_rows().tolist() == [0, 1, 3, 4]
    assert examples(data.splits["test"], data.labels) == [(0, 1, "NOUN")]
    assert data.splits["test"].sentences == (("Hi", "cats"),)  # a sentence without examples is not kept
    assert data.unseen_labels == {"dev": {}, "test": {"INTJ": 1}}
    assert data.files == [tmp_path / f"{split}.jsonl" for split in ("train", "dev", "test")]


def test_jsonl_one_file_with_split_field_pairs_and_no_test(tmp_path):
    train = [{"split": "train", "tokens": [f"w{i}", "eats", "x"], "targets": [[0, 1, "nsubj"], [2, 1, "obj"]]}
             for i in range(9)]
    dev = {"split": "dev", "tokens": ["She", "eats"], "targets": [[0, 1, "nsubj"]]}
    path = write_jsonl(tmp_path / "task.jsonl", *train[:4], dev, *train[4:])
    data = JsonlWordTask(str(path), dev_fraction=0.2, seed=3).load_word_task()
    assert data.pair and data.labels == ["nsubj", "obj"]
    # no test data: the dev line is the test split, and 2 of the 9 training sentences (20%, rounded) are dev
    assert data.splits["test"].sources == (f"{path}:5",)
    assert (len(data.splits["train"].sentences), len(data.splits["dev"].sentences)) == (7, 2)
    assert set(data.splits["train"].sources).isdisjoint(data.splits["dev"].sources)
    dev_split = data.splits["dev"]
    assert dev_split.second.tolist() == [1, 1, 1, 1] and dev_split.word.tolist() == [0, 2, 0, 2]
    assert dev_split.every_second_rows().tolist() == [1, 1, 4, 4]
    assert JsonlWordTask(str(path), seed=3).load_word_task().splits["dev"].sources == dev_split.sources


GOOD = {"split": "train", "tokens": ["a", "b"], "labels": ["X", None]}


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"split": "train", "tokens": ["a"', "invalid JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        ({"split": "train", "labels": ["X"]}, 'no "tokens"'),
        ({"split": "train", "tokens": [], "labels": []}, '"tokens" must be a non-empty list'),
        ({"split": "train", "tokens": ["a", ""], "labels": ["X", "X"]}, '"tokens" must be non-empty strings'),
        ({"split": "train", "tokens": ["a", "b"], "labels": ["X"]}, "1 labels for 2 tokens"),
        ({"split": "train", "tokens": ["a"], "labels": [3]}, "label 3 of token 0 is not a non-empty string"),
        ({"split": "train", "tokens": ["a"]}, 'give either "labels" (one per token) or "targets", not neither'),
        ({"split": "train", "tokens": ["a"], "targets": [[1, "X"]]}, "word index 1 in target [1, 'X'] is outside"),
        ({"split": "train", "tokens": ["a"], "targets": [["0", "X"]]}, "word index '0' in target"),
        ({"split": "train", "tokens": ["a"], "targets": [[True, "X"]]}, "word index True in target"),
        ({"split": "train", "tokens": ["a"], "targets": [[0, 5]]}, "label 5 in target [0, 5] is not a non-empty"),
        ({"split": "train", "tokens": ["a"], "targets": [[0]]}, "target [0] is not [i, label] or [i, j, label]"),
        ({"split": "train", "tokens": ["a", "b"], "targets": [[1, 1, "X"]]},
         "target [1, 1, 'X'] pairs word 1 with itself"),
        ({"split": "train", "tokens": ["a", "b"], "targets": [[0, 1, "X"]]},
         "word-pair targets [i, j, label] after single-word targets [i, label] at"),
        ({"split": "validation", "tokens": ["a"], "labels": ["X"]}, "unknown split 'validation'"),
        ({"tokens": ["a"], "labels": ["X"]}, 'no "split"'),
    ],
)
def test_jsonl_refusals_name_file_and_line(tmp_path, line, problem):
    path = write_jsonl(tmp_path / "task.jsonl", GOOD, line)
    with pytest.raises(DataFormatError) as caught:
        JsonlWordTask(str(path)).load_word_task()
    assert (caught.value.path, caught.value.line) == (str(path), 2)
    assert problem in caught.value.problem and "Fix:" in str(caught.value)


def test_jsonl_without_train_or_dev_data(tmp_path):
    dev_only = write_jsonl(tmp_path / "dev_only.jsonl", {**GOOD, "split": "dev"})
    with pytest.raises(DataFormatError, match="no train data") as caught:
        JsonlWordTask(str(dev_only)).load_word_task()
    assert caught.value.path == str(dev_only)
    train_only = write_jsonl(tmp_path / "train_only.jsonl", GOOD, {**GOOD, "labels": ["Y", None]})
    with pytest.raises(DataFormatError, match="no dev data"):
        JsonlWordTask(str(train_only)).load_word_task()
    unlabelled = write_jsonl(tmp_path / "unlabelled.jsonl", GOOD, {**GOOD, "labels": ["Y", None]},
                             {**GOOD, "split": "dev", "labels": [None, None]})
    with pytest.raises(DataFormatError, match="no dev data"):
        JsonlWordTask(str(unlabelled)).load_word_task()


def test_jsonl_with_one_label_in_training_is_refused_naming_the_training_file(tmp_path):
    one_file = write_jsonl(tmp_path / "task.jsonl", GOOD, GOOD, {**GOOD, "split": "dev"})
    with pytest.raises(DataFormatError) as caught:
        JsonlWordTask(str(one_file)).load_word_task()
    assert (caught.value.path, caught.value.line) == (str(one_file), None)
    assert caught.value.problem == "the training split has only the label 'X' (2 examples), so there is nothing to " \
                                   "tell apart"
    assert "at least two different labels" in caught.value.fix
    folder = tmp_path / "folder"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", {"tokens": ["a", "b"], "labels": ["X", None]})
    write_jsonl(folder / "dev.jsonl", {"tokens": ["a", "b"], "labels": ["Y", None]})
    with pytest.raises(DataFormatError, match="only the label 'X' \\(1 example\\)") as caught:
        JsonlWordTask(str(folder)).load_word_task()
    assert caught.value.path == str(folder / "train.jsonl")


def test_jsonl_left_with_one_training_label_after_carving_dev_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "task.jsonl", {**GOOD, "labels": ["A", None]}, {**GOOD, "labels": ["B", None]},
                       {**GOOD, "split": "dev", "labels": ["A", "B"]})
    with pytest.raises(DataFormatError) as caught:  # one of the two training sentences becomes dev
        JsonlWordTask(str(path), dev_fraction=0.5).load_word_task()
    assert caught.value.path == str(path)
    assert caught.value.problem in [f"after carving dev from the training sentences (data.source.dev_fraction, "
                                    f"data.source.seed), the training split has only the label {label!r} "
                                    "(1 example), so there is nothing to tell apart" for label in "AB"]


def test_jsonl_folder_refusals(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", GOOD)
    with pytest.raises(DataFormatError, match="no dev.jsonl in the folder") as caught:
        JsonlWordTask(str(tmp_path)).load_word_task()
    assert caught.value.path == str(tmp_path)
    write_jsonl(tmp_path / "dev.jsonl", {**GOOD, "split": "dev"}, GOOD)
    with pytest.raises(DataFormatError, match="\"split\": 'train' in dev.jsonl") as caught:
        JsonlWordTask(str(tmp_path)).load_word_task()
    assert (caught.value.path, caught.value.line) == (str(tmp_path / "dev.jsonl"), 2)
    with pytest.raises(DataFormatError, match="no such file or folder"):
        JsonlWordTask(str(tmp_path / "gone")).load_word_task()
    write_jsonl(tmp_path / "train.jsonl", {"tokens": ["a", "b"], "labels": ["X", "Y"]})
    write_jsonl(tmp_path / "dev.jsonl", {"tokens": ["a"], "labels": ["X"]})
    for empty in ([], [{"tokens": ["a"], "labels": [None]}]):  # a test file given without a label is no test split
        write_jsonl(tmp_path / "test.jsonl", *empty)
        with pytest.raises(DataFormatError, match=r"no labelled word in the test file. Fix: label its words, or "
                                                  r"remove test.jsonl \(dev then becomes the test split") as caught:
            JsonlWordTask(str(tmp_path)).load_word_task()
        assert caught.value.path == str(tmp_path / "test.jsonl")


def test_full_ewt_deprel_counts_are_consistent(shared_data):
    """Every word of the full EWT dev and test files is an arc example or its sentence's one root."""
    folder = shared_data / "ud_english_ewt"
    data = ConlluWordTask("deprel", paths=str(folder),
                          splits={"train": "*-dev.conllu", "dev": "*-test.conllu"}).load_word_task()
    n_words = n_sentences = 0
    for name in ("en_ewt-ud-dev.conllu", "en_ewt-ud-test.conllu"):
        for line in (folder / name).read_text(encoding="utf-8").splitlines():
            first = line.split("\t", 1)[0]
            n_words += first.isdigit()
            n_sentences += first == "1"
    n_examples = sum(len(split) for split in data.splits.values())
    n_unseen = sum(sum(counts.values()) for counts in data.unseen_labels.values())
    assert data.skips.counts[SKIP_ROOT] == n_sentences  # one root per sentence
    assert n_examples + n_unseen + data.skips.counts[SKIP_ROOT] == n_words
    for split in data.splits.values():
        lengths = np.array([len(tokens) for tokens in split.sentences])[split.sentence]
        assert (split.second >= 0).all() and (split.second < lengths).all() and (split.word < lengths).all()
        assert (split.word != split.second).all()
    assert {"nsubj", "obj", "nmod:poss", "compound"} <= set(data.labels)


def test_a_tagging_task_of_train_py_becomes_a_word_task_of_its_tags():
    from probing.data.records import SkipCounter
    from probing.data.task_records import TaggedSentence, TaskData
    from probing.data.word_tasks import tagging_word_task

    def sentence(*pairs):
        return TaggedSentence(tuple(word for word, _ in pairs), tuple(tag for _, tag in pairs), "f:1")

    train = [sentence(("The", "DT"), ("cat", "NN")), sentence(("Dogs", "NNS"), ("bark", "VBP")),
             sentence(("A", "DT"), ("dog", "NN")), sentence(("Birds", "NNS"), ("sing", "VBP"))]
    dev = [sentence(("Cats", "NNS"), ("purr", "VBP"), ("!", "."))]
    data = tagging_word_task(TaskData("pos", ["DT", "NN", "NNS", "VBP", "."], {"train": train, "dev": dev}, [],
                                      SkipCounter()), dev_fraction=0.25, seed=0)
    assert data.name == "pos" and not data.pair and data.labels == ["DT", "NN", "NNS", "VBP"]
    assert len(data.splits["train"].sentences) == 3 and len(data.splits["dev"].sentences) == 1
    assert data.splits["test"].sentences == (("Cats", "purr", "!"),)  # no test data: the dev file is the test split
    assert examples(data.splits["test"], data.labels) == [(0, 0, "NNS"), (0, 1, "VBP")]  # "." never seen in train
    assert data.unseen_labels["test"] == {".": 1}
