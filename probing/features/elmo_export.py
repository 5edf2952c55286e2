"""Every-word stores exported in the ELMo HDF5 layout (`probing.features.elmo_layout`), one block of a store in
memory at a time and as one unit: each file written whole to `<file>.partial`, then moved into place, the manifest
written last (docs/word_tasks.md, Features computed elsewhere). A target this tool did not write is never overwritten,
and a store with skipped rows is refused (the layout has no way to mark a missing word)."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from probing.data.files import write_json_atomically
from probing.data.text import sha256_files
from probing.errors import ConfigError, ProbingError, StoreMismatchError
from probing.features.elmo_layout import (
    EXPORT_ID,
    EXPORT_MARK,
    MANIFEST,
    SENTENCE_TO_INDEX,
    WRITTEN_BY,
    export_id_of,
    load_manifest,
    sentence_key,
    shorten,
)
from probing.features.store import FeatureStore, disk_full_is_user_error, one_line

# The store metadata that a manifest records of each file's source: which model (and random init) and which records.
SOURCE_KEYS = ("model_name", "weights_sha256", "random_init", "init_seed", "records_sha256")


def check_sentences(sentences: Sequence[tuple[str, ...]]) -> None:
    """Refuse what the layout cannot name: an empty sentence, or a word that is empty or holds whitespace."""
    for index, words in enumerate(sentences):
        if not words:
            raise ProbingError(f"sentence {index} has no words; the ELMo layout has no empty sentences. Fix: leave "
                               "empty sentences out of the data")
        bad = next((word for word in words if not word or word != "".join(word.split())), None)
        if bad is not None:
            raise ProbingError(f"sentence {index} ({shorten(sentence_key(words))!r}) has the word {bad!r}, which is "
                               "empty or holds whitespace, so sentence_to_index could not name it. Fix: split or "
                               "drop such words in the data")


def check_export_folder(folder: Path, names: Sequence[str], where: str | None = None) -> None:
    """Refuse, before any store is read, an export of `<folder>/<name>.hdf5` per name that could not be written or
    would destroy what this tool did not write: a folder that cannot be created or written (ConfigError naming
    `where`, default the folder), a target (`<name>.hdf5`, the manifest) that this tool did not write (no export mark,
    or not readable as ours), or another `.hdf5` file in the folder, which the import of the folder would read too.
    The files of an earlier export pass: the export replaces them."""
    where = where or str(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".write-check.")
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        problem = f"the folder cannot be created or written to ({one_line(error)})"
        raise ConfigError(f"{where}: {problem}. Fix: make it writable, or export into another folder (one you can "
                          "write to, not a file nor below one)") from error
    targets = [folder / f"{name}.hdf5" for name in names]
    for target in targets:
        if target.exists() and not is_exported_file(target):
            raise ConfigError(f"{target}: the export would replace this file, which an export of this tool did not "
                              "write (it has no export mark). Fix: export into another folder, or move the file away")
    if (folder / MANIFEST).exists() and load_manifest(folder / MANIFEST) is None:
        raise ConfigError(f"{folder / MANIFEST}: the export would replace this file, which is not the manifest of an "
                          "export of this tool. Fix: export into another folder, or move the file away")
    others = sorted(file for file in folder.glob("*.hdf5") if file not in targets)
    if others:
        raise ConfigError(f"{others[0]}: the folder holds .hdf5 files that this export does not write ({len(others)} "
                          f"such), and `model=imported` reads every .hdf5 file of a folder as one. Fix: export into "
                          f"another folder (or export every split the folder holds), or move them away")


def is_exported_file(path: Path) -> bool:
    """Whether `path` is an HDF5 file carrying this tool's export mark (a file that cannot be read is not)."""
    try:
        with h5py.File(path, "r") as handle:
            return export_id_of(handle) is not None
    except OSError:
        return False


def export_every_word_stores(stores: Mapping[str, tuple[str | Path, Sequence[Sequence[str]]]],
                             folder: str | Path) -> dict[str, Path]:
    """Export each every-word store as `<folder>/<name>.hdf5` in the ELMo layout, as one export (see the module
    docstring): `stores` maps a name to (the store's path, the words of each of its sentences, in its order). Every
    file is written to `<file>.partial` first; only when all are written is the old manifest removed, the files
    moved into place and the new manifest written. Refused before writing: what `check_export_folder` refuses, and
    per store what `write_every_word_store` refuses."""
    folder = Path(folder)
    check_export_folder(folder, list(stores))
    export_id = uuid.uuid4().hex
    partials: dict[Path, Path] = {}
    sources: dict[str, dict[str, Any]] = {}
    try:
        for name, (store, sentences) in stores.items():
            target = folder / f"{name}.hdf5"
            partials[target] = target.with_name(target.name + ".partial")
            sources[target.name] = write_every_word_store(store, sentences, partials[target], export_id)
        hashes = {target.name: sha256_files([partial]) for target, partial in partials.items()}
        (folder / MANIFEST).unlink(missing_ok=True)  # from here until the new one is written, the import refuses
        for target, partial in partials.items():
            os.replace(partial, target)
        write_json_atomically(folder / MANIFEST, {WRITTEN_BY: EXPORT_MARK, EXPORT_ID: export_id, "files": hashes,
                                                  "source": sources})
    finally:
        for partial in partials.values():
            partial.unlink(missing_ok=True)
    return {name: folder / f"{name}.hdf5" for name in stores}


