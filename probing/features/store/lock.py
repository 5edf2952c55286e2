"""Who may write a store, and the file system's refusals of a write, each as one line.

See docs/features.md, 'Store lock and disk errors'.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from probing.errors import ProbingError
from probing.locks import holding, open_lock_file

ELSEWHERE = "point `paths.store_dir` (env PROBING_STORE_DIR) at"
WAIT_FIX = "wait for it to finish, then rerun; the extraction resumes where it stopped"


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def is_disk_full(error: OSError) -> bool:
    """ENOSPC, whether raised by Python (errno set) or reported by HDF5 (the reason in the text only)."""
    return error.errno == errno.ENOSPC or os.strerror(errno.ENOSPC) in str(error)


def disk_full_error(path: Path, detail: str = os.strerror(errno.ENOSPC)) -> ProbingError:
    return ProbingError(
        f"{path}: the disk is full ({detail}). Fix: free disk space and rerun (rows already written are "
        f"kept and the extraction resumes where it stopped), or {ELSEWHERE} a disk with room")


def unwritable_error(path: Path, error: OSError) -> ProbingError:
    if is_disk_full(error):
        return disk_full_error(path)
    return ProbingError(f"{path}: the store cannot be written ({one_line(error)}). "
                        f"Fix: make {path.parent} writable, or {ELSEWHERE} a writable folder")


@contextmanager
def disk_full_is_user_error(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        if not is_disk_full(error):
            raise
        raise disk_full_error(path) from error


@contextmanager
def store_lock(path: Path, wait_s: float = 0.0) -> Iterator[None]:
    """Hold `<store>.lock` exclusively while creating or writing `path` (a `probing.locks` lock). Another holder
    makes this a ProbingError, at once or after waiting up to `wait_s` seconds for it to finish (the parallel jobs of
    a sweep share stores)."""
    def refused(holder: str) -> ProbingError:
        waited = f" (waited {wait_s:g} s)" if wait_s > 0 else ""
        return ProbingError(f"{path}: another run (pid {holder}) is extracting into this store{waited}. "
                            f"Fix: {WAIT_FIX}")

    try:
        fd = open_lock_file(path.with_name(path.name + ".lock"))
    except OSError as error:
        raise unwritable_error(path, error) from error
    waiting = f"{path}: another run is extracting into this store; waiting for it (up to {wait_s:g} s)"
    with holding(fd, refused, wait_s, waiting):
        yield
