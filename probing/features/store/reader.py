"""Reading a store: FeatureStore, the read access every probe and analysis uses, and LayerReader, one checked read of
one layer.

See docs/features.md, 'Reading a store'.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import torch
import xxhash

from probing.data.records import WordInContext
from probing.errors import ProbingError, StoreCorruptError
from probing.features.store.hashes import all_finite, block_hashes, check_tables, read_checked_tables
from probing.features.store.layout import DELETE_FIX, block_spans, blocks_end, check_format, from_attr, open_store_file
from probing.features.store.lock import one_line
from probing.features.store.metadata import check_metadata
from probing.features.store.writer import create_store_file

READ_GROUP_BYTES = 1 << 20  # stored bytes a reading thread handles at once: its buffers stay in L2/L3
READ_THREADS = 2


def record_order(slots: np.ndarray, path: Path) -> np.ndarray:
    """The record position of each slot from the slot of each kept record, refusing slots that do not fill
    0..K-1 exactly once; O(K), and no scatter for a store at rest in record order (the usual case)."""
    in_order = np.arange(len(slots), dtype=slots.dtype)
    if np.array_equal(slots, in_order):
        return in_order
    order = np.full(len(slots), -1, dtype=slots.dtype)
    if slots.min() >= 0 and slots.max() < len(slots):
        order[slots] = in_order
    if (order < 0).any():  # a slot out of range, or one used twice (so another is never used)
        raise StoreCorruptError(f"{path}: the `slots` table is damaged (the kept rows do not fill slots "
                                f"0..{len(slots) - 1}). Fix: {DELETE_FIX}")
    return order


def block_groups(spans: list[tuple[int, int]], rows: int) -> list[range]:
    """Consecutive blocks (indices into `spans`) in groups of at least `rows` slots each (the last may be smaller)."""
    groups, start = [], 0
    for index, (first, count) in enumerate(spans):
        if first + count - spans[start][0] >= rows:
            groups.append(range(start, index + 1))
            start = index + 1
    if start < len(spans):
        groups.append(range(start, len(spans)))
    return groups


class LayerReader:
    """One read of one layer into `out` (see FeatureStore.read_layer_into), shared by the reading threads: each
    reads its groups of blocks a buffer at a time from the layer's bytes, which start at `offset` in the file."""

    def __init__(self, path: Path, layer: int, fd: int, offset: int, order: np.ndarray,
                 spans: list[tuple[int, int]], checksums: np.ndarray, out: np.ndarray, stored_dtype: np.dtype):
        self.path, self.layer, self.fd, self.offset = path, layer, fd, offset
        self.order, self.spans, self.checksums, self.out = order, spans, checksums, out
        self.row_bytes = out.shape[1] * stored_dtype.itemsize
        rows = max(1, min(READ_GROUP_BYTES // self.row_bytes, len(order)))
        # Reusable buffer pairs, one per thread (fresh allocations of a few MB would be page-faulted in on every
        # piece); `converted` is `stored` itself when no conversion is needed.
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(READ_THREADS):
            stored = np.empty((rows, out.shape[1]), stored_dtype)
            self.free.put((stored, stored if out.dtype == stored_dtype else np.empty((rows, out.shape[1]), out.dtype)))

    def read_group(self, group: range) -> None:
        """Read the blocks `group` a buffer at a time, put their rows into `out`, and check each block's hash (a
        block larger than the buffer is hashed across pieces)."""
        blocks = [(*self.spans[block], self.checksums[block]) for block in group]
        first, stop = blocks[0][0], blocks[-1][0] + blocks[-1][1]
        hasher = xxhash.xxh3_64()  # of blocks[0], the first block not yet checked
        stored, converted = self.free.get()
        try:
            for start in range(first, stop, len(stored)):
                end = min(stop, start + len(stored))
                piece = self._read_piece(start, end, stored[:end - start], converted[:end - start])
                while blocks and blocks[0][0] < end:
                    block_first, count, expected = blocks[0]
                    hasher.update(piece[max(block_first, start) - start:min(block_first + count, end) - start])
                    if block_first + count > end:
                        break
                    if hasher.intdigest() != expected:
                        slots = f"{block_first}..{block_first + count - 1}"
                        raise StoreCorruptError(f"{self.path}: layer {self.layer} is damaged: slots {slots} do not "
                                                f"match their checksum. Fix: {DELETE_FIX}")
                    blocks.pop(0)
                    hasher.reset()
        finally:
            self.free.put((stored, converted))

    def _read_piece(self, start: int, end: int, stored: np.ndarray, converted: np.ndarray) -> np.ndarray:
        """Read slots start..end - 1, refuse NaN and inf, and put the rows into `out`; returns the stored bytes (for
        the hashes). Rows at rest in record order go to the same rows of `out` (straight from the file when no
        conversion is needed); other rows are scattered."""
        in_order = bool(np.array_equal(self.order[start:end], np.arange(start, end)))
        if in_order:
            converted = self.out[start:end]
            if converted.dtype == stored.dtype and converted.flags.c_contiguous:
                stored = converted
        try:
            complete = os.preadv(self.fd, [stored], self.offset + start * self.row_bytes) == stored.nbytes
        except OSError as error:
            raise self._unreadable(one_line(error)) from error
        if not complete:
            raise self._unreadable("the file ends before the layer does")
        if not all_finite(stored):
            raise StoreCorruptError(f"{self.path}: layer {self.layer} holds NaN or inf features. Fix: {DELETE_FIX}")
        if converted is not stored:
            torch.from_numpy(converted).copy_(torch.from_numpy(stored))  # vectorised float16 -> float32
        if not in_order:
            self.out[self.order[start:end]] = converted
        return stored

    def _unreadable(self, reason: str) -> StoreCorruptError:
        return StoreCorruptError(f"{self.path}: layer {self.layer} cannot be read ({reason}). Fix: {DELETE_FIX}")


class FeatureStore:
    """Read access to a store file, opened read-only on first use.

    Readers see the kept rows only (skipped rows are left out by every accessor), and features come back
    as float32 whatever the storage dtype, after their checksums and finiteness are verified.
    `file_locking=False` opens the file without HDF5's file lock (see `open_store_file`).
    """

    def __init__(self, path: str | Path, file_locking: bool = True):
        self.path = Path(path)
        self.file_locking = file_locking
        self._file: h5py.File | None = None
        self._tables: dict[str, np.ndarray] | None = None
        self._layout: tuple[np.ndarray, list[tuple[int, int]], np.ndarray] | None = None

    @classmethod
    def create(cls, path: str | Path, metadata: Mapping, records: Sequence[WordInContext],
               class_names: Sequence[str]) -> FeatureStore:
        """Write a new store for `records` with no row written yet; `metadata` must hold the SHAPE_KEYS."""
        create_store_file(Path(path), metadata, records, class_names)
        return cls(path)

    @property
    def file(self) -> h5py.File:
        if self._file is None:
            self._file = open_store_file(self.path, "r", locking=self.file_locking)
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tables = self._layout = None

    def __enter__(self) -> FeatureStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def metadata(self) -> dict:
        """The file attributes (dicts and lists as JSON strings, as stored)."""
        return {key: from_attr(value) for key, value in self.file.attrs.items()}

    def check_metadata(self, request: Mapping) -> None:
        """Raise StoreMismatchError listing every key where this store differs from `request`."""
        check_metadata(self.file.attrs, request, self.path)

    @property
    def num_layers(self) -> int:
        return self.file["features"].shape[0]

    @property
    def hidden_size(self) -> int:
        return self.file["features"].shape[2]

    @property
    def num_rows(self) -> int:
        """Rows readers see (skipped rows excluded)."""
        return int(self._kept.sum())

    @property
    def num_skipped(self) -> int:
        return int(self.tables["skipped"].sum())

    @property
    def is_complete(self) -> bool:
        return bool(self.file["written"][()].all())

    @property
    def tables(self) -> dict[str, np.ndarray]:
        """Every table of SEALED_TABLES, read once and checked against the hashes sealed when the store completed;
        an unfinished store is refused. The block tables come as BlockStarts (their entries at block starts)."""
        if self._tables is None:
            check_format(self.file.attrs, self.path)
            self._check_complete()
            tables, hashes = read_checked_tables(self.file)
            check_tables(tables, self.file["table_xxh3"][()], self.path, hashes)
            self._tables = tables
        return self._tables

    @property
    def class_names(self) -> list[str]:
        return [name.decode("utf-8") for name in self.tables["class_names"]]

    @property
    def words(self) -> list[str]:
        return [word.decode("utf-8") for word in self.tables["words"]]

    @property
    def combinations(self) -> list[tuple[str, str]]:
        """(word, s-class) of each combination id."""
        words, classes = self.words, self.class_names
        return [(words[word_id], classes[label]) for word_id, label in self.tables["combinations"]]

    def labels(self) -> np.ndarray:
        return self.tables["labels"][self._kept]

    def word_ids(self) -> np.ndarray:
        return self.tables["word_ids"][self._kept]

    def combination_ids(self) -> np.ndarray:
        return self.tables["combination_ids"][self._kept]

    def row_ids(self) -> np.ndarray:
        """The record index (position in the split) of each kept row."""
        return np.flatnonzero(self._kept)

    def skipped_row_ids(self) -> np.ndarray:
        """The record index of each row the featurizer could not represent."""
        return np.flatnonzero(~self._kept)

    def read_layer(self, layer: int, dtype: str | None = "float32") -> np.ndarray:
        """Features of one layer, (num_rows, hidden_size), in record order; refuses an unfinished or damaged store.

        `dtype=None` keeps the storage dtype (half the memory for a float16 store)."""
        self._check_layer(layer)
        out = np.empty((self.num_rows, self.hidden_size), dtype or self.file["features"].dtype)
        self.read_layer_into(layer, out)
        return out

    def read_all_layers(self, dtype: str | None = "float32") -> np.ndarray:
        """Features of every layer, (num_rows, num_layers, hidden_size), in record order (for the scalar mix)."""
        out = np.empty((self.num_rows, self.num_layers, self.hidden_size), dtype or self.file["features"].dtype)
        for layer in range(self.num_layers):
            self.read_layer_into(layer, out[:, layer])
        return out

    def read_layer_into(self, layer: int, out: np.ndarray) -> None:
        """Fill `out` (num_rows, hidden_size), of any float dtype, with one layer's features in record order.

        The layer is read a megabyte at a time into a small buffer that stays in the CPU cache, where each block's
        hash is checked, NaN and inf are refused, and the rows are converted and put in record order: one pass
        over memory and no copy of the layer besides `out`. Rows at rest in record order (stores written window by
        window) are read straight into `out` when no conversion is needed. Two threads share the groups of blocks
        (the reads, hashes and copies release the GIL)."""
        self._check_layer(layer)
        if out.shape != (self.num_rows, self.hidden_size):
            raise ValueError(f"out must have shape {(self.num_rows, self.hidden_size)}, got {out.shape}")
        order, spans, checksums = self._block_layout()
        features = self.file["features"]
        row_bytes = self.hidden_size * features.dtype.itemsize
        groups = block_groups(spans, max(1, READ_GROUP_BYTES // row_bytes))
        torch_threads = torch.get_num_threads()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            reader = LayerReader(self.path, layer, fd, features.id.get_offset() + layer * features.shape[1] * row_bytes,
                                 order, spans, checksums[:, layer], out, features.dtype)
            # One torch thread per reader: torch's own threads on top of the readers' fight for the cores (float16
            # -> float32 ran 2-3 times slower). The setting leaks to threads started later, hence the restore.
            with ThreadPoolExecutor(READ_THREADS, initializer=torch.set_num_threads, initargs=(1,)) as pool:
                for _ in pool.map(reader.read_group, groups):
                    pass
        finally:
            torch.set_num_threads(torch_threads)
            os.close(fd)

    def verified_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every written block in slot order, all layers, each checked against its hashes: (the record index of each
        of its rows, its features (num_layers, rows, hidden_size) in storage dtype). One block in memory at a time."""
        order, spans, checksums = self._block_layout()
        records = self.row_ids()
        for (first, count), expected in zip(spans, checksums):
            block = self.file["features"][:, first:first + count, :]
            if block_hashes(block) != list(expected):
                raise StoreCorruptError(f"{self.path}: slots {first}..{first + count - 1} do not match their "
                                        f"checksums. Fix: {DELETE_FIX}")
            yield records[order[first:first + count]], block

    def _check_layer(self, layer: int) -> None:
        if not 0 <= layer < self.num_layers:
            raise ProbingError(
                f"{self.path}: layer {layer} does not exist. Fix: choose a layer in 0..{self.num_layers - 1}")

    def _check_complete(self) -> None:
        if not self.is_complete:
            raise ProbingError(
                f"{self.path}: extraction is unfinished. Fix: run the extraction again; it resumes where it stopped")

    def _block_layout(self) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
        """The record position of each written slot, the blocks tiling the slots, and the checksums (block, layer)
        of those blocks."""
        if self._layout is None:
            slots = self.tables["slots"]
            slots = slots[self._kept] if self.tables["skipped"].any() else slots
            order = record_order(slots, self.path)
            spans = block_spans(self.tables["block_rows"], len(slots), self.path)
            if blocks_end(spans) != len(slots):
                raise StoreCorruptError(f"{self.path}: the last block overruns the written slots. Fix: {DELETE_FIX}")
            checksums = self.tables["block_xxh3"].checksums_at([first for first, _ in spans])
            self._layout = order, spans, checksums
        return self._layout

    @property
    def _kept(self) -> np.ndarray:
        return self.tables["skipped"] == 0
