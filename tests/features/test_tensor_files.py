"""Checked safetensors files: the hash over metadata and tensors (pinned: saved probes and erasers depend on it), and
atomic writes."""

from __future__ import annotations

import json

import pytest
import torch

import probing.features.tensor_files as tensor_files
from probing.data.files import file_mode
from probing.features.tensor_files import (
    HASH_KEY,
    contents_hash,
    hash_matches,
    hashed_metadata,
    read_tensor_file,
    tensors_hash,
    write_tensor_file,
)

TENSORS = {"b": torch.arange(3, dtype=torch.int64), "a": torch.tensor([[0.5, -1.0]], dtype=torch.float32)}
TEXT = json.dumps({"layer": 3})


def test_the_hashes_are_those_files_were_written_with():
    """Values written by the code before it moved here: a change of the scheme would refuse every saved file."""
    assert contents_hash("probing", TEXT, TENSORS) == "655fa86fbc71a6d40b9adbc4acc81721"
    assert tensors_hash(TENSORS) == "70267e7b6e6231825a64eb450eb0a037"


def test_a_written_file_reads_back_and_its_hash_matches(tmp_path):
    path = write_tensor_file(tmp_path / "x.safetensors", TENSORS, hashed_metadata("probing", TEXT, TENSORS))
    metadata, tensors = read_tensor_file(path)
    assert metadata == {"probing": TEXT, HASH_KEY: "655fa86fbc71a6d40b9adbc4acc81721"}
    assert tensors.keys() == TENSORS.keys() and all(torch.equal(tensors[name], TENSORS[name]) for name in TENSORS)
    assert hash_matches(metadata, tensors, "probing")
    assert path.stat().st_mode & 0o777 == file_mode() and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("change", [
    lambda metadata, tensors: ({**metadata, "probing": json.dumps({"layer": 2})}, tensors),
    lambda metadata, tensors: (metadata, {**tensors, "b": torch.tensor([0, 1, 3])}),
    lambda metadata, tensors: ({"probing": metadata["probing"]}, tensors),
    lambda metadata, tensors: ({"other": metadata["probing"], HASH_KEY: metadata[HASH_KEY]}, tensors),
], ids=["text edited", "tensor changed", "hash missing", "text under another key"])
def test_the_hash_covers_the_text_and_the_tensors(change):
    metadata, tensors = change(hashed_metadata("probing", TEXT, TENSORS), dict(TENSORS))
    assert not hash_matches(metadata, tensors, "probing")


def test_a_failed_write_leaves_the_previous_file(tmp_path, monkeypatch):
    path = write_tensor_file(tmp_path / "x.safetensors", TENSORS, {})
    before = path.read_bytes()

    def half_written(tensors, partial, metadata):
        partial.write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(tensor_files, "save_file", half_written)
    with pytest.raises(OSError, match="disk full"):
        write_tensor_file(path, {"c": torch.zeros(2)}, {})
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]
