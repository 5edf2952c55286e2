"""Word vectors in the ELMo HDF5 layout (`probing.features.elmo_layout`) imported into a feature store: a featurizer
that reads a file's (or a folder's) vectors instead of computing them. A record's sentence is matched by its words
joined by single spaces; a sentence the file lacks, or holds with another number of words, is refused, never skipped.
A record's vector at each layer is its word's row, or for a multiword target the mean of its words' rows (in float64,
then float32; a one-word target is copied exactly). Exported from every-word stores by `probing.features.elmo_export`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from probing.data.records import SkipCounter, WordInContext
from probing.data.text import sha256_file
from probing.errors import ConfigError, DataFormatError, StoreMismatchError
from probing.features.elmo_layout import (
    INDEX_FIX,
    SENTENCE_TO_INDEX,
    check_export,
    export_id_of,
    open_elmo_file,
    read_sentence_to_index,
    sentence_datasets,
    sentence_key,
    shorten,
)
from probing.features.featurizer import WHOLE_SENTENCE, PreparedInput
from probing.features.hf_models import EncoderInfo

ELMO_HDF5 = "elmo-hdf5"


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

    def encode(self, batch: Sequence[PreparedInput], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(B, layers, dim) in `dtype`: each record's word (mean of its words' rows), each sentence read once."""
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
        return torch.from_numpy(out).to(dtype)


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
