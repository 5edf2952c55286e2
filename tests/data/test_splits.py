"""Word-disjoint splits, the per-combination cap and seeded determinism."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from probing.data.records import WordInContext
from probing.data.splits import SplitConfig, make_splits, split_summary
from probing.errors import ConfigError
from tests.helpers import REPO as REPO_ROOT


def record(word: str, sclass: str, index: int) -> WordInContext:
    return WordInContext(("ctx", word), (1,), word, sclass, f"corpus:{index}")


def corpus(n_words: int = 50, contexts: int = 3) -> list[WordInContext]:
    """n_words words w00.., each with `contexts` records in class A; every 5th word also has class B."""
    records = []
    for w in range(n_words):
        for _ in range(contexts):
            records.append(record(f"w{w:02d}", "A", len(records)))
            if w % 5 == 0:
                records.append(record(f"w{w:02d}", "B", len(records)))
    return records


def words_of(records: list[WordInContext]) -> set[str]:
    return {r.word for r in records}


def test_splits_are_word_disjoint_with_the_configured_sizes():
    splits = make_splits(corpus(), SplitConfig(seed=0))
    train, dev, test = (words_of(splits[name]) for name in ("train", "dev", "test"))
    assert not (train & dev or train & test or dev & test)
    assert len(test) == 10  # round(0.2 * 50)
    assert len(dev) == 8  # round(0.2 * 40): 20% of the training words (Zhao et al. 2020 §3.1)
    assert len(train) == 32
    assert sum(len(s) for s in splits.values()) == 50 * 3 + 10 * 3  # no cap reached: every record kept


def test_each_split_keeps_the_original_record_order():
    records = corpus()
    splits = make_splits(records, SplitConfig(seed=3))
    position = {id(r): i for i, r in enumerate(records)}
    for name in ("train", "dev", "test"):
        indices = [position[id(r)] for r in splits[name]]
        assert indices == sorted(indices)


def test_cap_limits_contexts_per_word_sclass_combination():
    records = [record("apple", "org", i) for i in range(7)] + [record("apple", "food", 7 + i) for i in range(2)]
    config = SplitConfig(test_fraction=0.0, dev_fraction=0.0, max_contexts_per_combination=3)
    splits = make_splits(records, config)
    kept = splits["train"]
    assert [r.sclass for r in kept].count("org") == 3
    assert [r.sclass for r in kept].count("food") == 2
    assert len({r.source for r in kept}) == 5  # distinct contexts, no duplicates
    assert split_summary(splits) == {
        "train": {"words": 1, "combinations": 2, "contexts": 5},
        "dev": {"words": 0, "combinations": 0, "contexts": 0},
        "test": {"words": 0, "combinations": 0, "contexts": 0},
    }


def test_no_cap_keeps_everything():
    records = [record("apple", "org", i) for i in range(150)]
    config = SplitConfig(test_fraction=0.0, dev_fraction=0.0, max_contexts_per_combination=None)
    assert len(make_splits(records, config)["train"]) == 150
    assert len(make_splits(records, SplitConfig(test_fraction=0.0, dev_fraction=0.0))["train"]) == 100


def test_same_seed_same_result_and_different_seeds_differ():
    records = corpus()
    first = make_splits(records, SplitConfig(seed=1, max_contexts_per_combination=2))
    again = make_splits(list(records), SplitConfig(seed=1, max_contexts_per_combination=2))
    other = make_splits(records, SplitConfig(seed=2, max_contexts_per_combination=2))
    assert first == again
    assert words_of(first["test"]) != words_of(other["test"])
    assert sum(len(records) for records in first.values()) == 2 * 60  # 60 combinations of 3 contexts, capped at 2


def test_fixed_test_words_are_respected_and_dev_comes_from_the_rest():
    records = corpus(n_words=20)
    fixed = {"w00", "w01", "w02", "unseen"}
    splits = make_splits(records, SplitConfig(seed=0, dev_fraction=0.25), fixed_test_words=fixed)
    assert words_of(splits["test"]) == {"w00", "w01", "w02"}
    assert len(words_of(splits["dev"])) == 4  # round(0.25 * 17)
    assert len(words_of(splits["train"])) == 13


def test_result_does_not_depend_on_the_python_hash_seed():
    script = (
        "from tests.data.test_splits import corpus\n"
        "from probing.data.splits import SplitConfig, make_splits\n"
        "s = make_splits(corpus(), SplitConfig(seed=5, max_contexts_per_combination=1))\n"
        "print([(n, [r.source for r in s[n]]) for n in sorted(s)])\n"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        command = [sys.executable, "-c", script]
        run = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)
        outputs.add(run.stdout)
    assert len(outputs) == 1


def test_split_config_from_mapping_and_errors():
    assert SplitConfig.from_any(None) == SplitConfig()
    assert SplitConfig.from_any({"seed": 4, "dev_fraction": 0.1}) == SplitConfig(seed=4, dev_fraction=0.1)
    assert SplitConfig.from_any(OmegaConf.create({"seed": 7})).seed == 7
    with pytest.raises(ConfigError, match="unknown keys \\['sed'\\]"):
        SplitConfig.from_any({"sed": 1})
    with pytest.raises(ConfigError, match="test_fraction must be in \\[0, 1\\)"):
        SplitConfig(test_fraction=1.0)
    with pytest.raises(ConfigError, match="max_contexts_per_combination"):
        SplitConfig(max_contexts_per_combination=0)


def test_no_records_is_an_error_naming_the_files():
    with pytest.raises(ConfigError, match=r"no records to split \(from a\.txt, b\.txt\)"):
        make_splits([], SplitConfig(), files=["a.txt", "b.txt"])


@pytest.mark.parametrize(
    "n_words, settings, empty, named",
    [
        (1, {"test_fraction": 0.2, "dev_fraction": 0.0}, "test", "data.split.test_fraction=0.2"),
        (2, {"test_fraction": 0.0, "dev_fraction": 0.2}, "dev", "data.split.dev_fraction=0.2"),
        (1, {"test_fraction": 0.6, "dev_fraction": 0.0}, "train", "data.split.test_fraction=0.6"),
        (2, {"test_fraction": 0.0, "dev_fraction": 0.8}, "train", "data.split.dev_fraction=0.8"),
    ],
)
def test_an_empty_split_names_the_setting_and_the_files(n_words, settings, empty, named):
    with pytest.raises(ConfigError) as caught:
        make_splits(corpus(n_words=n_words), SplitConfig(**settings), files=["data.conllulex"])
    message = str(caught.value)
    assert f"the {empty} split is empty" in message and named in message
    assert "data.conllulex" in message and "Fix:" in message


def test_a_split_with_fraction_zero_may_be_empty():
    splits = make_splits(corpus(n_words=1), SplitConfig(test_fraction=0.0, dev_fraction=0.0))
    assert len(splits["train"]) == 6 and splits["dev"] == splits["test"] == []


def test_fixed_test_words_absent_from_the_records_are_an_error():
    with pytest.raises(ConfigError, match="none of the 2 fixed test words occurs in the records"):
        make_splits(corpus(n_words=5), SplitConfig(dev_fraction=0.0), fixed_test_words={"x", "y"})


@pytest.mark.parametrize(
    "settings, key",
    [({"test_fraction": "0.2"}, "test_fraction"), ({"dev_fraction": True}, "dev_fraction"), ({"seed": "0"}, "seed"),
     ({"seed": False}, "seed"), ({"max_contexts_per_combination": 2.5}, "max_contexts_per_combination")],
)
def test_split_settings_of_the_wrong_type_are_config_errors(settings, key):
    with pytest.raises(ConfigError, match=f"data\\.split\\.{key} must .*Fix: data\\.split\\.{key}="):
        SplitConfig(**settings)
