"""Writing a store: `create_store_file` builds one with no row written, `StoreWriter` fills it block by block with the
crash-safe protocol, and `WindowStage` keeps an extraction window's finished batches while the window is computed.

See docs/features.md, 'Writing a store: crash safety, resuming, staging'.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np
import xxhash

from probing.data.records import WordInContext
from probing.errors import ConfigError, ProbingError, StoreCorruptError
from probing.features.store.hashes import all_finite, block_hashes, stored_table_hashes
from probing.features.store.labels import ROW_RECORD_TABLES, STRINGS, RecordTables, same_table
from probing.features.store.layout import (
    DELETE_FIX,
    FEATURE_DTYPES,
    RECORD_TABLES,
    SEALED_TABLES,
    SHAPE_KEYS,
    STORE_FORMAT,
    SlotCheck,
    block_spans,
    blocks_end,
    check_format,
    open_store_file,
    to_attr,
)
from probing.features.store.lock import disk_full_error, disk_full_is_user_error
from probing.features.store.metadata import check_metadata, code_version
from probing.features.store.pieces import TABLE_ROWS, PieceCache, RowRuns, fill_table, read_pieces

log = logging.getLogger(__name__)


def create_store_file(path: Path, metadata: Mapping, records: Sequence[WordInContext],
                      class_names: Sequence[str]) -> None:
    """Build the whole file under `<name>.h5.partial`, then rename it to `path` (atomic on one file system).

    If anything fails (a full disk, say), the partial file is removed."""
    missing = [key for key in SHAPE_KEYS if key not in metadata]
    if missing or metadata["num_rows"] != len(records):
        raise ValueError(f"store metadata needs {SHAPE_KEYS} with num_rows = {len(records)}; "
                         f"got {({key: metadata.get(key) for key in SHAPE_KEYS})}")
    if metadata["dtype"] not in FEATURE_DTYPES:
        raise ConfigError(
            f"features.dtype={metadata['dtype']!r} is not supported. Fix: features.dtype=float16 or float32")
    tables = RecordTables(records, class_names)
    attrs = {"store_format": STORE_FORMAT, **metadata, "code_version": code_version(),
             "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    partial = path.with_name(path.name + ".partial")
    try:
        with disk_full_is_user_error(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            check_free_space(path, metadata)
            with h5py.File(partial, "w") as handle:
                handle.attrs.update({key: to_attr(value) for key, value in attrs.items()})
                _create_features(handle, metadata["num_layers"], len(records), metadata["hidden_size"],
                                 metadata["dtype"])
                _create_tables(handle, metadata["num_layers"], tables)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def check_free_space(path: Path, metadata: Mapping) -> None:
    """Refuse a store larger than the free space before writing any of it: the features are allocated sparse, so
    a full disk would otherwise show only during extraction, and HDF5 2.0 can crash (SIGSEGV) writing the string
    tables on a full disk."""
    row_bytes = metadata["num_layers"] * (metadata["hidden_size"] * np.dtype(metadata["dtype"]).itemsize + 4) + 64
    needed, free = metadata["num_rows"] * row_bytes, shutil.disk_usage(path.parent).free
    if needed > free:
        raise disk_full_error(path, f"the store needs {needed / 1e6:,.1f} MB, {free / 1e6:,.1f} MB are free")


def _create_tables(handle: h5py.File, num_layers: int, tables: RecordTables) -> None:
    """RECORD_TABLES from `tables`, and the row tables of a store with no row written, written a piece at a time."""
    handle.create_dataset("class_names", data=tables.class_names_table())
    num_rows = tables.num_rows
    for name in ROW_RECORD_TABLES:
        handle.create_dataset(name, (num_rows,), np.int32)
    for first, chunk in tables.row_chunks():
        for name, values in chunk.items():
            handle[name][first:first + len(values)] = values
    words = handle.create_dataset("words", (tables.num_words,), STRINGS)
    for first in range(0, tables.num_words, TABLE_ROWS):
        words[first:first + TABLE_ROWS] = tables.words(first, first + TABLE_ROWS)
    handle.create_dataset("combinations", data=tables.combinations())
    rows, per_layer, sealed = (num_rows,), (num_rows, num_layers), (len(SEALED_TABLES),)
    for name, shape, dtype, value in (("slots", rows, np.int64, -1), ("block_rows", rows, np.int64, 0),
                                      ("block_xxh3", per_layer, np.uint64, 0), ("written", rows, np.uint8, 0),
                                      ("skipped", rows, np.uint8, 0), ("table_xxh3", sealed, np.uint64, 0),
                                      ("staged_batches", rows, np.int32, 0), ("staged_xxh3", rows, np.uint64, 0)):
        fill_table(handle.create_dataset(name, shape, dtype), value)


def _create_features(handle: h5py.File, num_layers: int, num_rows: int, hidden_size: int, dtype: str) -> None:
    """The features dataset, contiguous and allocated now (so that later writes change raw data only and readers
    find it at one offset); no zero fill, as unwritten rows are never read."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    handle.create_dataset("features", shape=(num_layers, num_rows, hidden_size), dtype=dtype, dcpl=dcpl,
                          fill_time="never")


