"""The ELMo HDF5 layout that `allennlp elmo` writes (allennlp/commands/elmo.py, `ElmoEmbedder.embed_file`, default
options), which NeuroX and structural-probes read, and the manifest of an export of this tool (docs/word_tasks.md,
Features computed elsewhere):

See docs/word_tasks.md, 'Features computed elsewhere'.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from probing.errors import DataFormatError, StoreMismatchError
from probing.features.store import one_line

SENTENCE_TO_INDEX = "sentence_to_index"
SHOWN_CHARS = 80
# An exported file's root attributes, and the manifest beside the files of one export (docs/word_tasks.md).
WRITTEN_BY, EXPORT_ID = "written_by", "export_id"
EXPORT_MARK = "probing export_elmo"
MANIFEST = "export.json"
IN_FILE_FIX = ("copy the data into the file (with h5py, into a new file: new[name] = old[name][()] for each dataset, "
               "or old.copy(name, new, expand_external=True, expand_soft=True) for a link), so that its hash covers it")
INDEX_FIX = (f"add a `{SENTENCE_TO_INDEX}` dataset: shape (1,), dtype h5py.string_dtype(), holding the JSON object "
             "{sentence: index} where sentence is the words of dataset <index> joined by single spaces (allennlp "
             "elmo writes it unless run with --forget-sentences or --use-sentence-keys)")


def sentence_key(words: Iterable[str]) -> str:
    """How a sentence is named in sentence_to_index: its words joined by single spaces."""
    return " ".join(words)


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def open_elmo_file(path: Path) -> h5py.File:
    """The file, read-only (h5py's default file locking, so that other readers in this process may open it too); a
    file that is not HDF5 is a DataFormatError."""
    try:
        return h5py.File(path, "r")
    except OSError as error:
        fix = "point the path at the .hdf5 file written by `allennlp elmo` (or in its layout)"
        raise DataFormatError(path, None, f"cannot be read as an HDF5 file ({one_line(error)})", fix) from error


def member_in_file(handle: h5py.File, name: str, path: Path) -> h5py.Dataset | h5py.Group | None:
    """The member `name` of the file (None if there is none), refused where its data lie outside the file's bytes,
    which the file's hash covers: an external or soft link (dangling or not), a virtual dataset, external storage."""
    link = handle.get(name, getlink=True)
    if link is None:
        return None
    if isinstance(link, h5py.ExternalLink):
        raise DataFormatError(path, None, f"dataset {name!r} is an external link (to {link.filename}:{link.path}), "
                                          "whose data the file's SHA-256 does not cover", IN_FILE_FIX)
    if isinstance(link, h5py.SoftLink):
        raise DataFormatError(path, None, f"dataset {name!r} is a soft link (to {link.path}), which the file's "
                                          "SHA-256 does not pin to one dataset", IN_FILE_FIX)
    member = handle[name]
    if isinstance(member, h5py.Dataset) and (member.is_virtual or member.external):
        kind = "a virtual dataset" if member.is_virtual else "stored in external files"
        raise DataFormatError(path, None, f"dataset {name!r} is {kind}, whose data the file's SHA-256 does not cover",
                              IN_FILE_FIX)
    return member


def export_id_of(handle: h5py.File) -> str | None:
    """The export id of a file this tool exported (its mark), None for any other file (e.g. allennlp's)."""
    if as_text(handle.attrs.get(WRITTEN_BY)) != EXPORT_MARK:
        return None
    return as_text(handle.attrs.get(EXPORT_ID)) or ""


def as_text(value: Any) -> str | None:
    """An HDF5 string attribute as str (h5py gives str or bytes); None for anything else."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value) if isinstance(value, str) else None


def read_sentence_to_index(handle: h5py.File, path: Path) -> dict[str, str]:
    """The file's sentence_to_index, keys normalised (words joined by single spaces), values dataset names."""
    dataset = member_in_file(handle, SENTENCE_TO_INDEX, path)
    if not isinstance(dataset, h5py.Dataset):
        raise DataFormatError(path, None, f"the file has no `{SENTENCE_TO_INDEX}` dataset, so its sentences cannot be "
                                          "matched to the data", INDEX_FIX)
    value = dataset[()]
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0] if value.size == 1 else None
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    try:
        mapping = json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        mapping = None
    if not isinstance(mapping, dict):
        raise DataFormatError(path, None, f"`{SENTENCE_TO_INDEX}` does not hold one JSON object", INDEX_FIX)
    return {sentence_key(str(sentence).split()): str(index) for sentence, index in mapping.items()}


