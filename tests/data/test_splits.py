"""Word-disjoint splits, the per-combination cap and seeded determinism."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import defaultdict

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
    position = {r.source: i for i, r in enumerate(records)}  # sources are unique
    for name in ("train", "dev", "test"):
        indices = [position[r.source] for r in splits[name]]
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
        (1, {"test_fraction": 0.2, "dev_fraction": 0.0}, "test", " test_fraction=0.2"),
        (2, {"test_fraction": 0.0, "dev_fraction": 0.2}, "dev", " dev_fraction=0.2"),
        (1, {"test_fraction": 0.6, "dev_fraction": 0.0}, "train", "(test_fraction=0.6)"),
        (2, {"test_fraction": 0.0, "dev_fraction": 0.8}, "train", "(dev_fraction=0.8)"),
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
    # built in Python, the message names the argument; built from the config, data.split.<key> (tests/tasks)
    with pytest.raises(ConfigError, match=f"^{key} must .*Fix: {key}="):
        SplitConfig(**settings)


# records_fingerprint of every split as written by the list-based readers and splitting that came before the compact
# record tables (outputs of the old code): the tables must select the same records in the same order.
OLD_CODE_FINGERPRINTS = {
    "streusle": {
        "train": (1367, "f35b4b2e4413a0ee85aafb8b40bfd480d12d1f27a25891af79e6e1061972fac4"),
        "dev": (275, "35cfc654cad9a0a6fd9f9cda40b57a1e9ee1174e332532e03fefff814189b8bb"),
        "test": (384, "f6ffbaec490dab966cae5b9b57013d8d7e8e5deb521a5be8abc052c9fd2787b7"),
    },
    "streusle_verbs": {
        "train": (1842, "0e1d7f29811d7db4965e0197b762ae2ae1437174650427a222b32e2e4f2f9808"),
        "dev": (726, "875489af586f0b0b0fbc9d647e7fc540b49cb55a9c003dec1f1aec61b2d3da4c"),
        "test": (525, "b40b3a28857af7c2813c7ed1d55d8b04e8da831f0ad2ab7b7f548a4d536ced48"),
    },
    "streusle_uncapped_seed3": {
        "train": (1403, "748d67b8c40dc4d7df2e7d74e2461439c3a7c013a37e24f482639cf996c73f6e"),
        "dev": (299, "10d4595ca5009d9518a73bb978353679db30bc13b3ca00254205d36a29c500cf"),
        "test": (324, "5e5100a5cc41e674cfbfb18b28142b7ef172b1c24f8404c54c0197e08d8151d7"),
    },
    "conll2003": {
        "train": (21075, "5e45624b986b06b096513953f6fb127e6a2fc46d404119c21107557594164b3a"),
        "dev": (5036, "2004bd5defe3f85db5aef6e809cb23f25849fc72e59ca6ee8ab435ec304783cd"),
        "test": (7526, "087fa418c57271913f76cb43fe01975c76e0798c18fa5890d687ea50ccb4f92f"),
    },
    "conll2003_cap5_seed1": {
        "train": (13520, "87ed09c26063f12f78e174e4ba34abe4bc3aa0576c99d725c9e77f7d0a22f457"),
        "dev": (3367, "16978e3e73b8891798345412e4732ed28d0349f4a7dd715d8060560cb5e03a24"),
        "test": (4234, "1019b92f79529b9d991f7921f0bbbe784c4b722e4857e2753f7882ddc73595e3"),
    },
}


def fingerprints(data) -> dict[str, tuple[int, str]]:
    from probing.features.store import records_fingerprint

    return {name: (len(records), records_fingerprint(records)) for name, records in data.splits.items()}


@pytest.mark.parametrize("name, settings", [
    ("streusle", {}), ("streusle_verbs", {"include_verbs": True}),
    ("streusle_uncapped_seed3", {"split": {"max_contexts_per_combination": None, "seed": 3}}),
])
def test_the_bundled_streusle_splits_are_those_of_the_old_code(name, settings):
    from probing.data.sources import StreusleSource

    assert fingerprints(StreusleSource(**settings).load()) == OLD_CODE_FINGERPRINTS[name]


@pytest.mark.parametrize("name, split", [("conll2003", None), ("conll2003_cap5_seed1",
                                                                {"max_contexts_per_combination": 5, "seed": 1})])
def test_the_conll2003_splits_are_those_of_the_old_code(shared_data, name, split):
    from probing.data.sources import Conll2003Source

    data = Conll2003Source(data_dir=str(shared_data / "conll2003"), split=split).load()
    assert fingerprints(data) == OLD_CODE_FINGERPRINTS[name]


def old_make_splits(records: list[WordInContext], config: SplitConfig) -> dict[str, list[WordInContext]]:
    """The list-based splitting that came before the record tables, kept as the reference."""
    rng = random.Random(config.seed)
    words = sorted({record.word for record in records})
    test_words = set(rng.sample(words, round(config.test_fraction * len(words))))
    remaining = [word for word in words if word not in test_words]
    dev_words = set(rng.sample(remaining, round(config.dev_fraction * len(remaining))))
    split_of = {word: "test" if word in test_words else "dev" if word in dev_words else "train" for word in words}
    splits = {name: [r for r in records if split_of[r.word] == name] for name in ("train", "dev", "test")}
    cap, capped = config.max_contexts_per_combination, {}
    for name, kept in splits.items():
        positions = defaultdict(list)
        for index, record in enumerate(kept):
            positions[record.combination].append(index)
        chosen = [i for c in sorted(positions) for i in (positions[c] if len(positions[c]) <= cap
                                                          else rng.sample(positions[c], cap))]
        capped[name] = [kept[i] for i in sorted(chosen)]
    return capped


@pytest.mark.parametrize("seed", range(5))
def test_the_tables_split_and_cap_random_corpora_as_the_lists_did(seed):
    rng = random.Random(seed)
    words = [f"w{rng.randrange(10 ** 6)}" for _ in range(40)]  # word ids (first seen) differ from string order
    records = [record(rng.choice(words), rng.choice("ZAB"), index) for index in range(600)]
    config = SplitConfig(seed=seed, max_contexts_per_combination=rng.randint(1, 6))
    assert make_splits(records, config) == old_make_splits(records, config)
