"""The tables a store's records determine (RECORD_TABLES): the class names and words, each row's label, word id and
combination id, and the combinations, the word-s-class pairs (Zhao et al. 2020 §3.1), ids in order of first
occurrence. They are written when a store is created, and computed again to check an unfinished store before it is
resumed (see "Resuming" in `probing.features.store.writer`), TABLE_ROWS rows at a time (`RecordTables`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import h5py
import numpy as np

from probing.data.records import WordInContext, as_table
from probing.errors import ProbingError
from probing.features.store.pieces import TABLE_ROWS

# The RECORD_TABLES with one entry per row, as `RecordTables.row_chunks` gives them.
ROW_RECORD_TABLES = ("labels", "word_ids", "combination_ids")
STRINGS = h5py.string_dtype("utf-8")


class FirstSeen:
    """Ids of integers in order of first occurrence, given chunk after chunk: holds the distinct values seen, sorted
    with their ids (12 bytes each) and in id order (8 bytes each), never the values of every chunk."""

    def __init__(self) -> None:
        self.sorted, self.ids, self.in_order, self.count = np.zeros(0, np.int64), np.zeros(0, np.int32), [], 0

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """The id of each of `values` (int64), values not seen before numbered after every value of earlier chunks."""
        distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        where = np.searchsorted(self.sorted, distinct)
        inside = where < len(self.sorted)
        known = np.zeros(len(distinct), bool)
        known[inside] = self.sorted[where[inside]] == distinct[inside]
        ids = np.empty(len(distinct), np.int32)
        ids[known] = self.ids[where[known]]
        new = np.flatnonzero(~known)
        by_first = new[np.argsort(first[new], kind="stable")]
        ids[by_first] = np.arange(self.count, self.count + len(new))
        self.in_order.append(distinct[by_first])
        self.count += len(new)
        self.sorted = np.insert(self.sorted, where[new], distinct[new])
        self.ids = np.insert(self.ids, where[new], ids[new])
        return ids[inverse.reshape(-1)]

    def values(self) -> np.ndarray:
        """The distinct values seen, in id order."""
        return np.concatenate([np.zeros(0, np.int64), *self.in_order])


class RecordTables:
    """RECORD_TABLES of a store of `records` and `class_names`, computed from the records' columns TABLE_ROWS rows at a
    time: `row_chunks` gives the per-row tables a chunk at a time, and once it has gone through every row, `words`
    and `combinations` give the others. Besides one chunk, what is held grows with the distinct words and
    combinations only (`FirstSeen`), as the `words` and `combinations` tables themselves do.

    An s-class of the records that is not in `class_names` is refused on construction, before any table is made."""

    def __init__(self, records: Sequence[WordInContext], class_names: Sequence[str]):
        self.table, self.class_names = as_table(records), list(class_names)
        self.num_rows, self.num_classes = len(self.table), max(len(self.class_names), 1)
        used = np.zeros(len(self.table.sclasses), bool)
        for first in range(0, self.num_rows, TABLE_ROWS):
            used[self.table.sclass_ids[first:first + TABLE_ROWS]] = True
        class_index = {name: i for i, name in enumerate(self.class_names)}
        unknown = sorted({self.table.sclasses[i] for i in np.flatnonzero(used).tolist()} - class_index.keys())
        if unknown:
            raise ProbingError(f"s-classes {unknown} are not in the class list {self.class_names}. "
                               "Fix: build the class list from every split of the data set")
        self.label_of = np.array([class_index.get(name, -1) for name in self.table.sclasses.names], np.int64)
        self._words = self._combinations = None

    def row_chunks(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """(first row, {name: values} for ROW_RECORD_TABLES) of each run of TABLE_ROWS rows, in order."""
        words, combinations = FirstSeen(), FirstSeen()
        for first in range(0, self.num_rows, TABLE_ROWS):
            labels = self.label_of[self.table.sclass_ids[first:first + TABLE_ROWS]]
            word_ids = words(self.table.word_ids[first:first + TABLE_ROWS].astype(np.int64))
            combination_ids = combinations(word_ids.astype(np.int64) * self.num_classes + labels)
            yield first, {"labels": labels.astype(np.int32), "word_ids": word_ids, "combination_ids": combination_ids}
        self._words, self._combinations = words.values(), combinations.values()

    def class_names_table(self) -> np.ndarray:
        return np.array(self.class_names, dtype=STRINGS)

    @property
    def num_words(self) -> int:
        return len(self._after_rows()[0])

    def words(self, first: int, stop: int) -> np.ndarray:
        """The `words` table from entry `first` to `stop`: the distinct words in order of first occurrence."""
        names = self.table.words.names
        return np.array([names[i] for i in self._after_rows()[0][first:stop].tolist()], dtype=STRINGS)

    def combinations(self) -> np.ndarray:
        """The `combinations` table: (word id, label) of each combination id."""
        keys = self._after_rows()[1]
        return np.stack(np.divmod(keys, self.num_classes), axis=1).astype(np.int32).reshape(-1, 2)

    def _after_rows(self) -> tuple[np.ndarray, np.ndarray]:
        if self._words is None:
            raise RuntimeError("the words and combinations are known once row_chunks has gone through every row")
        return self._words, self._combinations


def same_table(stored: np.ndarray, expected: np.ndarray) -> bool:
    """Whether a table read from a store equals `expected` in type, shape and values (h5py reads strings as bytes)."""
    if expected.dtype == object:
        return stored.dtype == object and stored.shape == expected.shape and all(
            value == name.encode("utf-8") for value, name in zip(stored.tolist(), expected.tolist()))
    return stored.dtype == expected.dtype and np.array_equal(stored, expected)
