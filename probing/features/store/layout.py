"""The store format: the tables of a store file and their shapes, how its attributes are encoded, the checks that a
file is a store of this format (made whenever one is opened), and the blocks that tile its written slots.

STORE_FORMAT numbers the layout described in the package docstring. A file without `store_format` is not a store and
is refused without being modified; a store of this format that lacks a table or has one misshapen is a
StoreCorruptError; a store of another format is refused with its format named (older stores are rebuilt, not
converted). Every failure to open a store is one line (`open_store_file`). `SlotCheck` reads how an unfinished
store's stored rows fill the slots of its blocks.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import h5py
import numpy as np

from probing.errors import ProbingError, StoreCorruptError, StoreMismatchError
from probing.features.store.lock import ELSEWHERE, WAIT_FIX, one_line, unwritable_error
from probing.features.store.pieces import TABLE_ROWS, PieceCache

STORE_FORMAT = 4
FEATURE_DTYPES = ("float16", "float32")
SHAPE_KEYS = ("num_layers", "num_rows", "hidden_size", "dtype")
BLOCK_TABLES = ("block_rows", "block_xxh3")  # one entry per slot, nonzero only where a block starts
ROW_TABLES = ("slots", "block_rows", "labels", "word_ids", "combination_ids", "written", "skipped", "staged_batches",
              "staged_xxh3")
# Every dataset but the features (hashed per block) and the staging scratch, hashed into `table_xxh3` in this order.
SEALED_TABLES = ("class_names", "words", "labels", "word_ids", "combination_ids", "combinations", "slots",
                 "block_rows", "block_xxh3", "written", "skipped")
# The tables derived from the records and the class list (`labels.record_tables`), as created.
RECORD_TABLES = ("class_names", "words", "labels", "word_ids", "combination_ids", "combinations")
DELETE_FIX = "delete the file (it is rebuilt on the next run) or point `paths.store_dir` elsewhere"


def to_attr(value):
    """An HDF5 attribute value: str/int/float/bool as they are, anything else (dict, list, None) as sorted JSON."""
    if isinstance(value, (str, bool, int, float)):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def from_attr(value):
    """A Python value from an HDF5 attribute (numpy scalars unwrapped; JSON strings stay strings)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value.item() if isinstance(value, np.generic) else value


def open_store_file(path: Path, mode: str, locking: bool = True) -> h5py.File:
    """Open an existing store ("r" or "r+") and check that it is one, every failure as one clear line.

    `locking=False` leaves out HDF5's own file lock, for a read-only look that must never make a concurrent
    writer's open fail.
    """
    try:
        handle = h5py.File(path, mode, locking=locking)
    except OSError as error:
        raise open_error(path, mode, error) from error
    try:
        check_layout(handle, path)
    except ProbingError:
        handle.close()
        raise
    return handle


def open_error(path: Path, mode: str, error: OSError) -> ProbingError:
    if isinstance(error, BlockingIOError) or "unable to lock file" in str(error):
        return ProbingError(
            f"{path}: another run has this store open ({one_line(error)}). Fix: {WAIT_FIX}; if no other run uses "
            "it, the file system may not support HDF5 file locks: set HDF5_USE_FILE_LOCKING=FALSE")
    if mode != "r" and error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return unwritable_error(path, error)
    return StoreMismatchError(f"{path}: cannot be opened as a feature store ({one_line(error)}). "
                              f"Fix: if another run is using it, wait for that run; otherwise {DELETE_FIX}")


def check_layout(handle: h5py.File, path: Path) -> None:
    """Refuse an HDF5 file that is not a store, and a store of this format that lacks a table or has one misshapen.

    A store of another format is left to `check_metadata` (and `check_format`), which name the fix."""
    if "store_format" not in handle.attrs:
        raise StoreMismatchError(f"{path}: this HDF5 file is not a feature store (it has no store_format "
                                 f"attribute). Fix: move or delete the file, or {ELSEWHERE} another folder")
    if from_attr(handle.attrs["store_format"]) != STORE_FORMAT:
        return
    problems = layout_problems(handle)
    if problems:
        raise StoreCorruptError(f"{path}: the feature store is damaged ({'; '.join(problems)}). Fix: {DELETE_FIX}")


