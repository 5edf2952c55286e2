"""Word vectors in the ELMo HDF5 layout: imported into a feature store, and exported from an every-word store.

The layout is the one `allennlp elmo` writes (allennlp/commands/elmo.py, `ElmoEmbedder.embed_file`, default
options, i.e. without `--use-sentence-keys` or `--forget-sentences`), which NeuroX and structural-probes read:

    "0", "1", ...        one float32 dataset per sentence, named by its index (the line number of the input file), of
                         shape (layers, words, dim) with `--all`; `--top` and `--average` write (words, dim), read
                         here as one layer
    sentence_to_index    a variable-length string dataset of shape (1,) (h5py.special_dtype(vlen=str)) whose one
                         element is a JSON object: sentence (the stripped input line) -> its index as a string

Matching a sentence. allennlp splits each line on whitespace, so a record's sentence is looked up as its words joined
by single spaces, and the file's keys are normalised the same way (runs of spaces or tabs become one space). Where a
file holds the same sentence twice, sentence_to_index keeps the last index (a JSON object has one value per key, as
allennlp writes it), so every record of that sentence reads the last copy.

Import (`ElmoFileFeaturizer`): a featurizer whose records are word-in-context records with the whole sentence as
context; a record's vector at each layer is its word's row, or for a multiword target the mean of its words' rows
(accumulated in float64, then float32; a one-word target is copied exactly). A sentence missing from the file, or
one whose dataset has another number of words, is refused (StoreMismatchError: the file's features do not match the
data), never skipped. Its store metadata holds the file's SHA-256 as `weights_sha256` (what results.json records as
the features' identity) and its layer count and width, so a store built from another file is refused by the store's
own metadata check. That hash covers only the file's own bytes, so every member read (the sentence datasets and
sentence_to_index) must hold its data in the file: an external or soft link, a virtual dataset or a dataset stored in
external files is refused, naming it (`new[name] = old[name][()]`, or h5py's `copy` with expand_external and
expand_soft, copies the data in).

Export (`export_every_word_stores`): every-word stores (one row per word of every sentence, in sentence order, see
`probing.features.sentence_store`) written in this layout, one block of a store in memory at a time, as one unit:
an export folder never mixes the files of two exports unnoticed. Its layout:

    <name>.hdf5          one per store (`extract.py export_elmo=DIR` names them by split: train, dev, test), in the
                         layout above, with two root attributes that allennlp's readers ignore: `written_by`
                         ("probing export_elmo", the mark that this tool wrote the file) and `export_id` (a random
                         id shared by the files of one export)
    export.json          the manifest: written_by, export_id, `files` (each file's name -> its SHA-256) and `source`
                         (each file's name -> the store it came from: its path, model_name, weights_sha256,
                         random_init and init_seed where set, records_sha256)

Each file is first written whole to `<file>.partial`; only when every file is written is the manifest removed, the
files moved into place and the manifest written (atomically) last. An export stopped while writing leaves the earlier
export whole; one stopped while moving leaves a folder without a manifest. The import refuses a file that carries the
mark unless the manifest beside it lists it with its SHA-256, and a folder holding such a file unless its `.hdf5`
files are exactly those the manifest lists; files without the mark (allennlp's) need no manifest. Before any store
is read, an export refuses a folder it cannot create or write, a target (`<name>.hdf5`, the manifest) that this tool
did not write (the user's own file: never overwritten), and any other `.hdf5` file in the folder (the import reads
every one); the files of an earlier export are replaced. A store with skipped rows (words its featurizer could not
represent) is refused rather than exported with invented vectors: the layout has no way to mark a missing word.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from probing.data.files import write_json_atomically
from probing.data.records import SkipCounter, WordInContext
from probing.data.text import sha256_file, sha256_files
from probing.errors import ConfigError, DataFormatError, ProbingError, StoreMismatchError
from probing.features.encoder import EncoderInfo
from probing.features.featurizer import WHOLE_SENTENCE, PreparedInput
from probing.features.store import FeatureStore, disk_full_is_user_error, one_line

SENTENCE_TO_INDEX = "sentence_to_index"
ELMO_HDF5 = "elmo-hdf5"
SHOWN_CHARS = 80
# An exported file's root attributes, and the manifest beside the files of one export (see the module docstring).
WRITTEN_BY, EXPORT_ID = "written_by", "export_id"
EXPORT_MARK = "probing export_elmo"
MANIFEST = "export.json"
# The store metadata that a manifest records of each file's source: which model (and random init) and which records.
SOURCE_KEYS = ("model_name", "weights_sha256", "random_init", "init_seed", "records_sha256")
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


class ElmoFileFeaturizer:
    """A `Featurizer` that reads the vectors of an ELMo-layout HDF5 file instead of computing them.

    Records: word-in-context records whose `tokens` is a sentence of the file and `target` the word's position(s)
    (e.g. the records of an every-word store). `prepare_many` gives each the input [sentence index, *positions] with
    the positions as its target pieces, refusing a sentence the file lacks or holds with another number of words;
    `encode` reads each sentence's dataset once per batch. The file is opened on first use; `close()` (or `with`)
    closes it.

    `path` is one file, or a folder whose `*.hdf5` files (e.g. train.hdf5, dev.hdf5, test.hdf5, as `extract.py
    export_elmo=` writes them and structural-probes reads them) are read as one: a sentence held by several files is
    read from the first in name order. Files this tool exported are read only as the whole export their manifest
    lists (`check_export`). `info` (an EncoderInfo: layers, dim, the files' hash) lets the representations
    that take an encoder (`EncoderLayer`, `LayerMix`) take this file instead; `name` (default: the file's or
    folder's stem) names its stores (`imported-<name>`)."""

    def __init__(self, path: str | Path, name: str | None = None):
        self.path = Path(path).expanduser()
        self.files = sorted(self.path.glob("*.hdf5")) if self.path.is_dir() else [self.path]
        if not self.files or not all(file.is_file() for file in self.files):
            raise ConfigError(f"{path}: no such file of imported word vectors. Fix: point the path at an HDF5 file in "
                              "the ELMo layout (as `allennlp elmo --all` writes it), or a folder of such .hdf5 files")
        self.name = name or self.path.stem
        self.skips = SkipCounter()
        self.context_size: int | None = None  # the file's vectors saw whole sentences
        file_hashes = [sha256_file(file) for file in self.files]
        self.sha256 = file_hashes[0] if len(self.files) == 1 else \
            hashlib.sha256(" ".join(file_hashes).encode("ascii")).hexdigest()
        self._handles: dict[int, h5py.File] = {}
        # every sentence of every file: its key -> a global id; the id's (file number, dataset name) and length
        self.sentence_to_index: dict[str, int] = {}
        self.locations: list[tuple[int, str]] = []
        self.lengths: list[int] = []
        shapes, export_ids = set(), {}
        for number, file in enumerate(self.files):
            with open_elmo_file(file) as handle:
                export_ids[file.name] = export_id_of(handle)
                mapping = read_sentence_to_index(handle, file)
                lengths, layers, dim = sentence_datasets(handle, file)
            absent = [index for index in mapping.values() if index not in lengths]
            if absent:
                raise DataFormatError(file, None, f"`{SENTENCE_TO_INDEX}` names dataset {absent[0]!r}, which the file "
                                                  f"lacks ({len(absent)} such)", INDEX_FIX)
            shapes.add((layers, dim))
            for key, index in mapping.items():
                if key not in self.sentence_to_index:
                    self.sentence_to_index[key] = len(self.locations)
                    self.locations.append((number, index))
                    self.lengths.append(lengths[index])
        if len(shapes) > 1:
            raise DataFormatError(self.path, None, f"its files hold vectors of different layers and dims "
                                                   f"{sorted(shapes)}", "put only the files of one model in the folder")
        check_export(self.path, dict(zip((file.name for file in self.files), file_hashes)), export_ids)
        self.num_layers, self.hidden_size = shapes.pop()
        self.info = EncoderInfo(model_name=self.name, model_path=str(self.path), weights_sha256=self.sha256,
                                tokenizer_class="", tokenizer_sha256="", architecture=ELMO_HDF5,
                                num_layers=self.num_layers, hidden_size=self.hidden_size)

    @property
    def store_name(self) -> str:
        return f"imported-{self.name}"

    @property
    def store_kind(self) -> str:
        return ELMO_HDF5

    def store_metadata(self) -> dict[str, Any]:
        """The file's identity (its SHA-256; its name and path are not compared, so a moved copy still matches)."""
        return {"model_name": self.name, "model_path": str(self.path), "weights_sha256": self.sha256,
                "architecture": ELMO_HDF5, "pooling": "mean", "context_size": WHOLE_SENTENCE,
                "num_layers": self.num_layers, "hidden_size": self.hidden_size}

    def handle(self, number: int) -> h5py.File:
        """File `number`, opened on first use."""
        if number not in self._handles:
            self._handles[number] = open_elmo_file(self.files[number])
        return self._handles[number]

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles = {}

    def __enter__(self) -> ElmoFileFeaturizer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handles": {}}  # an open h5py file does not pickle; it is reopened on use

    def prepare_many(self, records: Sequence[WordInContext]) -> list[PreparedInput | None]:
        """[sentence index, *positions] per record (target pieces: the positions); every record is represented."""
        prepared, last_tokens, index = [], None, -1
        for record in records:
            if record.tokens is not last_tokens:
                last_tokens, index = record.tokens, self.sentence_index(record)
            prepared.append(PreparedInput([index, *record.target], list(record.target)))
        return prepared

    def sentence_index(self, record: WordInContext) -> int:
        """The global id of the record's sentence (`locations`); a sentence the files lack, or hold with another
        number of words, is refused."""
        key = sentence_key(record.tokens)
        where = f" ({record.source})" if record.source else ""
        sentence = self.sentence_to_index.get(key)
        if sentence is None:
            raise StoreMismatchError(
                f"{self.path}: the sentence {shorten(key)!r}{where} is not in its {SENTENCE_TO_INDEX} "
                f"({len(self.sentence_to_index)} sentences). Fix: compute the file from this data's sentences (one per "
                f"line, words joined by single spaces, e.g. `allennlp elmo sentences.txt out.hdf5 --all`), or point "
                f"the path at the file made from them")
        if self.lengths[sentence] != len(record.tokens):
            number, name = self.locations[sentence]
            raise StoreMismatchError(
                f"{self.files[number]}: dataset {name!r} holds {self.lengths[sentence]} words, but its sentence "
                f"{shorten(key)!r}{where} has {len(record.tokens)}. Fix: compute the file with one vector per word of "
                f"the data's tokenisation (no subword or boundary rows)")
        return sentence

    def read_sentence(self, sentence: int) -> np.ndarray:
        """(layers, words, dim) float32 of one sentence (its global id); NaN or inf is refused, naming the dataset."""
        number, name = self.locations[sentence]
        values = np.asarray(self.handle(number)[name][()], dtype=np.float32)
        if values.ndim == 2:
            values = values[None]
        if not np.isfinite(values).all():
            raise DataFormatError(self.files[number], None, f"dataset {name!r} holds NaN or inf",
                                  "recompute that sentence's vectors")
        return values

    def encode(self, batch: Sequence[PreparedInput]) -> torch.Tensor:
        """(B, layers, dim) float32: each record's word (mean of its words' rows), each sentence read once."""
        out = np.empty((len(batch), self.num_layers, self.hidden_size), np.float32)
        by_sentence: dict[int, list[int]] = {}
        for row, prepared in enumerate(batch):
            by_sentence.setdefault(prepared.input_ids[0], []).append(row)
        for index, rows in by_sentence.items():
            values = self.read_sentence(index)
            for row in rows:
                positions = batch[row].target_pieces
                out[row] = values[:, positions[0]] if len(positions) == 1 else \
                    values[:, positions].mean(axis=1, dtype=np.float64)
        return torch.from_numpy(out)


def sentences_from_elmo_file(path: str | Path) -> list[tuple[str, ...]]:
    """The sentence of each index 0, 1, ... (the inverse of sentence_to_index, split on spaces). An index without a
    sentence (a repeated sentence keeps only its last index there) is refused, naming it."""
    path = Path(path)
    with open_elmo_file(path) as handle:
        by_index = {index: sentence for sentence, index in read_sentence_to_index(handle, path).items()}
        lengths, _, _ = sentence_datasets(handle, path)
    missing = [name for name in lengths if name not in by_index]
    if missing:
        raise DataFormatError(path, None, f"dataset {missing[0]!r} has no sentence in {SENTENCE_TO_INDEX} "
                                          f"({len(missing)} such; a sentence written twice keeps only its last index)",
                              "keep the file's input sentences beside it and read them from there")
    names = sorted(lengths, key=int)
    if names != [str(i) for i in range(len(names))]:
        raise DataFormatError(path, None, f"the sentence datasets are not numbered 0..{len(names) - 1}",
                              "name the datasets by the sentence indices 0, 1, ...")
    return [tuple(by_index[name].split(" ")) for name in names]


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
