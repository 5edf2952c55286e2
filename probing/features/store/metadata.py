"""A store's identity: its file name, and the request recorded in its attributes and compared on every reopening.

See docs/features.md, 'Store identity'.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import probing
from probing.data.records import RecordTable, WordInContext
from probing.data.text import sha256_file
from probing.errors import StoreMismatchError
from probing.features.store.layout import DELETE_FIX, STORE_FORMAT, from_attr, to_attr

log = logging.getLogger(__name__)

NOT_COMPARED = frozenset({"model_name", "model_path", "code_version", "created"})
# Keys compared only when the request holds them: without `data_files`, the records identify the data.
COMPARED_IF_REQUESTED = frozenset({"data_files"})
# Keys a store or a request may lack, and what their absence means: stores written before the forward precision
# was recorded were computed in float32, and featurizers that run no encoder have no precision.
IMPLIED_WHEN_MISSING = {"precision": "32"}
MISSING = "<missing>"


def slugify(text: str) -> str:
    """A file-name-safe form: `sentence-transformers/all-MiniLM-L6-v2` -> `sentence-transformers--all-minilm-l6-v2`."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower().replace("/", "--")).strip("-.")
    return slug or "unnamed"


# The storage dtype in the store's file name: none for float16, the default, so that its stores keep their names.
DTYPE_NAME_TAGS = {"float16": "", "float32": ".float32"}


def store_path(root: str | Path, model_name: str, data_name: str, split: str, pooling: str,
               context_size: int | None, records_sha256: str | None = None, dtype: str = "float16") -> Path:
    """`root/<model>/<data>/<split>.<pooling>.ctx-<size|all>[.<records>][.float32].h5`, every part slugified.

    With `records_sha256`, its first 10 hex digits name the data selection, so that another split seed or
    reader option gets a store of its own instead of being refused by the store of the first one; a float32 store
    (`dtype`) is named apart from the float16 one for the same reason."""
    context = "all" if context_size is None else str(context_size)
    records = f".{records_sha256[:10]}" if records_sha256 else ""
    name = f"{slugify(split)}.{slugify(pooling)}.ctx-{context}{records}{DTYPE_NAME_TAGS.get(dtype, '')}.h5"
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
