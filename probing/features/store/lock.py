"""Who may write a store, and the file system's refusals of a write, each as one line.

Concurrency. A process creating or writing a store holds `<name>.h5.lock` (an exclusive, non-blocking
`fcntl.flock`; the file holds its pid and stays after use), so a second run is refused at once instead
of writing the same file, or waits for the first to finish where it asks to (`store_lock(wait_s=...)`: the parallel
jobs of a sweep share stores). Extraction only reads a complete store (a read-only open, no lock file), so
it may sit on a read-only disk.

Refusals. A full disk (ENOSPC, whether Python or HDF5 reports it) is one ProbingError line that says the rows already
written are kept (`disk_full_is_user_error`, around every write of a store), and so is a folder the store cannot be
written to (`unwritable_error`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from probing.errors import ProbingError

log = logging.getLogger(__name__)

ELSEWHERE = "point `paths.store_dir` (env PROBING_STORE_DIR) at"
LOCK_POLL_S = 1.0  # how often a run waiting for a store's lock tries again
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
    """Hold `<store>.lock` exclusively while creating or writing `path`. Another holder makes this a ProbingError,
    at once or after waiting up to `wait_s` seconds for it to finish (the parallel jobs of a sweep share stores).

    The lock file is never removed: a run that had opened the removed file and one that created a new file
    could then both hold "the" lock."""
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise unwritable_error(path, error) from error
    try:
        if not _take_lock(fd, path, wait_s):
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            waited = f" (waited {wait_s:g} s)" if wait_s > 0 else ""
            raise ProbingError(f"{path}: another run (pid {holder}) is extracting into this store{waited}. "
                               f"Fix: {WAIT_FIX}")
        _record_pid(fd)
        yield
    finally:
        os.close(fd)  # releases the lock


def _take_lock(fd: int, path: Path, wait_s: float) -> bool:
    """Take the exclusive lock on `fd`, polling for up to `wait_s` seconds while another run holds it."""
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not announced:
                log.info("%s: another run is extracting into this store; waiting for it (up to %g s)", path, wait_s)
                announced = True
            time.sleep(min(LOCK_POLL_S, left))


def _record_pid(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError:
        pass  # the pid only makes a refused run's message more helpful
