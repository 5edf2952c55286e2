"""Word-disjoint train/dev/test splits and per-combination context sampling (Zhao et al. 2020 §3.1).

The paper keeps Wiki-PSE's own train/test word split, takes 20% of the training words as dev, and
samples at most 100 contexts per word-s-class combination. Corpora without a word split (STREUSLE,
CoNLL-2003) get a seeded random one over their sorted unique words, so no word type is shared
between splits. Every random choice goes through one `random.Random(seed)` over sorted inputs, so
the result depends only on the records and the config, never on Python's hash seed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from probing.data.records import RecordTable, WordInContext, as_table
from probing.errors import ConfigError, setting

SPLIT_NAMES = ("train", "dev", "test")
# Held-out contexts of training words, scored for the control task's selectivity (probe.control_task.seen_fraction).
SEEN = "seen"
# Scored once after training, in this order (`seen` only where it exists).
TEST_SPLITS = ("test", SEEN)
# The splits a probe is scored on, in the order of its metrics and of results.json (`seen` only where it exists).
EVAL_SPLITS = ("dev", *TEST_SPLITS)


@dataclass
class SplitConfig:
    """How to split and sample; `max_contexts_per_combination=None` keeps every context."""

    seed: int = 0
    test_fraction: float = 0.2
    dev_fraction: float = 0.2
    max_contexts_per_combination: int | None = 100

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"{setting('seed')} must be an integer, got {self.seed!r}. Fix: {setting('seed')}=0")
        for name in ("test_fraction", "dev_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{setting(name)} must be in [0, 1), got {value!r}. Fix: {setting(name)}=0.2")
        cap = self.max_contexts_per_combination
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            cap_setting = setting("max_contexts_per_combination")
            raise ConfigError(f"{cap_setting} must be >= 1 or null, got {cap!r}. "
                              f"Fix: {cap_setting}=100 (or null to keep every context)")

    @classmethod
    def from_any(cls, value: SplitConfig | Mapping | None) -> SplitConfig:
        """Accept a SplitConfig, a plain/Hydra mapping of its fields, or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"data.split: unknown keys {unknown}. Fix: use only the keys {sorted(known)}")
        return cls(**dict(value))


def make_splits(
    records: Sequence[WordInContext],
    config: SplitConfig,
    fixed_test_words: set[str] | None = None,
    files: Sequence[str | Path] = (),
) -> dict[str, RecordTable]:
    """Split records word-disjointly into train/dev/test, then cap the contexts per combination.

    Test words are `fixed_test_words` when given, else `round(test_fraction * n_words)` sampled words;
    dev words are `round(dev_fraction * n_remaining_words)` of the rest. Each split keeps the records'
    original order. No records, or an empty split that was asked for (train always, test when its words
    are fixed or test_fraction > 0, dev when dev_fraction > 0), is a ConfigError naming the split settings
    and `files`, the data files the records come from. The splits are tables sharing the records' buffers.
    """
    origin = f"from {', '.join(str(f) for f in files)}" if files else "from the records given"
    if not records:
        raise ConfigError(f"no records to split ({origin}). Fix: check the data files and the data.source settings")
    table = as_table(records)
    rng = random.Random(config.seed)
    used = np.unique(table.word_ids)
    words = sorted(table.words[i] for i in used.tolist())
    if fixed_test_words is None:
        test_words = set(rng.sample(words, round(config.test_fraction * len(words))))
    else:
        test_words = set(fixed_test_words) & set(words)
    remaining = [word for word in words if word not in test_words]
    dev_words = set(rng.sample(remaining, round(config.dev_fraction * len(remaining))))
    _check_split_words(len(words), test_words, dev_words, config, fixed_test_words, origin)
    split_of = np.zeros(len(table.words), np.int8)  # index into SPLIT_NAMES per word id
    for word_id in used.tolist():
        word = table.words[word_id]
        split_of[word_id] = 2 if word in test_words else 1 if word in dev_words else 0
    record_split = split_of[table.word_ids]
    splits = {name: table.take(np.flatnonzero(record_split == k)) for k, name in enumerate(SPLIT_NAMES)}
    return {name: cap_contexts(splits[name], config.max_contexts_per_combination, rng) for name in SPLIT_NAMES}


