"""HDF5 feature store: one file per (model, data set, split, pooling, context size).

Layout of a store file:

    features        (num_layers, N, D) float16 (or float32), contiguous (one layer is one run of bytes),
                    allocated when the file is created; rows are stored in the order they were written, each
                    write (an extraction window) as one contiguous block
    slots           (N,) int64     where row i sits in `features` (-1 until written, and for skipped rows)
    block_rows      (N,) int64     at the first slot of each block: its number of slots (0 elsewhere)
    block_xxh3      (N, num_layers) uint64  at the first slot of each block: per layer, the XXH3-64 hash
                    (xxhash.xxh3_64, seed 0) of the block's bytes, (rows, D) C-order in the storage dtype
    labels          (N,) int32     index into `class_names`
    word_ids        (N,) int32     index into `words`
    combination_ids (N,) int32     index into `combinations`, the word-s-class pairs (Zhao et al. 2020 §3.1)
    combinations    (M, 2) int32   (word id, label) of each combination, in order of first occurrence
    class_names, words             variable-length UTF-8 strings
    written         (N,) uint8     1 once the row is final (features stored, or the row skipped)
    skipped         (N,) uint8     1 if the encoder could not represent the row (reason counted by its SkipCounter)
    table_xxh3      (T,) uint64    the XXH3-64 hash of each table of SEALED_TABLES (every dataset above but
                                   `features`), written when the store completes (0 until then)
    staged_batches  (N,) int32     scratch of the window being extracted (see "Staging"): at the first row of a
    staged_xxh3     (N,) uint64    staged unit of batches, its number of batches and the hash of its features

Row i is record i of the split; readers get rows in that order (through `slots`). Skipped rows stay in
the file, flagged, so no row is lost silently; readers leave them out. Writing each block contiguously
costs one write per layer instead of one small write per row and layer (1.4 ms instead of 0.1 s for 300
rows of a 7-layer, 384-dimensional model). The K kept rows of a complete store fill slots 0..K-1, and its
blocks tile them: each block starts where the one before ends, from slot 0. Extraction writes windows of
consecutive records in record order (`probing.features.extraction`), so the slots of its stores are the
record order itself and a layer is read sequentially; rows written in another order are scattered into
record order on reading.

Checksums. `read_layer` hashes each block of the layer and compares it with `block_xxh3`, then refuses
NaN and inf: damaged bytes are a StoreCorruptError naming the store and the layer, never features trained
on. The layer's bytes are read a megabyte at a time (`os.preadv` at the dataset's offset in the file, which
releases the GIL) into a buffer that stays in the CPU cache, or straight into the result when it is in
record order and of the storage dtype; both checks and the conversion to the asked dtype happen there: one
pass over memory, no copy of the layer besides the result, two threads (`bench/store.py` measures it
against `numpy.load`). XXH3 hashes at memory speed (about 15 GB/s per core here; zlib's CRC-32, used by
format 2, managed 2.5 GB/s and cost more than the read itself). A 64-bit hash catches accidental damage,
not deliberate tampering. Writers refuse non-finite features before writing anything (a float16 overflow
would be stored as inf). The other tables are sealed: just before the last rows are flagged, the writer hashes each
of SEALED_TABLES (`written` as it is about to be: all ones) into `table_xxh3`, and a reader of a complete store
checks them all before using any (a rolled `labels`, a changed slot or skip flag is a StoreCorruptError naming the
store and the table). The staging scratch is not sealed: readers never use it, and it is cleared after each window.

File attributes record the request: model name/path, weights and tokenizer hashes, architecture,
pooling, context size ("all" for the whole sentence), max length, forward precision ("32" where the key is
missing: stores written before it was recorded), dtype, data name, split, data-file hashes (`data_files`, where
the caller names files), a fingerprint of the records, the shape, plus the store format, code version and creation
time. Reopening a store for a different request is refused with every differing key listed (a store of an
older format differs in `store_format`). `data_files` is compared only when the request holds it: the fingerprint
(`records_sha256`, also in the file name) covers each record's tokens, target, word and class, all a store's rows
and tables derive from, so a caller whose records identify its data passes no files (`data_files_entry([])`) and
a store is then not refused for a data file whose other content changed (every-word stores: a word task's labels
are not in their records, so editing one, or another task over the same sentences, reuses the store; one written
by an earlier version, which recorded the files, is reused too). The s-class stores keep it: their class list
comes from every file of the data set, not from the split's records. Four keys are provenance only and never
refuse a store: the model's name and path (the weights and tokenizer hashes identify the model wherever it lives and
however it is named: two fine-tuned folders `A/ft/model` and `B/ft/model` with identical weights share one store),
the creation time, and the code version — a different version is logged as a warning, because features do not
depend on this package's version unless the encoder code itself changed. A file without `store_format` is not a
store and is refused without being modified.

Crash safety. A store is built under `<name>.h5.partial` with its features allocated (HDF5 early
allocation) and renamed into place only once complete, so later writes change raw data only, never the
file structure. Each block writes its features to the next free slots together with the block's length
and hashes, flushes, records those slots, flushes, then sets its `written` flags and flushes again: a
process killed at any point leaves a file whose flagged rows are final and whose hashes cover them,
and extraction resumes with the unflagged ones (a cut-off block's slots and block entries are simply
overwritten). One block's flags may reach the file in more than one write, so a writer that finds the
last block only partly flagged unflags it and rewrites it whole. Flushing hands the data to the operating
system: this protects against a killed process, not against a power cut. A full disk (ENOSPC) is one
ProbingError line and the rows already flagged are kept; a new store larger than the free space is
refused before any of it is written.

Resuming. Until the seal, nothing guards the tables of an unfinished store, and the seal would cover any damage done
to them before it; so whenever a writer is about to fill an unfinished store (`StoreWriter`, extraction and the
merge of shards), it checks them first, without reading any features. (1) The tables the records determine
(RECORD_TABLES: class names, words, labels, word and combination ids, combinations) are computed from the records
again and compared (`StoreWriter.match_records`). Where they differ they are rewritten from the records, with a
warning naming the store and the tables, and the rows already computed are kept: features depend on each record's
tokens and target only, never on these tables, and the records are the store's own (their fingerprint was compared
with its metadata), so the result is the store a fresh run builds. A table of another shape or type is refused
(StoreCorruptError): no writer changes the file's structure, so something else wrote it. (2) The row tables
(`_resume_slot`): a row flagged written without a slot (its flag reached the disk before its slot, as a power cut
can leave it) is unflagged and computed again; a last block only partly flagged is rewritten whole, as above (with
one window for the whole split, as a small data set has, that is every row); the rows flagged as stored must then
fill the slots of the blocks before the first free one exactly once, and no skipped row may hold a slot. Anything
else (a flag cleared in an earlier block, a slot changed, a skip flag set on a stored row) is refused before any row
is computed. Not seen: two stored rows' slots swapped, which only their features tell apart.

Staging. A block is written once all its rows are computed, which for an extraction window (64 MB of features)
can take minutes. So that a kill loses at most a few seconds, the window's rows are also staged while it is
computed (`WindowStage`): each unit of finished batches writes its features straight to the slots its rows will hold
in the window's block, together with the unit's hash and batch count (at the unit's first row in `staged_xxh3`
and `staged_batches`), flushes, then records those slots and flushes. The rows stay unflagged, so the protocol
above is unchanged; a resumed run recomputes the same window plan, takes every unit whose slots and hash check out
from the file instead of computing it, and writes the window's block as an uninterrupted run would, byte for byte.

Concurrency. A process creating or writing a store holds `<name>.h5.lock` (an exclusive, non-blocking
`fcntl.flock`; the file holds its pid and stays after use), so a second run is refused at once instead
of writing the same file. Extraction only reads a complete store (a read-only open, no lock file), so
it may sit on a read-only disk.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import queue
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import h5py
import numpy as np
import torch
import xxhash

import probing
from probing.data.records import RecordTable, WordInContext, as_table
from probing.data.text import sha256_file
from probing.errors import ConfigError, ProbingError, StoreCorruptError, StoreMismatchError

log = logging.getLogger(__name__)

STORE_FORMAT = 4
FEATURE_DTYPES = ("float16", "float32")
READ_GROUP_BYTES = 1 << 20  # stored bytes a reading thread handles at once: its buffers stay in L2/L3
READ_THREADS = 2
BLOCK_TABLES = ("block_rows", "block_xxh3")  # one entry per slot, nonzero only where a block starts
TABLE_PIECE_BYTES = 4 << 20
SHAPE_KEYS = ("num_layers", "num_rows", "hidden_size", "dtype")
ROW_TABLES = ("slots", "block_rows", "labels", "word_ids", "combination_ids", "written", "skipped", "staged_batches",
              "staged_xxh3")
# Every dataset but the features (hashed per block) and the staging scratch, hashed into `table_xxh3` in this order.
SEALED_TABLES = ("class_names", "words", "labels", "word_ids", "combination_ids", "combinations", "slots",
                 "block_rows", "block_xxh3", "written", "skipped")
# The tables `encode_labels` derives from the records and the class list (`record_tables`), as created.
RECORD_TABLES = ("class_names", "words", "labels", "word_ids", "combination_ids", "combinations")
NOT_COMPARED = frozenset({"model_name", "model_path", "code_version", "created"})
# Keys compared only when the request holds them: without `data_files`, the records identify the data.
COMPARED_IF_REQUESTED = frozenset({"data_files"})
# Keys a store or a request may lack, and what their absence means: stores written before the forward precision
# was recorded were computed in float32, and featurizers that run no encoder have no precision.
IMPLIED_WHEN_MISSING = {"precision": "32"}
MISSING = "<missing>"
DELETE_FIX = "delete the file (it is rebuilt on the next run) or point `paths.store_dir` elsewhere"
ELSEWHERE = "point `paths.store_dir` (env PROBING_STORE_DIR) at"
LOCK_POLL_S = 1.0  # how often a run waiting for a store's lock tries again
WAIT_FIX = "wait for it to finish, then rerun; the extraction resumes where it stopped"


def slugify(text: str) -> str:
    """A file-name-safe form: `sentence-transformers/all-MiniLM-L6-v2` -> `sentence-transformers--all-minilm-l6-v2`."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower().replace("/", "--")).strip("-.")
    return slug or "unnamed"