def layout_problems(handle: h5py.File) -> list[str]:
    """Tables missing or misshapen (the shape of the name tables and `combinations` depends on the records)."""
    layers, rows, dim = (from_attr(handle.attrs.get(key)) for key in ("num_layers", "num_rows", "hidden_size"))
    expected = {"features": (layers, rows, dim), "block_xxh3": (rows, layers), "table_xxh3": (len(SEALED_TABLES),),
                **{name: (rows,) for name in ROW_TABLES},
                **{name: None for name in RECORD_TABLES if name not in ROW_TABLES}}
    problems = []
    for name, shape in expected.items():
        table = handle.get(name)
        if not isinstance(table, h5py.Dataset):
            problems.append(f"no `{name}` table")
        elif shape is not None and table.shape != shape:
            problems.append(f"`{name}` has shape {table.shape}, expected {shape}")
    features = handle.get("features")
    if isinstance(features, h5py.Dataset) and (features.id.get_offset() is None or not features.dtype.isnative):
        problems.append("`features` is not one contiguous, allocated array in this machine's byte order")
    return problems


def check_format(attrs: Mapping, path: Path) -> None:
    stored = from_attr(attrs["store_format"])
    if stored != STORE_FORMAT:
        raise StoreMismatchError(f"{path}: store_format: store has {stored!r}, this version reads {STORE_FORMAT} "
                                 f"(older stores are rebuilt, not converted). Fix: {DELETE_FIX}")


def block_spans(block_rows: np.ndarray | PieceCache, end: int, path: Path) -> list[tuple[int, int]]:
    """(first slot, slot count) of the blocks from slot 0 up to the one holding slot `end - 1`.

    Entries of `block_rows` off this chain are left over from a block cut off before its flags; they are ignored."""
    spans, first = [], 0
    while first < end:
        count = int(block_rows[first]) if first < len(block_rows) else 0
        if count <= 0 or first + count > len(block_rows):
            raise StoreCorruptError(f"{path}: the block table is damaged at slot {first}. Fix: {DELETE_FIX}")
        spans.append((first, count))
        first += count
    return spans


def blocks_end(spans: list[tuple[int, int]]) -> int:
    """The slot after the last of `spans` (0 for none)."""
    return spans[-1][0] + spans[-1][1] if spans else 0


class SlotCheck:
    """What `StoreWriter._resume_slot` learns from the `slots` and `skipped` tables of `file` and the `written` flags
    (as a boolean array), TABLE_ROWS rows at a time:
    on construction, the highest slot of a stored row (`top`), the rows flagged as stored without a slot (`unplaced`,
    ascending) and whether a skipped row holds a slot; then, from `against`, how the stored rows fill the slots."""

    def __init__(self, file: h5py.File, written: np.ndarray):
        self.file, self.written = file, written
        self.top, self.placed_skips, unplaced = -1, False, [np.zeros(0, np.int64)]
        self.before_last_disagree = False
        for first, slots, written, skipped in self.pieces():
            stored = written & ~skipped
            unplaced.append(first + np.flatnonzero(stored & (slots < 0)))
            self.top = max(self.top, int(slots[stored].max(initial=-1)))
            self.placed_skips = self.placed_skips or bool((written & skipped & (slots >= 0)).any())
        self.unplaced = np.concatenate(unplaced)

    def pieces(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """(first row, slots, written, skipped) of each piece of rows."""
        for first in range(0, len(self.written), TABLE_ROWS):
            stop = first + TABLE_ROWS
            yield first, self.file["slots"][first:stop], self.written[first:stop], self.file["skipped"][first:stop] != 0

    def against(self, last: tuple[int, int]) -> tuple[np.ndarray, int, bool]:
        """With `last` the (first slot, slot count) of the last block: the rows stored in its slots (ascending), the
        number of stored rows with a slot, and whether two of them share a slot (also kept in
        `before_last_disagree` for the slots before that block alone)."""
        used = np.zeros((last[0] + last[1] + 7) // 8, np.uint8)  # a bit per slot
        in_last, stored_count, shared = [np.zeros(0, np.int64)], 0, np.zeros(0, np.int64)
        for first, slots, written, skipped in self.pieces():
            rows = np.flatnonzero(written & ~skipped & (slots >= 0))
            placed = slots[rows]  # all below the end of the last block, which holds the top slot
            stored_count += len(rows)
            in_last.append(first + rows[placed >= last[0]])
            distinct, counts = np.unique(placed, return_counts=True)
            bits = (1 << (distinct & 7)).astype(np.uint8)
            shared = np.concatenate([shared, distinct[(counts > 1) | ((used[distinct >> 3] & bits) != 0)]])
            np.bitwise_or.at(used, distinct >> 3, bits)
        self.before_last_disagree = bool((shared < last[0]).any())
        return np.concatenate(in_last), stored_count, bool(len(shared))
