"""Checkpoints of a fine-tuning run that can be trusted and resumed exactly.

- `HashedCheckpoint` is Lightning's ModelCheckpoint that also records each file's SHA-256 beside it
  (`<name>.ckpt.sha256`, in `sha256sum` format), and `read_checkpoint` checks it before anything is loaded: a
  truncated file, or random bytes inside one, is one CheckpointError naming the file instead of a traceback or a
  quietly different model. (Lightning writes a checkpoint to a temporary file and renames it into place; the hash
  is written after it, so a run killed between the two leaves a file whose hash does not match: refused too.)
- `RandomStates` stores the random number generators of torch (CPU and CUDA), NumPy and Python in every checkpoint
  and puts them back when training resumes, so that dropout continues the stream it would have drawn. With the
  train order of `probing.finetune.datamodule.EpochOrder` (a function of the seed and the epoch, resumed at the
  batch where it stopped), a resumed run ends with the same weights as one that was never interrupted. With DDP the
  states of the process of rank 0 are the ones saved.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from probing.data.text import sha256_files
from probing.errors import CheckpointError

HASH_SUFFIX = ".sha256"
RESTART_FIX = "relaunch with finetune.resume=restart to train from the start"


def hash_file(checkpoint: str | Path) -> Path:
    """Where the SHA-256 of `checkpoint` is recorded."""
    return Path(f"{checkpoint}{HASH_SUFFIX}")


def record_hash(checkpoint: str | Path) -> None:
    """Write the SHA-256 of `checkpoint` beside it, atomically."""
    checkpoint = Path(checkpoint)
    target = hash_file(checkpoint)
    handle, temporary = tempfile.mkstemp(dir=checkpoint.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(f"{sha256_files([checkpoint])}  {checkpoint.name}\n")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def verify_checkpoint(checkpoint: str | Path, fix: str = RESTART_FIX) -> Path:
    """`checkpoint` if its bytes are those recorded when it was written; else a CheckpointError ending in `fix`."""
    checkpoint = Path(checkpoint)
    recorded = hash_file(checkpoint)
    if not recorded.is_file():
        raise CheckpointError(f"{checkpoint} has no recorded hash ({recorded.name}), so it may be incomplete or from "
                              f"an older version. Fix: {fix}")
    expected = (recorded.read_text(encoding="utf-8").split() or [""])[0]
    if sha256_files([checkpoint]) != expected:
        raise CheckpointError(f"{checkpoint} is damaged: its SHA-256 differs from the one recorded when it was written "
                              f"({recorded.name}; truncated, overwritten, or the run was killed while saving). "
                              f"Fix: {fix}")
    return checkpoint


def read_checkpoint(checkpoint: str | Path, fix: str = RESTART_FIX) -> dict[str, Any]:
    """The verified contents of a checkpoint, loading only tensors and plain values."""
    verify_checkpoint(checkpoint, fix)
    try:
        return torch.load(checkpoint, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as error:
        raise CheckpointError(f"{checkpoint} cannot be read ({str(error).strip().splitlines()[0]}). "
                              f"Fix: {fix}") from error


def load_checkpoint_weights(module: torch.nn.Module, checkpoint: str | Path, fix: str = RESTART_FIX) -> int:
    """Put a verified Lightning checkpoint's weights into `module`; returns the epoch it was saved in."""
    state = read_checkpoint(checkpoint, fix)
    module.load_state_dict(state["state_dict"])
    return int(state["epoch"])


class HashedCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that records the SHA-256 of each file it writes (and removes it with the file)."""

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        if trainer.is_global_zero:
            record_hash(filepath)

    def _remove_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._remove_checkpoint(trainer, filepath)
        if trainer.is_global_zero:
            hash_file(filepath).unlink(missing_ok=True)


class RandomStates(L.Callback):
    """Saves the random number generators' states in each checkpoint; restores them when training resumes (at
    `on_train_start`, after the checkpoint's weights, optimizer and loops, and before the first training step)."""

    def __init__(self) -> None:
        self.pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        keys, position, has_gauss, gauss = np.random.get_state()[1:]
        states = {"torch": torch.get_rng_state(), "python": random.getstate(),
                  "numpy": [torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(gauss)]}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
        return states

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = state_dict

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.pending is None:
            return
        states, self.pending = self.pending, None
        torch.set_rng_state(states["torch"])
        random.setstate(as_tuple(states["python"]))
        keys, position, has_gauss, gauss = states["numpy"]
        np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), position, has_gauss, gauss))
        if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states["cuda"])


def as_tuple(value: Any) -> Any:
    """Python's random state as `random.setstate` takes it (tuples all the way down; a checkpoint may hold lists)."""
    return tuple(as_tuple(item) for item in value) if isinstance(value, (list, tuple)) else value