def sentence_datasets(handle: h5py.File, path: Path) -> tuple[dict[str, int], int, int]:
    """The sentence datasets (named by an index): each one's number of words, and the layers and width they all
    share; a dataset of another shape or layer count is refused, naming it."""
    lengths: dict[str, int] = {}
    shape_of_first: tuple[str, int, int] | None = None
    for name in sorted((name for name in handle if name.isdigit()), key=int):
        dataset = member_in_file(handle, name, path)
        if not isinstance(dataset, h5py.Dataset) or dataset.ndim not in (2, 3) or dataset.dtype.kind != "f":
            raise DataFormatError(path, None, f"dataset {name!r} is not a float array of shape (layers, words, dim) or "
                                              f"(words, dim)", "write one such dataset per sentence")
        layers, words, dim = dataset.shape if dataset.ndim == 3 else (1, *dataset.shape)
        if shape_of_first is None:
            shape_of_first = (name, layers, dim)
        elif (layers, dim) != shape_of_first[1:]:
            first, first_layers, first_dim = shape_of_first
            raise DataFormatError(
                path, None, f"dataset {name!r} has {layers} layers of dim {dim}, but dataset {first!r} has "
                            f"{first_layers} of dim {first_dim}", "write every sentence with the same layers and dim")
        lengths[name] = words
    if shape_of_first is None:
        raise DataFormatError(path, None, "the file has no sentence dataset (named \"0\", \"1\", ...)",
                              "write one dataset (layers, words, dim) per sentence, named by its index")
    return lengths, shape_of_first[1], shape_of_first[2]


def load_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of an export at `path`; None where there is none or the file is not one this tool wrote
    (damaged, or another program's)."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    ours = isinstance(manifest, dict) and manifest.get(WRITTEN_BY) == EXPORT_MARK and \
        isinstance(manifest.get("files"), dict)
    return manifest if ours else None


def check_export(path: Path, hashes: Mapping[str, str], export_ids: Mapping[str, str | None]) -> None:
    """Refuse exported files (those carrying the export mark; `hashes` and `export_ids` by file name) that the
    manifest beside them does not vouch for: none there (the export was stopped while moving its files into place),
    a file it does not list or lists with another SHA-256 (a file of another export, or changed since), and where
    `path` is a folder, a listed file missing or an unlisted one beside them. Files without the mark pass."""
    exported = {name: export_id for name, export_id in export_ids.items() if export_id is not None}
    if not exported:
        return
    folder = path if path.is_dir() else path.parent
    manifest = load_manifest(folder / MANIFEST)
    if manifest is None:
        state = "is missing" if not (folder / MANIFEST).exists() else "is not the manifest of an export (damaged)"
        mixed = mixed_exports(exported, None)
        subject = f"{mixed}, or the export was interrupted" if mixed else \
            f"the export of {'/'.join(sorted(exported))} was interrupted"
        raise StoreMismatchError(f"{path}: {subject} ({MANIFEST}, which an export writes last, {state}). "
                                 f"Fix: {reexport_fix(folder)}")
    listed = manifest["files"]
    unlisted = sorted(set(hashes) - set(listed))
    problems = [f"{MANIFEST} does not list {'/'.join(unlisted)}"] if unlisted else []
    changed = sorted(name for name, digest in hashes.items() if name in listed and listed[name] != digest)
    if changed:
        problems.append(f"the SHA-256 of {'/'.join(changed)} is not the one {MANIFEST} records")
    missing = sorted(set(listed) - set(hashes)) if path.is_dir() else []
    if missing:
        problems.append(f"{'/'.join(missing)}, listed in {MANIFEST}, {'is' if len(missing) == 1 else 'are'} missing")
    if problems:
        mixed = mixed_exports(exported, manifest.get(EXPORT_ID))
        subject = f"{mixed} ({'; '.join(problems)})" if mixed else "; ".join(problems)
        raise StoreMismatchError(f"{path}: {subject}; these are not the files of one export as it wrote them. "
                                 f"Fix: {reexport_fix(folder)}")


def reexport_fix(folder: Path) -> str:
    return (f"run the export again (extract.py export_elmo={folder} with the settings it was made with), which "
            "replaces every file of the export")


def mixed_exports(export_ids: Mapping[str, str], reference: str | None) -> str:
    """'train.hdf5 is from another export than dev.hdf5/test.hdf5' where the files' export ids differ (the others
    named against those of the `reference` export, else against the largest group); '' where they agree."""
    groups: dict[str, list[str]] = {}
    for name, export_id in sorted(export_ids.items()):
        groups.setdefault(export_id, []).append(name)
    if len(groups) < 2:
        return ""
    main = reference if reference in groups else max(groups, key=lambda export_id: len(groups[export_id]))
    others = [name for export_id, names in groups.items() if export_id != main for name in names]
    verb = "is" if len(others) == 1 else "are"
    return f"{'/'.join(others)} {verb} from another export than {'/'.join(groups[main])}"