def _check_split_words(n_words: int, test_words: set[str], dev_words: set[str], config: SplitConfig,
                       fixed_test_words: set[str] | None, origin: str) -> None:
    """Refuse a split left without words although the settings ask for it (see make_splits)."""
    more_data = "Fix: use more data, or raise"
    test_fraction, dev_fraction = setting("test_fraction"), setting("dev_fraction")
    if fixed_test_words is not None and not test_words:
        raise ConfigError(f"the test split is empty: none of the {len(fixed_test_words)} fixed test words occurs in "
                          f"the records ({origin}). Fix: use data that annotates the test words")
    if fixed_test_words is None and config.test_fraction > 0 and not test_words:
        raise ConfigError(f"the test split is empty: {test_fraction}={config.test_fraction} of {n_words} words rounds "
                          f"to 0 test words ({origin}). {more_data} {test_fraction}")
    n_remaining = n_words - len(test_words)
    if config.dev_fraction > 0 and not dev_words and n_remaining:
        raise ConfigError(f"the dev split is empty: {dev_fraction}={config.dev_fraction} of the {n_remaining} words "
                          f"left after the test words rounds to 0 dev words ({origin}). {more_data} {dev_fraction}")
    if n_remaining == len(dev_words):
        _refuse_empty_train(n_words, len(test_words), len(dev_words), config, fixed_test_words is not None, origin)


def _refuse_empty_train(n_words: int, n_test: int, n_dev: int, config: SplitConfig, fixed_test: bool,
                        origin: str) -> None:
    test_fraction, dev_fraction = setting("test_fraction"), setting("dev_fraction")
    test_setting = "fixed" if fixed_test else f"{test_fraction}={config.test_fraction}"
    lower = dev_fraction if fixed_test else f"{test_fraction} or {dev_fraction}"
    raise ConfigError(f"the train split is empty: of the {n_words} words, {n_test} are test words ({test_setting}) "
                      f"and {n_dev} dev words ({dev_fraction}={config.dev_fraction}) ({origin}). "
                      f"Fix: use more data, or lower {lower}")


def cap_contexts(records: Sequence[WordInContext], cap: int | None, rng: random.Random) -> RecordTable:
    """Keep at most `cap` randomly chosen records per (word, sclass), preserving the input order.

    Combinations are visited in sorted (word, sclass) order, and only those over the cap draw from `rng`
    (`rng.sample` of their record indices in order), so the draws depend only on the records, not on their ids."""
    table = as_table(records)
    if cap is None or not len(table):
        return table
    key = combination_keys(table)
    order = np.argsort(key, kind="stable")
    _, starts, counts = np.unique(key[order], return_index=True, return_counts=True)
    keep = np.ones(len(table), bool)
    for start, count in zip(starts[counts > cap].tolist(), counts[counts > cap].tolist()):
        indices = order[start:start + count]
        keep[indices] = False
        keep[rng.sample(indices.tolist(), cap)] = True
    return table.take(np.flatnonzero(keep))


def combination_keys(table: RecordTable) -> np.ndarray:
    """One int64 per record that orders records as their (word, sclass) strings do, equal for equal combinations."""
    word_rank = string_ranks(table.words.names)
    sclass_rank = string_ranks(table.sclasses.names)
    return word_rank[table.word_ids] * max(len(sclass_rank), 1) + sclass_rank[table.sclass_ids]


def string_ranks(names: Sequence[str]) -> np.ndarray:
    """The rank of each string in sorted order (the strings are distinct)."""
    ranks = np.empty(len(names), np.int64)
    ranks[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    return ranks


def split_summary(splits: Mapping[str, Sequence[WordInContext]]) -> dict[str, dict[str, int]]:
    """Per split: number of distinct words, word-s-class combinations and contexts (cf. Table 2)."""
    summary = {}
    for name, records in splits.items():
        table = as_table(records)
        summary[name] = {"words": len(np.unique(table.word_ids)),
                         "combinations": len(np.unique(combination_keys(table))), "contexts": len(table)}
    return summary
