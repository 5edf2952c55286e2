"""The two threads that overlap extraction's host work with the model's forward: `Prefetch` runs the tokenising and
batching ahead of the forward behind a bounded queue, `WriteBehind` runs the store's writes behind it, a bounded
number of windows late. Either runs inline instead (no thread, `threaded=False`): the serial order, kept as the
reference the threaded one is tested against. See docs/features.md, 'Extraction: windows, batches, resuming'.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
_END, _ITEM, _ERROR = "end", "item", "error"
POLL_SECONDS = 0.05  # how often a blocked producer looks whether its consumer has stopped


class Prefetch(Generic[Item]):
    """Iterates `items`, produced by a thread of its own at most `depth` items ahead of the consumer (`threaded`), or
    produced on demand in the consumer's thread. An exception of the producer is raised in the consumer, at the item
    where it happened. `close` stops the producer (at its next item) and waits for it.

    A thread, not DataLoader workers: the producer's work (the tokenizers' Rust code, torch's padding) mostly runs
    without the GIL, and a thread shares the tokenizer and the store rows without pickling them to a process."""

    def __init__(self, items: Iterator[Item], depth: int, threaded: bool = True):
        self._items, self._thread = items, None
        if threaded:
            self._queue: queue.Queue = queue.Queue(maxsize=depth)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._produce, name="extraction-prefetch", daemon=True)
            self._thread.start()

    def _produce(self) -> None:
        try:
            for item in self._items:
                if not self._offer((_ITEM, item)):
                    return
            self._offer((_END, None))
        except BaseException as error:  # handed to the consumer, raised there
            self._offer((_ERROR, error))
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def _offer(self, entry: tuple[str, Any]) -> bool:
        """Queue `entry`, waiting for room; False once the consumer has stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Prefetch[Item]:
        return self

    def __next__(self) -> Item:
        if self._thread is None:
            return next(self._items)
        kind, value = self._queue.get()
        if kind == _ITEM:
            return value
        self._queue.put((kind, value))  # every later call ends the same way
        if kind == _ERROR:
            raise value
        raise StopIteration

    def close(self) -> None:
        if self._thread is None:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()
            return
        self._stop.set()
        self._thread.join()


class WriteBehind:
    """Runs tasks (the store's writes) in order, in a thread of its own (`threaded`) or at once in the caller's.

    The caller opens each window (`open_window`, which waits while `windows` windows are queued and unwritten) and puts
    its tasks, the last with `closes_window`. The first task that fails ends the writing: the later ones are dropped
    (so that nothing after a failed write is written, as in the serial order), and its exception is raised in the
    caller at its next `open_window`, `put` or `close`. `close` runs every task queued before it, then stops."""

    def __init__(self, windows: int, threaded: bool = True):
        self.error: BaseException | None = None
        self._thread = None
        if threaded:
            self._room = threading.Semaphore(windows)
            self._queue: queue.SimpleQueue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._run, name="extraction-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while (entry := self._queue.get()) is not None:
            task, closes_window = entry
            if self.error is None:
                try:
                    task()
                except BaseException as error:  # raised in the caller
                    self.error = error
            if closes_window:
                self._room.release()

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def open_window(self) -> None:
        if self._thread is not None:
            while not self._room.acquire(timeout=POLL_SECONDS):
                self._raise_error()
        self._raise_error()

    def put(self, task: Callable[[], None], closes_window: bool = False) -> None:
        if self._thread is None:
            task()
            return
        self._raise_error()
        self._queue.put((task, closes_window))

    def close(self) -> None:
        """Wait for the queued tasks; raise the error that stopped them, if any."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        self._raise_error()
