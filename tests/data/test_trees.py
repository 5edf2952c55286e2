"""Dependency trees for the structural probes: distances, depths and control trees of small trees computed by hand,
CoNLL-U and CoNLL-X reading (words, heads, punctuation, the one-root rule), the splits rule, and the bundled sample."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from probing.data.conllu import SKIP_EMPTY_NODE, SKIP_MULTIWORD, read_conllu_sentences, sentence_heads
from probing.data.records import SkipCounter
from probing.data.task_sources import SKIP_FILE_IN_NO_SPLIT
from probing.data.trees import (
    PUNCTUATION_XPOS,
    TreeSource,
    TreeSplit,
    control_heads,
    read_trees,
    tree_depths,
    tree_distances,
)
from probing.data.word_tasks import ConlluWordTask
from probing.errors import ConfigError, DataFormatError


def word_line(word_id, form, xpos, head) -> str:
    """A 10-column word line (CoNLL-U or CoNLL-X); only ID, FORM, column 5 (XPOS / POSTAG) and HEAD matter here."""
    return "\t".join(map(str, (word_id, form, "_", "_", xpos, "_", head, "dep", "_", "_")))


def write(path, *sentences) -> None:
    """Sentences (lists of lines) as a file, a blank line after each."""
    path.write_text("".join("\n".join(lines) + "\n\n" for lines in sentences), encoding="utf-8")


# "Cats do n't sleep ." with a multiword token and, in the second sentence, an empty node.
SENTENCE = [
    "# text = Cats don't sleep.",                  # line 1
    word_line(1, "Cats", "NNS", 4),                # line 2
    "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_",          # multiword token: no word
    word_line(2, "do", "VBP", 4),
    word_line(3, "n't", "RB", 4),
    word_line(4, "sleep", "VB", 0),
    word_line(5, ".", ".", 4),
]
SHORT = [
    word_line(1, "(", "-LRB-", 2),                 # line 9 of a file after SENTENCE
    word_line(2, "Wow", "UH", 0),
    "2.1\twow\t_\t_\t_\t_\t_\t_\t_\t_",            # empty node: no word
    word_line(3, ")", "-RRB-", 2),
]


def one_sentence(*heads) -> list[str]:
    return [word_line(number, f"w{number}", "NN", head) for number, head in enumerate(heads, start=1)]


def treebank(folder, train=1, dev=1, test=1, suffix=".conllu"):
    """A folder with `train`, `dev` and `test` sentences in tb-<split><suffix> files (no file for 0)."""
    folder.mkdir(exist_ok=True)
    for split, count in (("train", train), ("dev", dev), ("test", test)):
        if count:
            write(folder / f"tb-{split}{suffix}",
                  *[[word_line(1, "w1", "NN", 0), word_line(2, f"{split}{i}", "NN", 1)] for i in range(count)])
    return folder


# A chain with a branch: 0 -> 1 -> 2 (root) <- 3 <- 4.
CHAIN = np.array([1, 2, -1, 2, 3])


def test_distances_and_depths_of_a_small_tree():
    expected = np.array([[0, 1, 2, 3, 4],
                         [1, 0, 1, 2, 3],
                         [2, 1, 0, 1, 2],
                         [3, 2, 1, 0, 1],
                         [4, 3, 2, 1, 0]])
    np.testing.assert_array_equal(tree_distances(CHAIN), expected)
    np.testing.assert_array_equal(tree_depths(CHAIN), [2, 1, 0, 1, 2])
    assert tree_distances(CHAIN).dtype == np.int64 and tree_depths(CHAIN).dtype == np.int64


def test_a_bushy_tree():
    # 2 heads 0, 1 and 4; 4 heads 3 and 5; 2 is the root.
    heads = np.array([2, 2, -1, 4, 2, 4])
    distances = tree_distances(heads)
    assert distances[0, 1] == 2 and distances[0, 3] == 3 and distances[3, 5] == 2 and distances[1, 5] == 3
    np.testing.assert_array_equal(distances, distances.T)
    np.testing.assert_array_equal(np.diag(distances), 0)
    np.testing.assert_array_equal(tree_depths(heads), [1, 1, 0, 2, 1, 2])


def test_a_one_word_sentence():
    np.testing.assert_array_equal(tree_distances(np.array([-1])), [[0]])
    np.testing.assert_array_equal(tree_depths(np.array([-1])), [0])


def test_several_roots_meet_at_a_virtual_root():
    # Roots 0 and 2; 1 hangs from 0, 3 from 2: 0 and 2 are 2 apart (through the virtual root), 1 and 3 are 4 apart.
    heads = np.array([-1, 0, -1, 2])
    np.testing.assert_array_equal(tree_distances(heads), [[0, 1, 2, 3],
                                                          [1, 0, 3, 4],
                                                          [2, 3, 0, 1],
                                                          [3, 4, 1, 0]])
    np.testing.assert_array_equal(tree_depths(heads), [0, 1, 0, 1])


@pytest.mark.parametrize("heads", [[1, 0], [0, -1], [-1, 2], [-2, -1], [[-1]], [-1.0]])
def test_heads_that_are_no_forest_are_refused(heads):
    # A cycle, a self-head, a head outside the sentence, a negative head other than -1, not 1-D, not integers.
    with pytest.raises(ValueError):
        tree_distances(np.array(heads))
    with pytest.raises(ValueError):
        tree_depths(np.array(heads))


@pytest.mark.parametrize(("behaviours", "heads"), [
    ([2, 0, 1, 2, 2], [-1, -1, 0, 4, -1]),   # word 0 a root whatever its behaviour; the last word with 2 a root
    ([1, 1, 1], [-1, 0, 0]),
    ([0, 2, 1], [-1, 2, 0]),                 # the last word with behaviour 1 hangs from word 0
    ([0, 0], [-1, -1]),
    ([2], [-1]),
])
def test_control_heads(behaviours, heads):
    np.testing.assert_array_equal(control_heads(np.array(behaviours)), heads)


def test_control_trees_are_forests_measured_through_the_virtual_root():
    heads = control_heads(np.array([2, 0, 1, 2, 2]))   # roots 0, 1, 4; 2 under 0, 3 under 4
    distances = tree_distances(heads)
    assert distances[2, 3] == 4 and distances[0, 1] == 2 and distances[1, 3] == 3 and distances[0, 2] == 1
    np.testing.assert_array_equal(tree_depths(heads), [0, 0, 1, 1, 0])


@pytest.mark.parametrize("behaviours", [[0, 3], [-1], [[0, 1]]])
def test_unknown_control_behaviours_are_refused(behaviours):
    with pytest.raises(ValueError, match="control behaviours"):
        control_heads(np.array(behaviours))


def test_conllu_words_heads_and_punctuation(tmp_path):
    write(tmp_path / "tb-train.conllu", SENTENCE, SHORT)
    write(tmp_path / "tb-test.conllu", SHORT)
    write(tmp_path / "tb-dev.conllu", SENTENCE)
    data = TreeSource(str(tmp_path)).load_trees()
    train = data.splits["train"]
    assert len(train) == 2 and len(data.splits["dev"]) == 1 and len(data.splits["test"]) == 1
    assert train.sentences == (("Cats", "do", "n't", "sleep", "."), ("(", "Wow", ")"))
    assert train.sources == (f"{tmp_path / 'tb-train.conllu'}:2", f"{tmp_path / 'tb-train.conllu'}:9")
    assert train.xpos[0] == ("NNS", "VBP", "RB", "VB", ".")
    # The multiword-token line and the empty node are no words: heads keep pointing at the words.
    np.testing.assert_array_equal(train.heads[0], [3, 3, 3, -1, 3])
    np.testing.assert_array_equal(train.heads[1], [1, -1, 1])
    assert train.heads[0].dtype == np.int64
    np.testing.assert_array_equal(train.depths(0), [1, 1, 1, 0, 1])
    np.testing.assert_array_equal(train.distances(0)[0], [0, 2, 2, 1, 2])
    np.testing.assert_array_equal(train.distances(1), [[0, 1, 2], [1, 0, 1], [2, 1, 0]])
    np.testing.assert_array_equal(train.punctuation(0), [False, False, False, False, True])
    np.testing.assert_array_equal(train.punctuation(1), [True, False, True])
    assert data.skips.counts[SKIP_MULTIWORD] == 2 and data.skips.counts[SKIP_EMPTY_NODE] == 2
    assert data.files == [tmp_path / f"tb-{split}.conllu" for split in ("train", "dev", "test")]
    assert data.name == "trees"


def test_punctuation_tags_are_the_references():
    assert {"''", ",", ".", ":", "``", "-LRB-", "-RRB-"} == PUNCTUATION_XPOS
    split = TreeSplit((("a", "b", "c", "d"),), ("f:1",), (np.array([-1, 0, 0, 0]),), (("HYPH", "$", "``", "_"),))
    np.testing.assert_array_equal(split.punctuation(0), [False, False, True, False])


def test_conllx_files_are_read_like_conllu(tmp_path):
    # The reference's PTB conversion: ptb3-wsj-<split>.conllx, POSTAG in column 5; .conll too.
    write(tmp_path / "ptb3-wsj-train.conllx", SENTENCE[1:2] + SENTENCE[3:], SHORT[:2] + SHORT[3:])
    write(tmp_path / "ptb3-wsj-dev.conll", SHORT[:2] + SHORT[3:])
    write(tmp_path / "ptb3-wsj-test.conllx", SHORT[:2] + SHORT[3:])
    (tmp_path / "notes-train.conllulex").write_text("not a treebank\n", encoding="utf-8")  # not read
    data = TreeSource(str(tmp_path)).load_trees()
    train = data.splits["train"]
    assert train.sentences[0] == ("Cats", "do", "n't", "sleep", ".") and train.xpos[1] == ("-LRB-", "UH", "-RRB-")
    np.testing.assert_array_equal(train.heads[0], [3, 3, 3, -1, 3])
    assert data.splits["dev"].sources[0].startswith(str(tmp_path / "ptb3-wsj-dev.conll:"))
    assert [path.name for path in data.files] == ["ptb3-wsj-train.conllx", "ptb3-wsj-dev.conll",
                                                  "ptb3-wsj-test.conllx"]


def test_a_folder_without_treebank_files_is_an_error(tmp_path):
    (tmp_path / "a-train.conllulex").write_text("x\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"no \*\.conllu, \*\.conllx, \*\.conll files"):
        TreeSource(str(tmp_path)).load_trees()


@pytest.mark.parametrize(("heads", "line", "problem"), [
    ((0, 1, 0), 3, r"2 words headed by 0 in this sentence \(1 'w1', 3 'w3'\)"),
    ((0, 0, 2), 3, r"2 words headed by 0 in this sentence \(1 'w1', 2 'w2'\)"),
    ((2, 3, 1), 3, r"no word headed by 0 in this sentence \(no root\)"),   # named before the cycle it makes
])
def test_a_sentence_needs_exactly_one_root(tmp_path, heads, line, problem):
    # The second sentence starts at line 3 (one one-word sentence, a blank line before it).
    write(tmp_path / "tb-train.conllu", one_sentence(0), one_sentence(*heads))
    write(tmp_path / "tb-test.conllu", one_sentence(0))
    with pytest.raises(DataFormatError, match=problem) as error:
        TreeSource(str(tmp_path)).load_trees()
    assert error.value.line == line and error.value.path == str(tmp_path / "tb-train.conllu")
    assert "one root" in error.value.fix


def test_the_other_readers_of_heads_still_accept_several_roots(tmp_path):
    write(tmp_path / "forest.conllu", one_sentence(0, 1, 0))
    (words,) = read_conllu_sentences(tmp_path / "forest.conllu", SkipCounter())
    assert sentence_heads(words, tmp_path / "forest.conllu") == [0, 1, 0]


@pytest.mark.parametrize(("heads", "line", "problem"), [((2, 1, 0), 1, "form a cycle"), ((0, 2), 2, "its own ID"),
                                                        ((0, 5), 2, "outside the sentence")])
def test_heads_that_are_no_tree_name_the_line(tmp_path, heads, line, problem):
    write(tmp_path / "tb-train.conllu", one_sentence(*heads))
    with pytest.raises(DataFormatError, match=problem) as error:
        TreeSource(str(tmp_path)).load_trees()
    assert error.value.line == line


def test_train_dev_and_test_files_are_kept(tmp_path):
    data = TreeSource(str(treebank(tmp_path, train=3, dev=2, test=1))).load_trees()
    assert {split: len(trees) for split, trees in data.splits.items()} == {"train": 3, "dev": 2, "test": 1}
    assert data.splits["dev"].sentences[1] == ("w1", "dev1")


def test_without_test_files_dev_becomes_test_and_dev_is_carved_from_train(tmp_path):
    source = TreeSource(str(treebank(tmp_path, train=10, dev=2, test=0)), dev_fraction=0.3, seed=1)
    data = source.load_trees()
    assert {split: len(trees) for split, trees in data.splits.items()} == {"train": 7, "dev": 3, "test": 2}
    assert [words[1] for words in data.splits["test"].sentences] == ["dev0", "dev1"]
    train, dev = ({words[1] for words in data.splits[split].sentences} for split in ("train", "dev"))
    assert train | dev == {f"train{i}" for i in range(10)} and not train & dev
    assert dev == {words[1] for words in source.load_trees().splits["dev"].sentences}  # seeded
    other = TreeSource(str(tmp_path), dev_fraction=0.3, seed=2).load_trees().splits["dev"]
    assert dev != {words[1] for words in other.sentences}
    order = [int(words[1][5:]) for words in data.splits["train"].sentences]
    assert order == sorted(order)  # file order kept


def test_without_dev_files_dev_is_carved_from_train(tmp_path):
    # Train on one corpus file and test on another: splits={train: *-dev.conllu, test: *-test.conllu}.
    folder = treebank(tmp_path, train=0, dev=5, test=2)
    data = TreeSource(str(folder), splits={"train": "*-dev.conllu", "test": "*-test.conllu"}).load_trees()
    assert {split: len(trees) for split, trees in data.splits.items()} == {"train": 4, "dev": 1, "test": 2}
    assert all(words[1].startswith("dev") for split in ("train", "dev") for words in data.splits[split].sentences)


@pytest.mark.parametrize(("counts", "problem"), [
    ({"train": 0, "dev": 2, "test": 2}, "no training sentences"),
    ({"train": 3, "dev": 0, "test": 0}, "no dev or test sentences"),
    ({"train": 1, "dev": 0, "test": 2}, "leaves none to train on"),
    ({"train": 1, "dev": 2, "test": 0}, "leaves none to train on"),
])
def test_no_train_or_nothing_to_carve_is_an_error(tmp_path, counts, problem):
    with pytest.raises(DataFormatError, match=problem):
        TreeSource(str(treebank(tmp_path, **counts))).load_trees()


def test_files_in_no_split_are_counted(tmp_path):
    folder = treebank(tmp_path, train=2, dev=1, test=1)
    write(folder / "tb-extra.conllu", one_sentence(0))
    data = TreeSource(str(folder)).load_trees()
    assert data.skips.counts[SKIP_FILE_IN_NO_SPLIT] == 1 and len(data.files) == 3


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dev_fraction": 0}, "^dev_fraction=0 "),
    ({"dev_fraction": 1.0}, "^dev_fraction=1.0 "),
    ({"seed": "0"}, "^seed="),
    ({"splits": {"training": "*.conllu"}}, "data.source.splits names the split 'training'"),
    ({"paths": []}, "^paths must"),
])
def test_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TreeSource(**kwargs)


def test_read_trees_refuses_other_sources_and_logs_the_splits(caplog):
    with pytest.raises(ConfigError, match="data=ewt is not the data of a tree task"):
        read_trees(ConlluWordTask(), "ewt")
    with caplog.at_level(logging.INFO, logger="probing.data.trees"):
        data = read_trees(TreeSource())
    assert "trees test: 189 sentences" in caplog.text and "multiword-token line" in caplog.text
    assert len(data.splits["test"]) == 189


def test_the_bundled_sample_is_the_default():
    """The EWT sample: 651 training and 189 dev sentences, no test file; dev becomes test and 20% of train dev."""
    data = TreeSource().load_trees()
    assert {split: len(trees) for split, trees in data.splits.items()} == {"train": 521, "dev": 130, "test": 189}
    assert [path.name for path in data.files] == ["en_ewt-sample-train.conllu", "en_ewt-sample-dev.conllu"]
    train = data.splits["train"]
    # "From the AP comes this story :": From -> AP, the -> AP, AP -> comes (root), this -> story, story -> comes,
    # ":" -> comes.
    assert train.sentences[0] == ("From", "the", "AP", "comes", "this", "story", ":")
    np.testing.assert_array_equal(train.heads[0], [2, 2, 3, -1, 5, 3, 3])
    np.testing.assert_array_equal(train.depths(0), [2, 2, 1, 0, 2, 1, 1])
    distances = train.distances(0)
    assert distances[0, 1] == 2          # From - AP - the
    assert distances[0, 4] == 4          # From - AP - comes - story - this
    assert distances[1, 6] == 3          # the - AP - comes - :
    assert distances[4, 5] == 1          # this - story
    np.testing.assert_array_equal(train.punctuation(0), [False] * 6 + [True])


def test_full_ewt_dev_and_test(shared_data):
    """Train on EWT dev, test on EWT test: every sentence has one root, each word's depth is its distance to it."""
    folder = shared_data / "ud_english_ewt"
    data = TreeSource(str(folder), splits={"train": "*-dev.conllu", "test": "*-test.conllu"}).load_trees()
    n_sentences = {}
    for name in ("en_ewt-ud-dev.conllu", "en_ewt-ud-test.conllu"):
        lines = (folder / name).read_text(encoding="utf-8").splitlines()
        n_sentences[name] = sum(line.split("\t", 1)[0] == "1" for line in lines)
    assert len(data.splits["train"]) + len(data.splits["dev"]) == n_sentences["en_ewt-ud-dev.conllu"]
    assert len(data.splits["test"]) == n_sentences["en_ewt-ud-test.conllu"]
    assert round(0.2 * n_sentences["en_ewt-ud-dev.conllu"]) == len(data.splits["dev"])
    for split in data.splits.values():
        for index in range(0, len(split), 50):
            heads, depths, distances = split.heads[index], split.depths(index), split.distances(index)
            (root,) = np.flatnonzero(heads == -1)
            np.testing.assert_array_equal(depths, distances[root])
            dependents = np.flatnonzero(heads >= 0)
            assert (distances[dependents, heads[dependents]] == 1).all()
