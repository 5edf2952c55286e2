"""HDF5 feature store: one file per (model, data set, split, pooling, context size).

Layout of a store file:

    features        (num_layers, N, D) float16 (or float32), chunked (1, rows_per_chunk, D) so that
                    reading one layer never touches the chunks of another; rows are stored in the order
                    they were computed (length-sorted batches), each batch as one contiguous block
    slots           (N,) int64     where row i sits in `features` (-1 until written, and for skipped rows)
    labels          (N,) int32     index into `class_names`
    word_ids        (N,) int32     index into `words`
    combination_ids (N,) int32     index into `combinations`, the word-s-class pairs (Zhao et al. 2020 §3.1)
    combinations    (M, 2) int32   (word id, label) of each combination, in order of first occurrence
    class_names, words             variable-length UTF-8 strings
    written         (N,) uint8     1 once the row is final (features stored, or the row skipped)
    skipped         (N,) uint8     1 if the encoder could not represent the row (reason counted by its SkipCounter)

Row i is record i of the split; readers get rows in that order (through `slots`). Skipped rows stay in
the file, flagged, so no row is lost silently; readers leave them out. Writing each batch contiguously
costs one block write per layer instead of one small write per row and layer (1.4 ms instead of 0.1 s
for a 300-row batch of a 7-layer, 384-dimensional model).

File attributes record the request: model name/path, weights and tokenizer hashes, architecture,
pooling, context size ("all" for the whole sentence), max length, dtype, data name, split and data-file
hashes, a fingerprint of the records, the shape, plus code version and creation time. Reopening a store
for a different request is refused with every differing key listed. Three keys are provenance only and
never refuse a store: the model path (the weights hash identifies the model wherever it lives), the
creation time, and the code version — a different version is logged as a warning, because features do
not depend on this package's version unless the encoder code itself changed.

Crash safety. A store is built under `<name>.h5.partial` with every chunk allocated (HDF5 early
allocation) and renamed into place only once complete, so later writes change raw data only, never the
file structure. Each batch writes its features to the next free slots, flushes, records those slots,
flushes, then sets its `written` flags and flushes again: a process killed at any point leaves a file
whose flagged rows are final, and extraction resumes with the unflagged ones (a half-written batch's
slots are simply reused). Flushing hands the data to the operating system: this protects against a
killed process, not against a power cut.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import h5py
import numpy as np

import probing
from probing.data.records import WordInContext
from probing.errors import ConfigError, ProbingError, StoreMismatchError

log = logging.getLogger(__name__)

STORE_FORMAT = 1
FEATURE_DTYPES = ("float16", "float32")
CHUNK_BYTES = 1 << 20
SHAPE_KEYS = ("num_layers", "num_rows", "hidden_size", "dtype")
NOT_COMPARED = frozenset({"model_path", "code_version", "created"})
MISSING = "<missing>"
DELETE_FIX = "delete the file (it is rebuilt on the next run) or point `paths.store_dir` elsewhere"


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
    """SHA-256 over (tokens, target, word, sclass) of every record, in order (sources are not included)."""
    digest = hashlib.sha256()
    for record in records:
        item = [list(record.tokens), list(record.target), record.word, record.sclass]
        digest.update(json.dumps(item, ensure_ascii=False).encode("utf-8") + b"\n")
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
    """`key: store has X, request has Y` for every compared key that differs or exists on one side only."""
    stored = {key: from_attr(value) for key, value in stored.items()}
    request = {key: to_attr(value) for key, value in request.items()}
    return [
        f"{key}: store has {stored.get(key, MISSING)!r}, request has {request.get(key, MISSING)!r}"
        for key in sorted((stored.keys() | request.keys()) - NOT_COMPARED)
        if stored.get(key, MISSING) != request.get(key, MISSING)
    ]


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


def open_store_file(path: Path, mode: str) -> h5py.File:
    """Open an existing store ("r" or "r+"), turning an unreadable file into a clear error.

    Writers disable the chunk cache so that a batch's scattered rows go straight to their place in the
    file instead of each row reading and rewriting a whole cached chunk.
    """
    try:
        return h5py.File(path, mode, rdcc_nbytes=0 if mode == "r+" else 4 * CHUNK_BYTES)
    except OSError as error:
        raise StoreMismatchError(
            f"{path}: cannot be opened as a feature store ({error}). "
            f"Fix: if another run is using it, wait for that run; otherwise {DELETE_FIX}") from error


class FeatureStore:
    """Read access to a store file, opened read-only on first use.

    Readers see the kept rows only (skipped rows are left out by every accessor), and features come back
    as float32 whatever the storage dtype.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: h5py.File | None = None

    @classmethod
    def create(cls, path: str | Path, metadata: Mapping, records: Sequence[WordInContext],
               class_names: Sequence[str]) -> FeatureStore:
        """Write a new store for `records` with no row written yet; `metadata` must hold the SHAPE_KEYS."""
        create_store_file(Path(path), metadata, records, class_names)
        return cls(path)

    @property
    def file(self) -> h5py.File:
        if self._file is None:
            self._file = open_store_file(self.path, "r")
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

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
        return int(self.file["skipped"][()].sum())

    @property
    def is_complete(self) -> bool:
        return bool(self.file["written"][()].all())

    @property
    def class_names(self) -> list[str]:
        return [name.decode("utf-8") for name in self.file["class_names"][()]]

    @property
    def words(self) -> list[str]:
        return [word.decode("utf-8") for word in self.file["words"][()]]

    @property
    def combinations(self) -> list[tuple[str, str]]:
        """(word, s-class) of each combination id."""
        words, classes = self.words, self.class_names
        return [(words[word_id], classes[label]) for word_id, label in self.file["combinations"][()]]

    def labels(self) -> np.ndarray:
        return self.file["labels"][()][self._kept]

    def word_ids(self) -> np.ndarray:
        return self.file["word_ids"][()][self._kept]

    def combination_ids(self) -> np.ndarray:
        return self.file["combination_ids"][()][self._kept]

    def row_ids(self) -> np.ndarray:
        """The record index (position in the split) of each kept row."""
        return np.flatnonzero(self._kept)

    def read_layer(self, layer: int, dtype: str | None = "float32") -> np.ndarray:
        """Features of one layer, (num_rows, hidden_size), in record order; refuses an unfinished store.

        `dtype=None` keeps the storage dtype (half the memory for a float16 store)."""
        if not 0 <= layer < self.num_layers:
            raise ProbingError(
                f"{self.path}: layer {layer} does not exist. Fix: choose a layer in 0..{self.num_layers - 1}")
        self._check_complete()
        slots = self.file["slots"][()][self._kept]
        features = self.file["features"][layer][slots]
        return features if dtype is None else features.astype(dtype, copy=False)

    def read_all_layers(self, dtype: str | None = "float32") -> np.ndarray:
        """Features of every layer, (num_rows, num_layers, hidden_size), in record order (for the scalar mix)."""
        out = np.empty((self.num_rows, self.num_layers, self.hidden_size), dtype or self.file["features"].dtype)
        for layer in range(self.num_layers):
            out[:, layer] = self.read_layer(layer, dtype)
        return out

    def _check_complete(self) -> None:
        if not self.is_complete:
            raise ProbingError(
                f"{self.path}: extraction is unfinished. Fix: run the extraction again; it resumes where it stopped")

    @property
    def _kept(self) -> np.ndarray:
        return self.file["skipped"][()] == 0


