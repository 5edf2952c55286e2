"""Exclusive locks that keep a second process out: of a feature store while one writes it
(`probing.features.store.lock`), of a run folder while a job runs in it (`probing.tasks.results_file`).

A lock is an exclusive, non-blocking `fcntl.flock` on a lock file that holds the holder's pid. The kernel lets go of it
when the holder's process ends, however it ends, so a killed job never blocks the next one: its lock file is left, but
unlocked. The lock file is never removed: a process that had opened the removed file and one that created a new file
could then both hold "the" lock.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_POLL_S = 1.0  # how often a process waiting for a lock tries again


def open_lock_file(lock: Path) -> int:
    """A descriptor of the lock file `lock`, created (with its folder) if need be; for `holding`."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    return os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)


@contextmanager
def holding(fd: int, refusal: Callable[[str], Exception], wait_s: float = 0.0, waiting: str = "") -> Iterator[None]:
    """Hold the lock of `fd` (from `open_lock_file`; closed at the end, which lets go of the lock) for the block, with
    this process's pid in it. Another holder: `refusal(its pid)` is raised, at once or after waiting up to `wait_s`
    seconds for it to let go (`waiting` is logged once when the wait begins)."""
    try:
        if not _take_lock(fd, wait_s, waiting):
            raise refusal(os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown")
        _record_pid(fd)
        yield
    finally:
        os.close(fd)


def _take_lock(fd: int, wait_s: float, waiting: str) -> bool:
    """Take the exclusive lock on `fd`, polling for up to `wait_s` seconds while another process holds it."""
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
                log.info("%s", waiting)
                announced = True
            time.sleep(min(LOCK_POLL_S, left))


def _record_pid(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError:
        pass  # the pid only makes a refused process's message more helpful
