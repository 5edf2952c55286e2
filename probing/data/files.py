"""Files written whole or not at all: a job stopped mid-write leaves the previous file (or none), never half of one
(results.json, checkpoint hashes, the configuration beside checkpoints)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomically(target: Path, text: str) -> None:
    """Write `text` to `target` under a temporary name in its folder (created if needed), then rename it into
    place."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json_atomically(path: Path, content: dict[str, Any]) -> None:
    """A JSON file (results.json, ...), indented, written atomically."""
    write_atomically(path, json.dumps(content, indent=2) + "\n")
