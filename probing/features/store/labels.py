"""The tables a store's records determine (RECORD_TABLES): the class names and words, each row's label, word id and
combination id, and the combinations, the word-s-class pairs (Zhao et al. 2020 §3.1), ids in order of first
occurrence. They are written when a store is created, and computed again to check an unfinished store before it is
resumed (see "Resuming" in `probing.features.store.writer`).
"""

from __future__ import annotations

from collections.abc import Sequence

import h5py
import numpy as np

from probing.data.records import WordInContext, as_table
from probing.errors import ProbingError


def record_tables(records: Sequence[WordInContext], class_names: Sequence[str]) -> dict[str, np.ndarray]:
    """RECORD_TABLES of a store of `records` (`encode_labels`), the names as h5py's UTF-8 strings."""
    labels, word_ids, words, combination_ids, combinations = encode_labels(records, class_names)
    strings = h5py.string_dtype("utf-8")
    return {"class_names": np.array(list(class_names), dtype=strings), "words": np.array(words, dtype=strings),
            "labels": labels, "word_ids": word_ids, "combination_ids": combination_ids, "combinations": combinations}


def same_table(stored: np.ndarray, expected: np.ndarray) -> bool:
    """Whether a table read from a store equals `expected` in type, shape and values (h5py reads strings as bytes)."""
    if expected.dtype == object:
        return stored.dtype == object and stored.shape == expected.shape and all(
            value == name.encode("utf-8") for value, name in zip(stored.tolist(), expected.tolist()))
    return stored.dtype == expected.dtype and np.array_equal(stored, expected)


def encode_labels(records: Sequence[WordInContext], class_names: Sequence[str]):
    """Integer labels, word ids, words, combination ids and combinations (ids in order of first occurrence), read from
    the records' columns."""
    table = as_table(records)
    class_index = {name: i for i, name in enumerate(class_names)}
    used = [table.sclasses[i] for i in np.unique(table.sclass_ids).tolist()]
    unknown = sorted(set(used) - class_index.keys())
    if unknown:
        raise ProbingError(f"s-classes {unknown} are not in the class list {list(class_names)}. "
                           "Fix: build the class list from every split of the data set")
    label_of = np.array([class_index.get(name, -1) for name in table.sclasses.names], np.int64)
    labels = label_of[table.sclass_ids]
    word_ids, word_order = first_seen_ids(table.word_ids)
    combination_ids, combination_keys = first_seen_ids(word_ids * max(len(class_names), 1) + labels)
    combinations = np.stack(np.divmod(combination_keys, max(len(class_names), 1)), axis=1)
    return (labels.astype(np.int32), word_ids.astype(np.int32), [table.words[i] for i in word_order.tolist()],
            combination_ids.astype(np.int32), combinations.astype(np.int32).reshape(-1, 2))


def first_seen_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's id in order of first occurrence, and the distinct values in that order."""
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], distinct[order]