def store_path(root: str | Path, model_name: str, data_name: str, split: str, pooling: str,
               context_size: int | None, records_sha256: str | None = None) -> Path:
    """`root/<model>/<data>/<split>.<pooling>.ctx-<size|all>[.<records>].h5`, every part slugified.

    With `records_sha256`, its first 10 hex digits name the data selection, so that another split seed or
    reader option gets a store of its own instead of being refused by the store of the first one."""
    context = "all" if context_size is None else str(context_size)
    records = f".{records_sha256[:10]}" if records_sha256 else ""
    name = f"{slugify(split)}.{slugify(pooling)}.ctx-{context}{records}.h5"
    return Path(root) / slugify(model_name) / slugify(data_name) / name


def records_fingerprint(records: Iterable[WordInContext]) -> str:
    """SHA-256 over (tokens, target, word, sclass) of every record, in order (sources are not included): one line per
    record, `json.dumps([tokens, target, word, sclass], ensure_ascii=False)`, each sentence encoded once per run of
    its records."""
    digest = hashlib.sha256()
    fields = records.fields() if isinstance(records, RecordTable) else (
        (record.tokens, record.target, record.word, record.sclass) for record in records)
    last, sentence = None, ""
    for tokens, target, word, sclass in fields:
        if tokens is not last:
            last, sentence = tokens, json.dumps(list(tokens), ensure_ascii=False)
        rest = json.dumps([list(target), word, sclass], ensure_ascii=False)
        digest.update(f"[{sentence}, {rest[1:]}\n".encode())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> str:
    """`probing.__version__`, plus `+g<commit>` when the package is imported from a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=Path(probing.__file__).parent,
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{probing.__version__}+g{commit}" if commit else probing.__version__


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


def metadata_differences(stored: Mapping, request: Mapping) -> list[str]:
    """`key: store has X, request has Y` for every compared key that differs or exists on one side only (a key of
    COMPARED_IF_REQUESTED only where the request holds it)."""
    stored = IMPLIED_WHEN_MISSING | {key: from_attr(value) for key, value in stored.items()}
    request = IMPLIED_WHEN_MISSING | {key: to_attr(value) for key, value in request.items()}
    not_compared = NOT_COMPARED | (COMPARED_IF_REQUESTED - request.keys())
    return [
        f"{key}: store has {stored.get(key, MISSING)!r}, request has {request.get(key, MISSING)!r}"
        for key in sorted((stored.keys() | request.keys()) - not_compared)
        if stored.get(key, MISSING) != request.get(key, MISSING)
    ]


def data_files_entry(files: Sequence[str | Path]) -> dict[str, list[list[str]]]:
    """The `data_files` request key: the name and SHA-256 of each file, in reading order (names may repeat); none
    for no files, where the records identify the store's data (see the module docstring)."""
    return {"data_files": [[Path(f).name, sha256_file(f)] for f in files]} if files else {}