def create_store_file(path: Path, metadata: Mapping, records: Sequence[WordInContext],
                      class_names: Sequence[str]) -> None:
    """Build the whole file under `<name>.h5.partial`, then rename it to `path` (atomic on one file system)."""
    missing = [key for key in SHAPE_KEYS if key not in metadata]
    if missing or metadata["num_rows"] != len(records):
        raise ValueError(f"store metadata needs {SHAPE_KEYS} with num_rows = {len(records)}; "
                         f"got {({key: metadata.get(key) for key in SHAPE_KEYS})}")
    if metadata["dtype"] not in FEATURE_DTYPES:
        raise ConfigError(
            f"features.dtype={metadata['dtype']!r} is not supported. Fix: features.dtype=float16 or float32")
    labels, word_ids, words, combination_ids, combinations = encode_labels(records, class_names)
    attrs = {"store_format": STORE_FORMAT, **metadata, "code_version": code_version(),
             "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    partial = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(partial, "w") as handle:
        handle.attrs.update({key: to_attr(value) for key, value in attrs.items()})
        _create_features(handle, metadata["num_layers"], len(records), metadata["hidden_size"], metadata["dtype"])
        strings = h5py.string_dtype("utf-8")
        handle.create_dataset("class_names", data=list(class_names), dtype=strings)
        handle.create_dataset("words", data=words, dtype=strings)
        handle.create_dataset("labels", data=labels)
        handle.create_dataset("word_ids", data=word_ids)
        handle.create_dataset("combination_ids", data=combination_ids)
        handle.create_dataset("combinations", data=combinations)
        handle.create_dataset("slots", data=np.full(len(records), -1, np.int64))
        handle.create_dataset("written", data=np.zeros(len(records), np.uint8))
        handle.create_dataset("skipped", data=np.zeros(len(records), np.uint8))
    os.replace(partial, path)


def _create_features(handle: h5py.File, num_layers: int, num_rows: int, hidden_size: int, dtype: str) -> None:
    """The features dataset with every chunk allocated now; no zero fill, as unwritten rows are never read."""
    rows_per_chunk = max(1, min(num_rows, CHUNK_BYTES // (hidden_size * np.dtype(dtype).itemsize)))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    handle.create_dataset("features", shape=(num_layers, num_rows, hidden_size), dtype=dtype,
                          chunks=(1, rows_per_chunk, hidden_size), dcpl=dcpl, fill_time="never")


def encode_labels(records: Sequence[WordInContext], class_names: Sequence[str]):
    """Integer labels, word ids, words, combination ids and combinations (ids in order of first occurrence)."""
    class_index = {name: i for i, name in enumerate(class_names)}
    unknown = sorted({record.sclass for record in records} - class_index.keys())
    if unknown:
        raise ProbingError(f"s-classes {unknown} are not in the class list {list(class_names)}. "
                           "Fix: build the class list from every split of the data set")
    word_index: dict[str, int] = {}
    combination_index: dict[tuple[int, int], int] = {}
    labels, word_ids, combination_ids = [], [], []
    for record in records:
        label = class_index[record.sclass]
        word_id = word_index.setdefault(record.word, len(word_index))
        labels.append(label)
        word_ids.append(word_id)
        combination_ids.append(combination_index.setdefault((word_id, label), len(combination_index)))
    return (np.asarray(labels, np.int32), np.asarray(word_ids, np.int32), list(word_index),
            np.asarray(combination_ids, np.int32), np.asarray(list(combination_index), np.int32).reshape(-1, 2))


class StoreWriter:
    """Writes rows into an existing store with the crash-safe protocol: features, slots, flags, each flushed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.file = open_store_file(self.path, "r+")
        self._written = self.file["written"][()] == 1  # kept in step with the file by _mark_written
        committed = self._written & (self.file["skipped"][()] == 0)
        self._next_slot = int(self.file["slots"][()][committed].max(initial=-1)) + 1

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_metadata(self, request: Mapping) -> None:
        check_metadata(self.file.attrs, request, self.path)

    def pending_rows(self) -> np.ndarray:
        """Rows whose `written` flag is not set, ascending."""
        return np.flatnonzero(~self._written)

    def write_rows(self, rows: Sequence[int], features: np.ndarray) -> None:
        """Store `features` (len(rows), num_layers, D) of the unwritten rows `rows` in the next free slots."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(np.unique(rows)) != len(rows) or self._written[rows].any():
            raise ValueError(f"{self.path}: rows to write must be distinct and not yet written")
        first, dataset = self._next_slot, self.file["features"]
        dataset[:, first:first + len(rows), :] = np.asarray(features, dtype=dataset.dtype).transpose(1, 0, 2)
        self.file.flush()
        order = np.argsort(rows)
        self._set_values("slots", rows[order], np.arange(first, first + len(rows))[order])
        self._mark_written(rows[order])
        self._next_slot = first + len(rows)

    def mark_skipped(self, rows: Sequence[int]) -> None:
        """Flag rows the encoder could not represent: `skipped` first, then `written`."""
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        self._set_values("skipped", rows, 1)
        self._mark_written(rows)

    def _set_values(self, name: str, sorted_rows: np.ndarray, values) -> None:
        if len(sorted_rows):
            self.file[name][sorted_rows] = values
            self.file.flush()

    def _mark_written(self, sorted_rows: np.ndarray) -> None:
        self._set_values("written", sorted_rows, 1)
        self._written[sorted_rows] = True
