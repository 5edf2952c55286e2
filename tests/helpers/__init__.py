"""What several test modules share: repository paths, running an entry script as a user does, and another process
holding a lock (of a feature store or a run folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import probing.tasks  # noqa: F401 (registers the config resolvers that need the library: the fine-tuned comparison's)

REPO = Path(__file__).resolve().parents[2]
# The configs of the entry scripts, for composing them in-process (the library itself never locates them).
CONFIG_DIR = str(REPO / "conf")
FIXTURES = REPO / "tests" / "fixtures"
FIXTURE_STREUSLE = FIXTURES / "data" / "streusle" / "mini.conllulex"
# The WordPiece vocabulary of the tiny random BERT of the tests (conftest.tiny_bert_path).
TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "a", "apple", "juice", "is", "healthy", "stock", "rises", "she", "eats", "air", "##head", "##s",
    "in", "##fr", "##e", "##quent", "new", "york", "city", ".", ",", "of", "and", "party", "progress",
    "socialism", "roberta", "larch", "pine", "oak", "un", "##known", "word", "x", "y", "z",
]


def run_script(script: str, *overrides: str, cwd: Path,
               environment: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """`python <script> <overrides>` in `cwd`, offline, with its feature stores under `cwd/stores`; `environment`
    sets variables (None removes one, e.g. WANDB_MODE)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PROBING_STORE_DIR": str(cwd / "stores")}
    env.update(environment or {})
    env = {name: value for name, value in env.items() if value is not None}
    return subprocess.run([sys.executable, str(REPO / script), *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


# What a process holding a lock does (probing.locks): an exclusive flock on the lock file, its pid inside.
HOLD_LOCK = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644); "
             "fcntl.flock(fd, fcntl.LOCK_EX); os.ftruncate(fd, 0); os.write(fd, f'{os.getpid()}\\n'.encode()); "
             "print('held', flush=True); time.sleep(600)")


@contextmanager
def lock_holder(lock: Path) -> Iterator[subprocess.Popen]:
    """Another process holding the lock file `lock`, until it is killed (SIGKILL, at the end of the block at the
    latest), which leaves the file behind."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