def write_every_word_store(store_path: str | Path, sentences: Sequence[Sequence[str]], out_path: Path,
                           export_id: str) -> dict[str, Any]:
    """Write the every-word store at `store_path` (rows: every word of sentence 0, then of sentence 1, ...) as an
    ELMo-layout file at `out_path`, marked as a file of export `export_id`: dataset str(i) = (layers, words of
    sentence i, dim) float32, and sentence_to_index. `sentences`: the words of each sentence, in the store's order.
    Refused: a store with skipped rows, one with another number of rows than the sentences have words, or whose rows
    name other words. Returns the store's identity for the manifest (its path and its SOURCE_KEYS metadata)."""
    store_path = Path(store_path)
    sentences = [tuple(words) for words in sentences]
    check_sentences(sentences)
    lengths = np.fromiter((len(words) for words in sentences), dtype=np.int64, count=len(sentences))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    with FeatureStore(store_path) as store:
        if store.num_skipped:
            first = int(store.skipped_row_ids()[0])
            raise ProbingError(
                f"{store_path}: {store.num_skipped} row(s) of the store are skipped (words its featurizer could not "
                f"represent, the first is row {first}), and the ELMo layout has no way to mark a missing word. Fix: "
                f"export a store without skipped rows (e.g. a larger max_length, or a model whose tokenizer covers "
                f"every word)")
        if store.num_rows != int(offsets[-1]):
            raise StoreMismatchError(
                f"{store_path}: the store has {store.num_rows} rows, but the {len(sentences)} sentences have "
                f"{int(offsets[-1])} words. Fix: pass the sentences of the store's split, in the store's order (every "
                f"word of each sentence, one row each)")
        check_rows_are_words(store, sentences, store_path)
        layers, dim = store.num_layers, store.hidden_size
        with disk_full_is_user_error(out_path), h5py.File(out_path, "w") as out:
            out.attrs[WRITTEN_BY], out.attrs[EXPORT_ID] = EXPORT_MARK, export_id
            for index, words in enumerate(sentences):
                out.create_dataset(str(index), shape=(layers, len(words), dim), dtype="float32")
            for rows, block in store.verified_blocks():
                write_block(out, offsets, rows, block, store_path)
            index_dataset = out.create_dataset(SENTENCE_TO_INDEX, (1,), dtype=h5py.string_dtype())
            index_dataset[0] = json.dumps({sentence_key(words): str(index) for index, words in enumerate(sentences)})
        metadata = store.metadata
    return {"store": str(store_path), **{key: as_json(metadata[key]) for key in SOURCE_KEYS if key in metadata}}


def as_json(value: Any) -> Any:
    """An HDF5 attribute value as JSON can hold it (h5py gives numpy scalars)."""
    return value.item() if isinstance(value, np.generic) else value


def check_rows_are_words(store: FeatureStore, sentences: Sequence[tuple[str, ...]], path: Path) -> None:
    """Refuse a store whose rows are not the sentences' words in order (compared lower-cased, as every-word records
    lower-case their word type)."""
    words, word_ids = store.words, store.word_ids()
    row = 0
    for index, tokens in enumerate(sentences):
        for position, token in enumerate(tokens):
            stored = words[word_ids[row]]
            if stored.lower() != token.lower():
                raise StoreMismatchError(
                    f"{path}: row {row} holds the word {stored!r}, but word {position} of sentence {index} "
                    f"({shorten(sentence_key(tokens))!r}) is {token!r}. Fix: pass the sentences of the store's split, "
                    f"in the store's order")
            row += 1


def write_block(out: h5py.File, offsets: np.ndarray, rows: np.ndarray, block: np.ndarray, store_path: Path) -> None:
    """Put one store block (its rows' record indices; features (layers, rows, dim)) into the sentence datasets."""
    block = block.astype(np.float32, copy=False)
    if not np.isfinite(block).all():
        raise ProbingError(f"{store_path}: the store holds NaN or inf features. Fix: delete it and extract it again")
    order = np.argsort(rows, kind="stable")
    rows, block = rows[order], block[:, order]
    sentence_of = np.searchsorted(offsets, rows, side="right") - 1
    starts = np.flatnonzero(np.r_[True, sentence_of[1:] != sentence_of[:-1]])
    for first, stop in zip(starts, np.r_[starts[1:], len(rows)]):
        sentence = int(sentence_of[first])
        positions = rows[first:stop] - offsets[sentence]
        if positions[-1] - positions[0] == stop - first - 1:  # consecutive words: one slice
            out[str(sentence)][:, int(positions[0]):int(positions[-1]) + 1, :] = block[:, first:stop]
        else:
            out[str(sentence)][:, positions, :] = block[:, first:stop]