def check_metadata(stored: Mapping, request: Mapping, path: Path) -> None:
    """Refuse a store built for another request, listing every differing key; another code version only warns."""
    differences = metadata_differences(stored, {"store_format": STORE_FORMAT, **request})
    if differences:
        listing = "\n  ".join(differences)
        raise StoreMismatchError(
            f"{path}: the feature store was built for a different request:\n  {listing}\nFix: {DELETE_FIX}")
    stored_version = from_attr(stored.get("code_version", MISSING))
    if stored_version != code_version():
        log.warning("%s was written by probing %s, this is probing %s; reusing it",
                    path, stored_version, code_version())


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def is_disk_full(error: OSError) -> bool:
    """ENOSPC, whether raised by Python (errno set) or reported by HDF5 (the reason in the text only)."""
    return error.errno == errno.ENOSPC or os.strerror(errno.ENOSPC) in str(error)


def disk_full_error(path: Path, detail: str = os.strerror(errno.ENOSPC)) -> ProbingError:
    return ProbingError(
        f"{path}: the disk is full ({detail}). Fix: free disk space and rerun (rows already written are "
        f"kept and the extraction resumes where it stopped), or {ELSEWHERE} a disk with room")


def unwritable_error(path: Path, error: OSError) -> ProbingError:
    if is_disk_full(error):
        return disk_full_error(path)
    return ProbingError(f"{path}: the store cannot be written ({one_line(error)}). "
                        f"Fix: make {path.parent} writable, or {ELSEWHERE} a writable folder")


