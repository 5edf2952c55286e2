"""Checksums of a store: the XXH3-64 hashes (xxhash, seed 0) of its blocks of features and of its other tables, and
the finiteness check that goes with them.

See docs/features.md, 'Store checksums'.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import h5py
import numpy as np
import xxhash

from probing.errors import StoreCorruptError
from probing.features.store.layout import BLOCK_TABLES, DELETE_FIX, SEALED_TABLES
from probing.features.store.pieces import piece_rows, read_pieces

TABLE_PIECE_BYTES = 4 << 20


def all_finite(values: np.ndarray) -> bool:
    if values.dtype == np.float16 and values.flags.c_contiguous:
        # NaN and inf are the bit patterns 0x7C00..0x7FFF and 0xFC00..0xFFFF: the largest as int16 and as uint16,
        # so two maxima find them without a temporary array (several times faster than np.isfinite)
        bits = values.reshape(-1).view(np.uint16)
        return values.size == 0 or (int(bits.view(np.int16).max()) < 0x7C00 and int(bits.max()) < 0xFC00)
    return bool(np.isfinite(values).all())


def block_hashes(block: np.ndarray) -> list[int]:
    """The XXH3-64 hash of each layer of a block (num_layers, rows, D), as `block_xxh3` records it."""
    return [xxhash.xxh3_64_intdigest(layer) for layer in block]


def table_hash(values: np.ndarray) -> int:
    """The XXH3-64 hash of one table: its bytes, or for a table of strings each string's UTF-8 bytes after their
    length."""
    hasher = xxhash.xxh3_64()
    add_to_hash(hasher, values)
    return hasher.intdigest()


def add_to_hash(hasher, values: np.ndarray) -> None:
    """Add `values` to a `table_hash` being computed piece by piece (XXH3 gives the same hash whatever the pieces)."""
    if values.dtype != object:
        hasher.update(np.ascontiguousarray(values))
        return
    for value in values:
        data = value if isinstance(value, bytes) else str(value).encode("utf-8")
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)


def stored_table_hashes(handle: h5py.File, fills: Mapping[str, int]) -> list[int]:
    """`table_hashes` of SEALED_TABLES as the open file holds them, each read a piece at a time; a table named in
    `fills` is hashed as though it held only that value."""
    hashes = []
    for name in SEALED_TABLES:
        dataset, hasher = handle[name], xxhash.xxh3_64()
        if name in fills:
            piece = np.full((piece_rows(dataset), *dataset.shape[1:]), fills[name], dataset.dtype)
            for first in range(0, len(dataset), len(piece)):
                add_to_hash(hasher, piece[:len(dataset) - first])
        else:
            for _, piece in read_pieces(dataset):
                add_to_hash(hasher, piece)
        hashes.append(hasher.intdigest())
    return hashes


def read_tables(handle: h5py.File) -> dict[str, np.ndarray]:
    return {name: handle[name][()] for name in SEALED_TABLES}


def table_hashes(tables: Mapping[str, np.ndarray]) -> list[int]:
    return [table_hash(tables[name]) for name in SEALED_TABLES]


def read_checked_tables(handle: h5py.File) -> tuple[dict, list[int]]:
    """SEALED_TABLES as a reader keeps them, and the hash of each. The block tables, one entry per slot but nonzero
    only at block starts, are hashed a piece at a time and kept as BlockStarts: with 3 layers they hold 32 bytes a
    row, a quarter of a float16 layer of D=64, and reading them whole cost as much."""
    blocks, streamed = BlockStarts.read(handle)
    tables = {name: blocks if name in BLOCK_TABLES else read_table(handle[name]) for name in SEALED_TABLES}
    hashes = dict(zip(BLOCK_TABLES, streamed))
    return tables, [hashes[name] if name in hashes else table_hash(tables[name]) for name in SEALED_TABLES]


def read_table(dataset: h5py.Dataset) -> np.ndarray:
    """A whole table; one `os.preadv` where it is a contiguous run of numbers (twice as fast as h5py's read)."""
    offset = dataset.id.get_offset()
    if offset is None or dataset.dtype.kind not in "iuf":
        return dataset[()]
    values = np.empty(dataset.shape, dataset.dtype)
    with open(dataset.file.filename, "rb", buffering=0) as file:
        if os.preadv(file.fileno(), [values], offset) != values.nbytes:
            return dataset[()]
    return values


def table_pieces(dataset: h5py.Dataset, hasher) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) of a table a few MB at a time in one reused buffer, each piece added to `hasher` first."""
    row_shape = dataset.shape[1:]
    per = max(1, TABLE_PIECE_BYTES // (dataset.dtype.itemsize * int(np.prod(row_shape))))
    buffer = np.empty((min(per, len(dataset)), *row_shape), dataset.dtype)
    offset = dataset.id.get_offset()  # None unless contiguous and allocated; h5py's sliced reads are slower
    with open(dataset.file.filename, "rb", buffering=0) as file:
        for first in range(0, len(dataset), per):
            piece = buffer[:min(per, len(dataset) - first)]
            if offset is None or os.preadv(file.fileno(), [piece], offset + first * buffer[0].nbytes) != piece.nbytes:
                dataset.read_direct(piece, np.s_[first:first + len(piece)], np.s_[0:len(piece)])
            hasher.update(piece)
            yield first, piece


class BlockStarts:
    """`block_rows` and `block_xxh3` at the slots where block_rows is nonzero; indexing by slot gives block_rows."""

    def __init__(self, length: int, starts: np.ndarray, rows: np.ndarray, checksums: np.ndarray):
        self.length, self.starts, self.rows, self.checksums = length, starts, rows, checksums

    @classmethod
    def read(cls, handle: h5py.File) -> tuple[BlockStarts, list[int]]:
        """The block tables and their XXH3-64 hashes (as table_hash computes them), read a few MB at a time."""
        rows_hash, checksums_hash = xxhash.xxh3_64(), xxhash.xxh3_64()
        starts, rows = [np.zeros(0, np.int64)], [np.zeros(0, handle["block_rows"].dtype)]
        for first, piece in table_pieces(handle["block_rows"], rows_hash):
            nonzero = np.flatnonzero(piece)
            starts.append(first + nonzero)
            rows.append(piece[nonzero])
        starts = np.concatenate(starts)
        checksums = [np.zeros((0, *handle["block_xxh3"].shape[1:]), handle["block_xxh3"].dtype)]
        for first, piece in table_pieces(handle["block_xxh3"], checksums_hash):
            checksums.append(piece[starts[(starts >= first) & (starts < first + len(piece))] - first])
        blocks = cls(len(handle["block_rows"]), starts, np.concatenate(rows), np.concatenate(checksums))
        return blocks, [rows_hash.intdigest(), checksums_hash.intdigest()]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, slot: int) -> int:
        index = int(np.searchsorted(self.starts, slot))
        return int(self.rows[index]) if index < len(self.starts) and self.starts[index] == slot else 0

    def checksums_at(self, firsts: list[int]) -> np.ndarray:
        """block_xxh3 at the given block starts (slots where block_rows is nonzero)."""
        return self.checksums[np.searchsorted(self.starts, firsts)]


def check_tables(tables: Mapping[str, np.ndarray], expected: np.ndarray, path: Path,
                 hashes: Sequence[int] | None = None) -> None:
    """Refuse a complete store whose tables do not match the hashes sealed when it was completed."""
    for name, actual, wanted in zip(SEALED_TABLES, hashes or table_hashes(tables), expected):
        if actual != wanted:
            raise StoreCorruptError(f"{path}: the `{name}` table is damaged (it does not match the checksum recorded "
                                    f"when the store was completed). Fix: {DELETE_FIX}")
