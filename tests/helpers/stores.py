"""A toy split of ten records and the store metadata and features of it, for store and datamodule tests, and
checks shared by the store and extraction tests (one-line errors, untouched files, h5py open modes, the store lock),
a file cut short, and a store's tables handled in pieces of a few rows."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from probing.data.records import WordInContext
from probing.features.store import FeatureStore, StoreWriter

LAYERS, DIM = 3, 4
CLASSES = ["food", "organization", "plant"]
WORDS_AND_CLASSES = [
    ("apple", "food"), ("apple", "organization"), ("pine", "plant"), ("apple", "food"), ("juice", "food"),
    ("pine", "plant"), ("apple", "organization"), ("oak", "plant"), ("juice", "food"), ("oak", "plant"),
]


def make_records() -> list[WordInContext]:
    return [WordInContext(tokens=("the", word, "."), target=(1,), word=word, sclass=sclass, source=f"toy:{i + 1}")
            for i, (word, sclass) in enumerate(WORDS_AND_CLASSES)]


def metadata(num_rows: int, **overrides) -> dict:
    base = {"model_name": "tiny", "model_path": "/models/tiny", "weights_sha256": "w" * 64, "pooling": "mean",
            "context_size": "all", "max_length": 128, "dtype": "float16", "num_layers": LAYERS,
            "hidden_size": DIM, "num_rows": num_rows, "data_files": {"train.txt": "d" * 64}}
    return {**base, **overrides}


def features_of(rows) -> np.ndarray:
    """Row r, layer l, dim d -> r + l / 4 + d / 16 (exact in float16)."""
    rows = np.asarray(rows, dtype=np.float32)[:, None, None]
    return (rows + np.arange(LAYERS)[None, :, None] / 4 + np.arange(DIM)[None, None, :] / 16).astype(np.float32)


def write_complete_store(path: Path, batches=((7, 2, 9, 0), (5, 8, 1, 3, 6, 4)), **overrides) -> Path:
    """A store of the toy split with every row written by `batches` (one contiguous block each)."""
    records = make_records()
    FeatureStore.create(path, metadata(len(records), **overrides), records, CLASSES)
    with StoreWriter(path) as writer:
        for batch in batches:
            writer.write_rows(list(batch), features_of(batch))
    return path


def as_format_3(path: Path) -> None:
    """Make a store look like one of format 3 (block hashes of the features only, no sealed tables, no staging)."""
    with h5py.File(path, "r+") as handle:
        handle.attrs["store_format"] = 3
        for name in ("table_xxh3", "staged_batches", "staged_xxh3"):
            del handle[name]


def assert_one_line_error(error: Exception | str, *parts: str) -> None:
    """A user error as the entry scripts print it: one line with a fix, holding each of `parts`."""
    message = str(error)
    assert "\n" not in message and "Fix: " in message, message
    for part in parts:
        assert part in message, (part, message)


def cut_short(path: Path) -> None:
    """Keep the first half of a file, as a copy or download stopped half-way leaves it."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def file_state(path: Path) -> tuple[bytes, int]:
    """The bytes and modification time of a file, to show it was left untouched."""
    return path.read_bytes(), path.stat().st_mtime_ns


def record_h5py_modes(monkeypatch) -> list[str]:
    """Record the mode of every h5py.File opened from now on (the test's monkeypatch undoes it)."""
    modes, original = [], h5py.File

    def opening(name, mode="r", *args, **kwargs):
        modes.append(mode)
        return original(name, mode, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", opening)
    return modes


@contextmanager
def hold_store_lock(path: Path, pid: int) -> Iterator[None]:
    """Hold `<store>.lock` as a running extraction does (exclusive flock, its pid inside)."""
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{pid}\n".encode())
        yield
    finally:
        os.close(fd)


def store_tables(path: Path) -> dict:
    """Every dataset and attribute of a store file but its creation time."""
    with h5py.File(path) as file:
        tables = {name: file[name][()] for name in file}
        attrs = {key: value for key, value in file.attrs.items() if key != "created"}
    return {**tables, **{f"attr:{key}": value for key, value in attrs.items()}}


def assert_same_store(path: Path, expected: Path) -> None:
    """The two store files hold the same tables and attributes, value for value and dtype for dtype."""
    actual, wanted = store_tables(path), store_tables(expected)
    assert actual.keys() == wanted.keys()
    for name, value in wanted.items():
        if isinstance(value, np.ndarray):
            assert value.dtype == actual[name].dtype and np.array_equal(actual[name], value), name
        else:
            assert actual[name] == value, name


def stop_after_the_first_exported_move(monkeypatch) -> list[str]:
    """Make `os.replace` raise KeyboardInterrupt when a second `.hdf5` file is about to be moved into place (an export
    stopped right after moving its first file); returns the names of the files moved (other renames, e.g. of stores,
    go through). `monkeypatch.undo()` ends it."""
    replace, moved = os.replace, []

    def stopping(source, target):
        if Path(target).suffix == ".hdf5":
            if moved:
                raise KeyboardInterrupt
            moved.append(Path(target).name)
        replace(source, target)

    monkeypatch.setattr(os, "replace", stopping)
    return moved


def small_table_pieces(monkeypatch, rows: int) -> None:
    """Make writers handle a store's tables `rows` rows at a time (TABLE_ROWS, and TABLE_BYTES for 8-byte rows), as
    they do a store of more than TABLE_ROWS rows; the test's monkeypatch undoes it."""
    from probing.features.store import pieces

    monkeypatch.setattr(pieces, "TABLE_BYTES", rows * 8)
    for name, module in list(sys.modules.items()):
        if name.startswith("probing.features.store") and hasattr(module, "TABLE_ROWS"):
            monkeypatch.setattr(module, "TABLE_ROWS", rows)
