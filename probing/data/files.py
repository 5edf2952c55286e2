"""Files written whole or not at all: a job stopped mid-write leaves the previous file (or none), never half of one
(results.json, checkpoint hashes, the configuration beside checkpoints, reports, CSV tables, plots)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def file_mode() -> int:
    """The permissions `open()` gives a new file under this process's umask (mkstemp's are 0600: a report that the
    rest of a group could not read)."""
    return 0o666 & ~current_umask()


def give_default_permissions(path: Path) -> None:
    """Give a file the permissions `open()` would have (safetensors writes its files 0600)."""
    os.chmod(path, file_mode())


def current_umask() -> int:
    """Read from /proc where it can be: setting the umask to learn it is process-wide, racing other threads."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
        return umask


@contextmanager
def replaced_atomically(target: Path) -> Iterator[Path]:
    """A temporary path in `target`'s folder (created if needed), with `target`'s suffix (matplotlib picks the format
    from it), renamed onto `target` when the block ends without an error and removed when it fails."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}")
    os.close(handle)
    give_default_permissions(temporary)
    try:
        yield Path(temporary)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def open_atomically(target: Path, newline: str | None = None) -> Iterator[IO[str]]:
    """A UTF-8 text file written in the block and in place at `target` only once complete (synced to disk)."""
    with replaced_atomically(target) as temporary, open(temporary, "w", newline=newline, encoding="utf-8") as file:
        yield file
        file.flush()
        os.fsync(file.fileno())


def write_atomically(target: Path, text: str) -> None:
    """Write `text` to `target` whole or not at all."""
    with open_atomically(target) as file:
        file.write(text)


def write_json_atomically(path: Path, content: dict[str, Any]) -> None:
    """A JSON file (results.json, ...), indented, written atomically; strict JSON (a NaN is a ValueError, not the
    bare NaN token that JSON readers other than Python's refuse)."""
    write_atomically(path, json.dumps(content, indent=2, allow_nan=False) + "\n")
