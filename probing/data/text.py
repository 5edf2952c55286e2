"""Reading text data files: strict UTF-8 line by line, finding data files (folders, zip members), and file hashes
for store metadata."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from probing.errors import DataFormatError

UTF8_FIX = "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8 IN > OUT)"


def read_lines(path: str | Path, config_key: str = "the data path") -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without its trailing newline) from a UTF-8 file.

    Each line is decoded strictly, so an invalid byte is reported with its line and byte column
    instead of being replaced. A UTF-8 byte-order mark at the start of the file is dropped, and
    Windows line ends ("\\r\\n") are stripped like "\\n". `config_key` is the setting named in the
    fix when the file does not exist (e.g. "data.data_dir").
    """
    path = Path(path)
    if not path.is_file():
        problem = "is a directory, not a file" if path.is_dir() else "file not found"
        raise DataFormatError(path, None, problem, f"set `{config_key}` to an existing file")
    note_data_files([path])
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = _decode_line(raw, path, number)
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line.removesuffix("\n").removesuffix("\r")



def json_lines(path: str | Path, config_key: str, fix: str) -> Iterator[tuple[int, object]]:
    """Yield (1-based line number, parsed value) of each non-blank line of a JSON-lines file (read as `read_lines`
    does); a line that is not JSON is a DataFormatError naming it, with `fix`."""
    for number, line in read_lines(path, config_key):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, number, f"invalid JSON ({error.msg} at column {error.colno})", fix) from None

def _decode_line(raw: bytes, path: Path, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        problem = f"byte 0x{raw[error.start]:02x} at byte column {error.start + 1} is not valid UTF-8"
        raise DataFormatError(path, number, problem, UTF8_FIX) from None


# The data files read since the job began (`note_data_files`: by `read_lines`, and by every loaded data set, which keeps
# the list of files it read), in reading order: the job records them with their hashes in its results.json
# (probing.tasks.results_file).
_DATA_FILES_READ: dict[str, None] = {}


def note_data_files(files: Iterable[str | Path]) -> None:
    for path in hashable_files([Path(file) for file in files]):
        _DATA_FILES_READ.setdefault(str(Path(path).resolve()))


def data_files_read() -> list[str]:
    return list(_DATA_FILES_READ)


def forget_data_files() -> None:
    """A new job begins (the jobs of a multirun share one process)."""
    _DATA_FILES_READ.clear()


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks so large corpora need little memory.

    Memoised per (path, size, modification time): the jobs of a Hydra multirun share one process, and a layer
    sweep would otherwise re-read a multi-GB corpus once per job."""
    stat = Path(path).stat()
    return _sha256_of_version(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, chunk_bytes)


@functools.lru_cache(maxsize=256)
def _sha256_of_version(path: str, size: int, mtime_ns: int, chunk_bytes: int) -> str:
    return sha256_files([path], chunk_bytes)


def sha256_files(paths: Iterable[str | Path], chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of the files' bytes read one after another (e.g. a model's weight shards, in order)."""
    digest = hashlib.sha256()
    for path in paths:
        with Path(path).open("rb") as handle:
            while chunk := handle.read(chunk_bytes):
                digest.update(chunk)
    return digest.hexdigest()


def sha256sum_listing(paths: Iterable[str | Path]) -> str:
    """The files' SHA-256 in `sha256sum`'s format, a line `<hash>  <name>` each (`sha256sum -c` checks it from their
    folder)."""
    return "".join(f"{sha256_files([path])}  {Path(path).name}\n" for path in paths)


def read_sha256sum_listing(path: str | Path) -> dict[str, str]:
    """Name -> SHA-256 of a `sha256sum_listing` file; a line of another form is a ValueError naming it."""
    listing = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        digest, separator, name = line.partition("  ")
        if not separator or not name or len(digest) != 64 or any(char not in "0123456789abcdef" for char in digest):
            raise ValueError(f"line {number} is not `<SHA-256>  <file name>`")
        listing[name] = digest
    return listing


def files_in(paths: Sequence[Path], pattern: str, config_key: str) -> list[Path]:
    """Each file as given and each folder's files matching `pattern`, sorted by name; a missing path or a folder
    without such files is a DataFormatError naming `config_key`."""
    files: list[Path] = []
    for path in paths:
        if path.is_file():
            files.append(path)
            continue
        if not path.is_dir():
            raise DataFormatError(path, None, "no such file or folder", f"set `{config_key}` to existing paths")
        found = sorted(item for item in path.glob(pattern) if item.is_file())
        if not found:
            raise DataFormatError(path, None, f"no {pattern} files in the folder", f"set `{config_key}` to data files")
        files.extend(found)
    return files


def archive_of(path: Path) -> Path | None:
    """The .zip file that `path` lies in (a member named `ARCHIVE.zip/MEMBER`), or None for a file on disk."""
    return next((parent for parent in path.parents if parent.suffix == ".zip" and parent.is_file()), None)


def hashable_files(files: Sequence[Path]) -> list[Path]:
    """The files on disk behind `files`, in order, once each: a zip member gives its archive."""
    return list(dict.fromkeys(archive_of(path) or path for path in files))
