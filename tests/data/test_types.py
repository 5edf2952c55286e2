"""Type-level probing data (Zhao et al. 2020 Fig. 1): word -> set of s-classes, from records or the Wiki-PSE lists."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from probing.data.records import WordInContext
from probing.data.types import (
    TypeLevelData,
    WordTypes,
    type_summary,
    types_from_records,
    wikipse_types,
)
from probing.data.wikipse import SKIP_EMPTY_NAME
from probing.errors import ConfigError, DataFormatError, ProbingError
from tests.helpers import FIXTURES

WIKIPSE_FIXTURES = FIXTURES / "data" / "wiki_pse"
FIXTURE_CLASSES = ["location", "person", "organization", "art", "living_thing", "food", "computer-programming_language"]


def record(word: str, sclass: str) -> WordInContext:
    return WordInContext(tuple(word.split("_")) + ("is", "here"), tuple(range(len(word.split("_")))), word, sclass)


# --- types_from_records ---------------------------------------------------------------------------------------


def test_types_from_records_unions_the_classes_of_each_word_in_first_seen_order():
    classes = ["food", "organization", "location"]
    splits = {
        "train": [record("apple", "organization"), record("paris", "location"), record("apple", "food"),
                  record("apple", "organization")],
        "dev": [record("quorn", "food")],
        "test": [record("new_york", "location"), record("new_york", "organization")],
    }
    data = types_from_records("toy", classes, splits, ["a.txt"])
    assert isinstance(data, TypeLevelData) and data.classes == classes and data.files == [Path("a.txt")]
    assert data.splits["train"].words == ["apple", "paris"]
    assert data.splits["train"].targets.tolist() == [[True, True, False], [False, False, True]]
    assert data.splits["dev"].targets.tolist() == [[True, False, False]]
    assert data.splits["test"].words == ["new_york"]
    assert data.splits["test"].targets.tolist() == [[False, True, True]]
    assert type_summary(data) == {
        "train": {"words": 2, "decisions_gold": 3},
        "dev": {"words": 1, "decisions_gold": 1},
        "test": {"words": 1, "decisions_gold": 2},
    }


def test_types_from_records_refuses_shared_words_and_unknown_classes():
    with pytest.raises(ProbingError, match="'apple' is in both the 'train' and 'test' splits"):
        types_from_records("toy", ["food"], {"train": [record("apple", "food")], "test": [record("apple", "food")]}, [])
    with pytest.raises(ProbingError, match="s-class 'person' of word 'apple' is not in the class inventory"):
        types_from_records("toy", ["food"], {"train": [record("apple", "person")]}, [])


def test_empty_split_has_a_zero_by_classes_target_matrix():
    data = types_from_records("toy", ["food", "art"], {"train": [], "dev": [record("a", "art")]}, [])
    assert data.splits["train"].words == [] and data.splits["train"].targets.shape == (0, 2)


def test_word_types_checks_the_target_shape_and_dtype():
    with pytest.raises(ValueError, match="targets must be bool"):
        WordTypes(["a", "b"], np.zeros((1, 3), dtype=bool))
    with pytest.raises(ValueError, match="targets must be bool"):
        WordTypes(["a"], np.zeros((1, 3)))


# --- wikipse_types on the fixture lists -----------------------------------------------------------------------


def test_wikipse_types_on_fixture_lists():
    data = wikipse_types(WIKIPSE_FIXTURES, dev_fraction=0.2, seed=0)
    assert data.name == "wikipse" and data.classes == FIXTURE_CLASSES
    # 4 train.tsv words, round(0.2 * 4) = 1 dev word: random.Random(0).sample(sorted words, 1) = ["roberta"].
    assert data.splits["dev"].words == ["roberta"]
    assert data.splits["train"].words == ["larch", "apple", "ken_williams"]
    assert data.splits["test"].words == ["party_of_progress_and_socialism", "quorn", "pine"]
    # roberta: art, person, location (frequencies ignored); larch: living_thing, computer-programming_language.
    assert data.splits["dev"].targets.astype(int).tolist() == [[1, 1, 0, 1, 0, 0, 0]]
    assert data.splits["train"].targets.astype(int).tolist() == [
        [0, 0, 0, 0, 1, 0, 1], [0, 0, 1, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0, 0]]
    assert data.splits["test"].targets.astype(int).tolist() == [
        [0, 0, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0]]
    assert type_summary(data) == {
        "train": {"words": 3, "decisions_gold": 5},
        "dev": {"words": 1, "decisions_gold": 3},
        "test": {"words": 3, "decisions_gold": 4},
    }
    assert [path.name for path in data.files] == ["semantic_classes.txt", "train.tsv", "test.tsv"]
    assert data.skips.total() == 0


def test_wikipse_types_dev_depends_on_seed_and_fraction():
    assert wikipse_types(WIKIPSE_FIXTURES, seed=2).splits["dev"].words == ["apple"]
    half = wikipse_types(WIKIPSE_FIXTURES, dev_fraction=0.5, seed=1)
    assert half.splits["dev"].words == ["larch", "ken_williams"]  # file order, not sample order
    assert wikipse_types(WIKIPSE_FIXTURES, dev_fraction=0.0).splits["dev"].words == []
    with pytest.raises(ConfigError, match=r"^dev_fraction must be in \[0, 1\)"):
        wikipse_types(WIKIPSE_FIXTURES, dev_fraction=1.0)


def copy_lists(tmp_path: Path) -> Path:
    for name in ("semantic_classes.txt", "train.tsv", "test.tsv"):
        shutil.copy(WIKIPSE_FIXTURES / name, tmp_path / name)
    return tmp_path


def test_wikipse_types_refuses_a_word_in_both_lists(tmp_path):
    folder = copy_lists(tmp_path)
    with (folder / "test.tsv").open("a", encoding="utf-8") as handle:
        handle.write("@apple@\t-food=3\n")
    with pytest.raises(DataFormatError, match=r"test\.tsv: 1 words are also in train\.tsv \(e\.g\. 'apple'\)"):
        wikipse_types(folder)


def test_wikipse_types_skips_and_counts_the_empty_name(tmp_path):
    folder = copy_lists(tmp_path)
    with (folder / "train.tsv").open("a", encoding="utf-8") as handle:
        handle.write("@@\t-location=109 -organization=82\n")
    data = wikipse_types(folder)
    assert sum(len(split.words) for split in data.splits.values()) == 7
    assert data.skips.counts[SKIP_EMPTY_NAME] == 1
    assert data.skips.examples[SKIP_EMPTY_NAME].endswith("train.tsv:5")


def test_wikipse_types_names_the_setting_for_missing_lists(tmp_path):
    with pytest.raises(DataFormatError, match=r"semantic_classes\.txt: file not found\. Fix: set `data.lists_dir`"):
        wikipse_types(tmp_path)
    with pytest.raises(ConfigError, match="^lists_dir is not set"):
        wikipse_types("")


# --- wikipse_types on the real lists --------------------------------------------------------------------------


@pytest.mark.shared_data
def test_real_lists_reproduce_zhao_table_2_word_counts(shared_data):
    data = wikipse_types(shared_data / "wiki_pse", dev_fraction=0.2, seed=0)
    assert len(data.classes) == 34
    # 44,250 train.tsv lines minus the empty name = 44,249; dev = round(0.2 * 44,249) = 8,850 (Table 2:
    # train 35,399, dev 8,850, test 44,250).
    assert {name: len(split.words) for name, split in data.splits.items()} == {
        "train": 35_399, "dev": 8_850, "test": 44_250}
    assert data.skips.counts[SKIP_EMPTY_NAME] == 1
    train, dev, test = (set(data.splits[name].words) for name in ("train", "dev", "test"))
    assert not (train & dev or train & test or dev & test)
    # Classes are a set per word: "-location=23 -location=4" (stour_valley_line) is one decision.
    summary = type_summary(data)
    assert summary["test"]["decisions_gold"] == 77_710
    assert summary["train"]["decisions_gold"] + summary["dev"]["decisions_gold"] == 77_623
    apple = data.splits["test"].words.index("apple")
    gold = {data.classes[k] for k in np.flatnonzero(data.splits["test"].targets[apple])}
    assert gold == {"organization", "food", "art", "living_thing", "product", "person"}
    # Deterministic: the dev words are random.Random(seed).sample of the sorted train.tsv words.
    assert dev == set(random.Random(0).sample(sorted(train | dev), 8_850))
    other = set(wikipse_types(shared_data / "wiki_pse", dev_fraction=0.2, seed=1).splits["dev"].words)
    assert len(other) == 8_850 and other != dev and other <= train | dev
