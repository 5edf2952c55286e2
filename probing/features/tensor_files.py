"""Safetensors files that check themselves: tensors plus one JSON metadata string, with a hash over both.

See docs/outputs.md, 'Files that check themselves'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import xxhash
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from probing.data.files import give_default_permissions, replaced_atomically

HASH_KEY = "xxh3_128"
# What reading a file that is not a safetensors file (or not there) raises; the callers word the refusal.
READ_ERRORS = (SafetensorError, OSError)


def hashed_metadata(metadata_key: str, text: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """The safetensors metadata of a checked file: `text` under `metadata_key`, and the hash of it and `tensors`."""
    return {metadata_key: text, HASH_KEY: contents_hash(metadata_key, text, tensors)}


def contents_hash(metadata_key: str, text: str, tensors: Mapping[str, torch.Tensor]) -> str:
    """XXH3-128 (hex) of the metadata string under its key, then of the tensors as `hash_tensors` reads them."""
    hasher = xxhash.xxh3_128()
    hasher.update(json.dumps([metadata_key, text]).encode("utf-8"))
    return hash_tensors(hasher, tensors).hexdigest()


def tensors_hash(tensors: Mapping[str, torch.Tensor]) -> str:
    """XXH3-128 (hex) of the tensors alone (what older probes files recorded)."""
    return hash_tensors(xxhash.xxh3_128(), tensors).hexdigest()


def hash_tensors(hasher: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """`hasher` updated with every tensor's name, dtype, shape and bytes, in name order."""
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        hasher.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode("utf-8"))
        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return hasher


def hash_matches(metadata: Mapping[str, str], tensors: Mapping[str, torch.Tensor], metadata_key: str) -> bool:
    """Whether the hash recorded in `metadata` is that of its `metadata_key` string and `tensors` (False when either
    is missing)."""
    recorded, text = metadata.get(HASH_KEY), metadata.get(metadata_key)
    return recorded is not None and text is not None and contents_hash(metadata_key, text, tensors) == recorded


def write_tensor_file(path: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> Path:
    """Write `tensors` (contiguous, on the CPU) and `metadata` to `path` atomically, with the permissions `open()`
    gives (safetensors alone writes 0600)."""
    with replaced_atomically(Path(path)) as partial:
        save_file(dict(tensors), partial, metadata=dict(metadata))
        give_default_permissions(partial)
    return Path(path)


def read_tensor_file(path: Path) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """The metadata and tensors of a safetensors file, unchecked (see `hash_matches`); raises one of READ_ERRORS for
    a file that is missing or not safetensors."""
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    return dict(metadata), load_file(path)
