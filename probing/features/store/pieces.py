"""What a writer holds of a store's per-row tables, bounded whatever the number of rows: the tables read, written and
hashed a piece at a time (pieces of TABLE_ROWS rows for those it computes or compares, of at most TABLE_BYTES for
those it only reads, fills or hashes), and sets of rows as runs of consecutive rows (`RowRuns`).

See docs/features.md, 'Writing a store: crash safety, resuming, staging'.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import h5py
import numpy as np

# With their temporaries, the pieces hold a few hundred KB whatever the number of rows.
TABLE_ROWS = 8192
TABLE_BYTES = TABLE_ROWS * 8


def piece_rows(dataset: h5py.Dataset) -> int:
    """Rows of `dataset` in one piece of at most TABLE_BYTES (one row at least)."""
    return max(1, TABLE_BYTES // (dataset.dtype.itemsize * int(np.prod(dataset.shape[1:]))))


def read_pieces(dataset: h5py.Dataset) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) of a table of the open file, a piece of `piece_rows` at a time, through h5py (so that what
    this process wrote and has not flushed is seen)."""
    rows = piece_rows(dataset)
    for first in range(0, len(dataset), rows):
        yield first, dataset[first:first + rows]


class PieceCache:
    """A table indexed row by row, read a piece at a time (the last piece kept): for walks that go forward."""

    def __init__(self, dataset: h5py.Dataset):
        self.dataset, self.rows, self.first, self.piece = dataset, piece_rows(dataset), 0, dataset[0:0]

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, row: int):
        if not self.first <= row < self.first + len(self.piece):
            self.first = row - row % self.rows
            self.piece = self.dataset[self.first:self.first + self.rows]
        return self.piece[row - self.first]


def fill_table(dataset: h5py.Dataset, value: int) -> None:
    """Set every entry of `dataset` to `value`, a piece at a time."""
    piece = np.full((max(1, min(piece_rows(dataset), len(dataset))), *dataset.shape[1:]), value, dataset.dtype)
    for first in range(0, len(dataset), len(piece)):
        dataset[first:first + len(piece)] = piece[:len(dataset) - first]


class RowRuns(Sequence[int]):
    """Rows in ascending order held as runs of consecutive rows (`starts[i]` up to `stops[i]`, exclusive): the rows
    of a slice are built when it is taken, so that what is held grows with the runs, not the rows. Converts to an
    int64 array (`np.asarray`) and a list."""

    def __init__(self, starts: np.ndarray, stops: np.ndarray):
        self.starts, self.stops = np.asarray(starts, np.int64), np.asarray(stops, np.int64)
        self.ends = np.cumsum(self.stops - self.starts)  # the position after each run's last row

    @classmethod
    def unset(cls, flags: np.ndarray) -> RowRuns:
        """The rows where the boolean array `flags` is False, found TABLE_ROWS rows at a time."""
        starts, stops, before = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], False  # whether the last row was
        for first in range(0, len(flags), TABLE_ROWS):
            unset = ~flags[first:first + TABLE_ROWS]
            edges = np.flatnonzero(np.diff(unset, prepend=before))  # where unset differs from the row before
            starts.append(first + edges[unset[edges]])
            stops.append(first + edges[~unset[edges]])
            before = bool(unset[-1])
        stops.append(np.array([len(flags)] if before else [], np.int64))
        return cls(np.concatenate(starts), np.concatenate(stops))

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, index):
        if isinstance(index, slice):
            first, stop, step = index.indices(len(self))
            if step != 1:
                return self.rows(0, len(self))[index]
            return self.rows(first, max(first, stop))
        position = range(len(self))[index]
        return int(self.rows(position, position + 1)[0])

    def rows(self, first: int, stop: int) -> np.ndarray:
        """The rows at positions `first` up to `stop` (0 <= first <= stop <= len), as an int64 array."""
        run = int(np.searchsorted(self.ends, first, side="right"))
        pieces = []
        while first < stop:
            begin = self.ends[run] - (self.stops[run] - self.starts[run])  # the position of the run's first row
            count = min(stop, int(self.ends[run])) - first
            offset = self.starts[run] + first - begin
            pieces.append(np.arange(offset, offset + count, dtype=np.int64))
            first, run = first + count, run + 1
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)

    def __iter__(self) -> Iterator[int]:
        for first in range(0, len(self), TABLE_ROWS):
            yield from self.rows(first, min(len(self), first + TABLE_ROWS)).tolist()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = self.rows(0, len(self))
        return rows if dtype is None else rows.astype(dtype)

    def tolist(self) -> list[int]:
        return self.rows(0, len(self)).tolist()
