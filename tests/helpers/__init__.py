"""What several test modules share: repository paths and running an entry script as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
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