@contextmanager
def disk_full_is_user_error(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        if not is_disk_full(error):
            raise
        raise disk_full_error(path) from error


@contextmanager
def store_lock(path: Path, wait_s: float = 0.0) -> Iterator[None]:
    """Hold `<store>.lock` exclusively while creating or writing `path`. Another holder makes this a ProbingError,
    at once or after waiting up to `wait_s` seconds for it to finish (the parallel jobs of a sweep share stores).

    The lock file is never removed: a run that had opened the removed file and one that created a new file
    could then both hold "the" lock."""
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise unwritable_error(path, error) from error
    try:
        if not _take_lock(fd, path, wait_s):
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            waited = f" (waited {wait_s:g} s)" if wait_s > 0 else ""
            raise ProbingError(f"{path}: another run (pid {holder}) is extracting into this store{waited}. "
                               f"Fix: {WAIT_FIX}")
        _record_pid(fd)
        yield
    finally:
        os.close(fd)  # releases the lock


def _take_lock(fd: int, path: Path, wait_s: float) -> bool:
    """Take the exclusive lock on `fd`, polling for up to `wait_s` seconds while another run holds it."""
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not announced:
                log.info("%s: another run is extracting into this store; waiting for it (up to %g s)", path, wait_s)
                announced = True
            time.sleep(min(LOCK_POLL_S, left))


def _record_pid(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError:
        pass  # the pid only makes a refused run's message more helpful


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


def block_spans(block_rows: np.ndarray, end: int, path: Path) -> list[tuple[int, int]]:
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
    if values.dtype != object:
        return xxhash.xxh3_64_intdigest(np.ascontiguousarray(values))
    hasher = xxhash.xxh3_64()
    for value in values:
        data = value if isinstance(value, bytes) else str(value).encode("utf-8")
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)
    return hasher.intdigest()


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


def tables_named(tables: Sequence[str]) -> str:
    """`a`, `b` and `c` tables."""
    names = [f"`{name}`" for name in tables]
    joined = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{joined} table{'s' if len(names) > 1 else ''}"


def describe_rows(rows: np.ndarray, shown: int = 5) -> str:
    listed = ", ".join(str(row) for row in rows[:shown])
    more = f" and {len(rows) - shown} more" if len(rows) > shown else ""
    return f"record{'s' if len(rows) > 1 else ''} {listed}{more}"


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
    tables = record_tables(records, class_names)
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


def _create_tables(handle: h5py.File, num_layers: int, tables: Mapping[str, np.ndarray]) -> None:
    """RECORD_TABLES from `tables` (`record_tables`), and the row tables of a store with no row written."""
    for name in RECORD_TABLES:
        handle.create_dataset(name, data=tables[name])
    num_rows = len(tables["labels"])
    handle.create_dataset("slots", data=np.full(num_rows, -1, np.int64))
    handle.create_dataset("block_rows", data=np.zeros(num_rows, np.int64))
    handle.create_dataset("block_xxh3", data=np.zeros((num_rows, num_layers), np.uint64))
    handle.create_dataset("written", data=np.zeros(num_rows, np.uint8))
    handle.create_dataset("skipped", data=np.zeros(num_rows, np.uint8))
    handle.create_dataset("table_xxh3", data=np.zeros(len(SEALED_TABLES), np.uint64))
    handle.create_dataset("staged_batches", data=np.zeros(num_rows, np.int32))
    handle.create_dataset("staged_xxh3", data=np.zeros(num_rows, np.uint64))


def _create_features(handle: h5py.File, num_layers: int, num_rows: int, hidden_size: int, dtype: str) -> None:
    """The features dataset, contiguous and allocated now (so that later writes change raw data only and readers
    find it at one offset); no zero fill, as unwritten rows are never read."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    handle.create_dataset("features", shape=(num_layers, num_rows, hidden_size), dtype=dtype, dcpl=dcpl,
                          fill_time="never")


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


class StoreWriter:
    """Writes rows into an existing store with the crash-safe protocol: features and checksums, slots, flags,
    each flushed. A full disk is a ProbingError; the rows flagged before it stay valid."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.file = open_store_file(self.path, "r+")
        try:
            check_format(self.file.attrs, self.path)
            self._written = self.file["written"][()] == 1  # kept in step with the file by _mark_written
            with disk_full_is_user_error(self.path):
                self._next_slot = self._resume_slot()
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
        fingerprint checked with `check_metadata`) on an unfinished store."""
        expected = record_tables(records, class_names)
        differing = [name for name in RECORD_TABLES if not same_table(self.file[name][()], expected[name])]
        altered = [name for name in differing
                   if (self.file[name].shape, self.file[name].dtype) != (expected[name].shape, expected[name].dtype)]
        if altered:
            raise StoreCorruptError(
                f"{self.path}: the shape or type of the {tables_named(altered)} of this unfinished store is not that "
                f"of its records' (no extraction changes it; something else wrote the file). Fix: {DELETE_FIX}")
        if differing:
            with disk_full_is_user_error(self.path):
                for name in differing:
                    self.file[name][...] = expected[name]
                self.file.flush()
            log.warning("%s: the %s of this unfinished store did not match its records (damaged before it was "
                        "sealed); rewritten from the records, keeping the %d rows already written", self.path,
                        tables_named(differing), int(self._written.sum()))

    def pending_rows(self) -> np.ndarray:
        """Rows whose `written` flag is not set, ascending."""
        return np.flatnonzero(~self._written)

    def window(self, rows: Sequence[int]) -> WindowStage:
        """The staging of a window of unwritten `rows` (ascending), to be written by `write_rows` as the next block."""
        return WindowStage(self, np.asarray(rows, dtype=np.int64), self._next_slot)

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
        (see "Resuming")."""
        slots, skipped = self.file["slots"][()], self.file["skipped"][()] != 0
        stored = self._written & ~skipped
        unplaced = stored & (slots < 0)
        stored &= ~unplaced
        spans = block_spans(self.file["block_rows"][()], int(slots[stored].max(initial=-1)) + 1, self.path)
        cut_off = np.zeros_like(stored)
        if spans:
            first, count = spans[-1]
            in_last = stored & (slots >= first) & (slots < first + count)
            if in_last.sum() != count:
                cut_off, stored = in_last, stored & ~in_last
                spans.pop()
        end = blocks_end(spans)
        placed_skips = self._written & skipped & (slots >= 0)
        if placed_skips.any() or (np.bincount(slots[stored], minlength=end) != 1).any():  # stored slots are < end
            raise StoreCorruptError(
                f"{self.path}: the `written`, `skipped` and `slots` tables of this unfinished store disagree (the "
                f"{int(stored.sum())} rows flagged as stored must fill the {end} slots of its blocks exactly once, "
                f"and skipped rows hold no slot): a flag or a slot was damaged. Fix: {DELETE_FIX}")
        if unplaced.any():
            log.warning("%s: %s flagged as written but given no slot (a flag that reached the disk before its "
                        "slot); computed again", self.path, describe_rows(np.flatnonzero(unplaced)))
        self._unflag(unplaced | cut_off)
        return end

    def _unflag(self, rows: np.ndarray) -> None:
        """Clear the `written` flags of the rows where the mask `rows` is set (no write for none)."""
        if rows.any():
            self._set_values("written", np.flatnonzero(rows), 0)
            self._written[rows] = False

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
        pending = ~self._written
        pending[sorted_rows] = False
        if len(sorted_rows) and not pending.any():
            tables = read_tables(self.file)
            tables["written"] = np.ones_like(tables["written"])
            self.file["table_xxh3"][:] = table_hashes(tables)
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
        self.writer.write_rows(self.rows, pooled)
        span, file = slice(int(self.rows[0]), int(self.rows[-1]) + 1), self.writer.file
        if file["staged_batches"][span].any():
            with disk_full_is_user_error(self.writer.path):
                file["staged_batches"][span] = 0
                file["staged_xxh3"][span] = 0
                file.flush()