class StoreWriter:
    """Writes rows into an existing store with the crash-safe protocol: features and checksums, slots, flags,
    each flushed. A full disk is a ProbingError; the rows flagged before it stay valid."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.file = open_store_file(self.path, "r+")
        try:
            check_format(self.file.attrs, self.path)
            self._written = np.zeros(len(self.file["written"]), bool)  # kept in step with the file by _mark_written
            for first, flags in read_pieces(self.file["written"]):
                self._written[first:first + len(flags)] = flags == 1
            with disk_full_is_user_error(self.path):
                self._next_slot = self._resume_slot()
            self._reserved_slot = self._next_slot  # past the windows made (`window`), written or not
        except BaseException:
            self.file.close()
            raise

    def close(self) -> None:
        with disk_full_is_user_error(self.path):
            self.file.close()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            self.close()
        except (OSError, ProbingError):
            if exc_type is None:  # otherwise the error on its way out already says what went wrong
                raise

    def check_metadata(self, request: Mapping) -> None:
        check_metadata(self.file.attrs, request, self.path)

    def match_records(self, records: Sequence[WordInContext], class_names: Sequence[str]) -> None:
        """Make the tables the records determine (RECORD_TABLES) those of `records` and `class_names` before any
        row is computed (see "Resuming"): the ones that differ in their values are rewritten from the records, with a
        warning; one of another shape or type is a StoreCorruptError. Call it with the store's own records (their
        fingerprint checked with `check_metadata`) on an unfinished store. The tables are compared and rewritten a
        piece at a time (`RecordTables`)."""
        expected = RecordTables(records, class_names)
        same = self._same_row_tables(expected)
        small = {"class_names": expected.class_names_table(), "combinations": expected.combinations()}
        same.update({name: same_table(self.file[name][()], values) for name, values in small.items()})
        same["words"] = self._same_words(expected)
        shapes = {**{name: ((expected.num_rows,), np.int32) for name in ROW_RECORD_TABLES},
                  **{name: (values.shape, values.dtype) for name, values in small.items()},
                  "words": ((expected.num_words,), STRINGS)}
        differing = [name for name in RECORD_TABLES if not same[name]]
        altered = [name for name in differing if (self.file[name].shape, self.file[name].dtype) != shapes[name]]
        if altered:
            raise StoreCorruptError(
                f"{self.path}: the shape or type of the {tables_named(altered)} of this unfinished store is not that "
                f"of its records' (no extraction changes it; something else wrote the file). Fix: {DELETE_FIX}")
        if differing:
            with disk_full_is_user_error(self.path):
                self._rewrite(expected, differing, small)
                self.file.flush()
            log.warning("%s: the %s of this unfinished store did not match its records (damaged before it was "
                        "sealed); rewritten from the records, keeping the %d rows already written", self.path,
                        tables_named(differing), int(np.count_nonzero(self._written)))

    def _same_row_tables(self, expected: RecordTables) -> dict[str, bool]:
        """Whether each of ROW_RECORD_TABLES holds `expected`'s (its shape is checked when the file is opened)."""
        same = {name: self.file[name].dtype == np.int32 for name in ROW_RECORD_TABLES}
        for first, chunk in expected.row_chunks():
            for name, values in chunk.items():
                same[name] = same[name] and np.array_equal(self.file[name][first:first + len(values)], values)
        return same

    def _same_words(self, expected: RecordTables) -> bool:
        stored = self.file["words"]
        if (stored.shape, stored.dtype) != ((expected.num_words,), STRINGS):
            return False
        return all(same_table(stored[first:first + TABLE_ROWS], expected.words(first, first + TABLE_ROWS))
                   for first in range(0, expected.num_words, TABLE_ROWS))

    def _rewrite(self, expected: RecordTables, names: Sequence[str], small: Mapping[str, np.ndarray]) -> None:
        """Write the tables `names` (of RECORD_TABLES, of the expected shapes and types) from `expected`."""
        if set(names) & set(ROW_RECORD_TABLES):
            for first, chunk in expected.row_chunks():
                for name in set(names) & chunk.keys():
                    self.file[name][first:first + len(chunk[name])] = chunk[name]
        for name in set(names) & small.keys():
            self.file[name][...] = small[name]
        if "words" in names:
            for first in range(0, expected.num_words, TABLE_ROWS):
                self.file["words"][first:first + TABLE_ROWS] = expected.words(first, first + TABLE_ROWS)

    def pending_rows(self) -> RowRuns:
        """Rows whose `written` flag is not set, ascending, as runs of consecutive rows (one for a new store)."""
        return RowRuns.unset(self._written)

    def window(self, rows: Sequence[int]) -> WindowStage:
        """The staging of a window of unwritten `rows` (ascending), to be written by `write_rows` as the block after
        those of the windows made before it (a window may be made before the previous one is written; they are
        written in the order they were made)."""
        first = max(self._next_slot, self._reserved_slot)
        self._reserved_slot = first + len(rows)
        return WindowStage(self, np.asarray(rows, dtype=np.int64), first)

    def write_rows(self, rows: Sequence[int], features: np.ndarray) -> None:
        """Store `features` (len(rows), num_layers, D) of the unwritten rows `rows` in the next free slots."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(np.unique(rows)) != len(rows) or self._written[rows].any():
            raise ValueError(f"{self.path}: rows to write must be distinct and not yet written")
        if not len(rows):
            return
        block = self._storage_block(rows, np.asarray(features))
        first, count = self._next_slot, len(rows)
        with disk_full_is_user_error(self.path):
            self.file["features"][:, first:first + count, :] = block
            self.file["block_rows"][first] = count
            self.file["block_xxh3"][first] = block_hashes(block)
            self.file.flush()
            order = np.argsort(rows)
            self._set_values("slots", rows[order], np.arange(first, first + count)[order])
            self._mark_written(rows[order])
        self._next_slot = first + count

    def mark_skipped(self, rows: Sequence[int]) -> None:
        """Flag rows the encoder could not represent: `skipped` first, then `written`."""
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        with disk_full_is_user_error(self.path):
            self._set_values("skipped", rows, 1)
            self._mark_written(rows)

    def _resume_slot(self) -> int:
        """The first free slot: after the last block, or at its start if a kill left it only partly flagged (its
        flagged rows are unflagged, so that it is rewritten whole and its checksums stay true). Rows flagged as
        stored without a slot are unflagged too, to be computed. The other stored rows must fill the slots before the
        first free one exactly once, and no skipped row may hold a slot; otherwise the store is refused, unchanged
        (see "Resuming"). The tables are read a piece at a time, twice (`SlotCheck`)."""
        check = SlotCheck(self.file, self._written)
        spans = block_spans(PieceCache(self.file["block_rows"]), check.top + 1, self.path)
        end = blocks_end(spans)
        in_last, stored, disagree = check.against(spans[-1] if spans else (end, 0))
        if spans and len(in_last) != spans[-1][1]:
            cut_off, end = in_last, spans[-1][0]
            stored, disagree = stored - len(in_last), check.before_last_disagree
        else:
            cut_off = in_last[:0]
        if check.placed_skips or disagree or stored != end:
            raise StoreCorruptError(
                f"{self.path}: the `written`, `skipped` and `slots` tables of this unfinished store disagree (the "
                f"{stored} rows flagged as stored must fill the {end} slots of its blocks exactly once, "
                f"and skipped rows hold no slot): a flag or a slot was damaged. Fix: {DELETE_FIX}")
        if len(check.unplaced):
            log.warning("%s: %s flagged as written but given no slot (a flag that reached the disk before its "
                        "slot); computed again", self.path, describe_rows(check.unplaced))
        self._unflag(np.sort(np.concatenate([check.unplaced, cut_off])))
        return end

    def _unflag(self, sorted_rows: np.ndarray) -> None:
        """Clear the `written` flags of `sorted_rows` (no write for none)."""
        if len(sorted_rows):
            self._set_values("written", sorted_rows, 0)
            self._written[sorted_rows] = False

    def _storage_block(self, rows: np.ndarray, features: np.ndarray) -> np.ndarray:
        """`features` as (num_layers, rows, D) in the storage dtype, C-contiguous; NaN and inf are refused."""
        dtype = self.file["features"].dtype
        with np.errstate(over="ignore"):
            block = np.ascontiguousarray(features.astype(dtype, copy=False).transpose(1, 0, 2))
        if not all_finite(block):
            raise self._non_finite_error(rows, features, block)
        return block

    def _non_finite_error(self, rows: np.ndarray, features: np.ndarray, block: np.ndarray) -> ProbingError:
        if not np.isfinite(features).all():
            bad = rows[~np.isfinite(features).reshape(len(rows), -1).all(axis=1)]
            return ProbingError(
                f"{self.path}: the encoder returned NaN or inf features for {describe_rows(bad)}; nothing of this "
                f"batch was stored. Fix: check the model, and compute in full precision (features.precision=32)")
        bad = rows[~np.isfinite(block).transpose(1, 0, 2).reshape(len(rows), -1).all(axis=1)]
        return ProbingError(
            f"{self.path}: the features of {describe_rows(bad)} exceed the {block.dtype} range and would be stored "
            f"as inf; nothing of this batch was stored. Fix: features.dtype=float32, and delete the file (the dtype "
            f"is part of the request; it is rebuilt on the next run)")

    def _set_values(self, name: str, sorted_rows: np.ndarray, values) -> None:
        if len(sorted_rows):
            self.file[name][sorted_rows] = values
            self.file.flush()

    def _mark_written(self, sorted_rows: np.ndarray) -> None:
        """Flag `sorted_rows`; before the last flags of the store, seal its tables (`written` as it is about to be)."""
        newly = np.unique(sorted_rows)
        newly = newly[~self._written[newly]]
        if len(sorted_rows) and len(newly) == len(self._written) - np.count_nonzero(self._written):
            self.file["table_xxh3"][:] = stored_table_hashes(self.file, {"written": 1})
            self.file.flush()
        self._set_values("written", sorted_rows, 1)
        self._written[sorted_rows] = True


class WindowStage:
    """The rows of one extraction window (ascending), which will fill the slots from `first` on as one block, staged
    unit by unit while they are computed so that a killed run keeps them (see "Staging" above).

    A unit is a run of the window's batches, in plan order; `batches` are lists of positions in the window."""

    def __init__(self, writer: StoreWriter, rows: np.ndarray, first: int):
        self.writer, self.rows, self.first = writer, rows, first

    @property
    def row_shape(self) -> tuple[int, int]:
        """(num_layers, hidden_size) of one row's features."""
        layers, _, dim = self.writer.file["features"].shape
        return layers, dim

    @property
    def dtype(self) -> np.dtype:
        """The storage dtype of the features."""
        return self.writer.file["features"].dtype

    def save(self, batches: Sequence[Sequence[int]], pooled: np.ndarray) -> None:
        """Stage the unit `batches`, whose rows' features (float32, (rows, num_layers, D)) are in `pooled` at their
        positions: features and hash, flushed, then slots, flushed."""
        positions = np.sort(np.concatenate([np.asarray(batch, dtype=np.int64) for batch in batches]))
        rows, file = self.rows[positions], self.writer.file
        block = self.writer._storage_block(rows, pooled[positions])
        key = self.rows[batches[0][0]]
        with disk_full_is_user_error(self.writer.path):
            file["features"][:, self.first + positions, :] = block
            file["staged_batches"][key] = len(batches)
            file["staged_xxh3"][key] = xxhash.xxh3_64_intdigest(block)
            file.flush()
            self.writer._set_values("slots", rows, self.first + positions)

    def restore(self, batches: Sequence[Sequence[int]], pooled: np.ndarray) -> int:
        """Put into `pooled` the leading units of `batches` that a killed run staged (their slots those of this
        window, their features matching their hash); returns the number of batches restored. Anything else (no unit,
        another plan, damage) is left to be computed again."""
        done, file = 0, self.writer.file
        while done < len(batches):
            key = self.rows[batches[done][0]]
            count = int(file["staged_batches"][key])
            if count < 1 or done + count > len(batches):
                break
            positions = np.sort(np.concatenate([np.asarray(batch, dtype=np.int64) for batch in
                                                batches[done:done + count]]))
            if not np.array_equal(file["slots"][self.rows[positions]], self.first + positions):
                break
            block = file["features"][:, self.first + positions, :]
            if xxhash.xxh3_64_intdigest(block) != int(file["staged_xxh3"][key]):
                break
            pooled[positions] = block.transpose(1, 0, 2)
            done += count
        return done

    def commit(self, pooled: np.ndarray) -> None:
        """Write the window as one block (`StoreWriter.write_rows`), then clear the staging entries of its rows (the
        window's rows are consecutive but for skipped ones, which are never staged)."""
        if self.writer._next_slot != self.first:
            raise RuntimeError(f"{self.writer.path}: a window staged at slot {self.first} is committed at slot "
                               f"{self.writer._next_slot} (windows are written in the order they were made)")
        self.writer.write_rows(self.rows, pooled)
        span, file = slice(int(self.rows[0]), int(self.rows[-1]) + 1), self.writer.file
        if file["staged_batches"][span].any():
            with disk_full_is_user_error(self.writer.path):
                file["staged_batches"][span] = 0
                file["staged_xxh3"][span] = 0
                file.flush()


def tables_named(tables: Sequence[str]) -> str:
    """`a`, `b` and `c` tables."""
    names = [f"`{name}`" for name in tables]
    joined = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{joined} table{'s' if len(names) > 1 else ''}"


def describe_rows(rows: np.ndarray, shown: int = 5) -> str:
    listed = ", ".join(str(row) for row in rows[:shown])
    more = f" and {len(rows) - shown} more" if len(rows) > shown else ""
    return f"record{'s' if len(rows) > 1 else ''} {listed}{more}"
