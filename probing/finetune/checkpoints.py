"""Checkpoints of a fine-tuning run that can be trusted and resumed exactly.

See docs/finetuning.md, 'Checkpoints and resuming' under 'What it does'.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import pickle
import random
import re
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, open_dict

from probing.config import same_run
from probing.data.files import write_atomically
from probing.data.text import sha256_files, sha256sum_listing
from probing.errors import CheckpointError, ConfigError

log = logging.getLogger(__name__)

HASH_SUFFIX = ".sha256"
RESTART_FIX = "relaunch with resume=restart to train from the start"  # restart_fix("resume"), as built in Python
CHECKPOINT_CONFIG = "config.json"  # beside the checkpoints: the configuration they belong to
BEST, LAST, STEP = "best.ckpt", "last.ckpt", "step.ckpt"  # the files of conf/callbacks/finetune.yaml
RESUME_POLICIES = ("auto", "best", "restart")  # finetune.resume; see conf/finetune/default.yaml
# How torch.load(weights_only=True) begins its refusal of a pickle holding other objects (its advice to load it
# with weights_only=False, which would run their code, is not passed on).
WEIGHTS_ONLY_REFUSAL = "Weights only load failed"


def restart_fix(name: str) -> str:
    """The fix of a checkpoint that cannot be resumed: relaunch with the resume setting `name` restart."""
    return f"relaunch with {name}=restart to train from the start"


def hash_file(checkpoint: str | Path) -> Path:
    """Where the SHA-256 of `checkpoint` is recorded."""
    return Path(f"{checkpoint}{HASH_SUFFIX}")


def record_hash(checkpoint: str | Path) -> None:
    """Write the SHA-256 of `checkpoint` beside it, atomically."""
    checkpoint = Path(checkpoint)
    write_atomically(hash_file(checkpoint), sha256sum_listing([checkpoint]))


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


def read_checkpoint(checkpoint: str | Path, fix: str = RESTART_FIX, mmap: bool = False) -> dict[str, Any]:
    """The verified contents of a checkpoint, loading only tensors and plain values (as Lightning loads a checkpoint
    to resume from, `weights_only=True`); with `mmap`, the tensors are mapped rather than read (to check a file
    cheaply). A checkpoint holding other objects is refused: unpickling them could run code."""
    verify_checkpoint(checkpoint, fix)
    try:
        return torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        if WEIGHTS_ONLY_REFUSAL not in str(error):
            raise CheckpointError(f"{checkpoint} cannot be read ({first_line(error)}). Fix: {fix}") from error
        held = re.search(r"GLOBAL ([\w.]+)", str(error))
        raise CheckpointError(f"{checkpoint} holds objects other than tensors and plain values"
                              f"{f' ({held.group(1)})' if held else ''}, which are not loaded because unpickling them "
                              f"could run code. Fix: {fix}") from None
    except (RuntimeError, OSError, EOFError) as error:
        raise CheckpointError(f"{checkpoint} cannot be read ({first_line(error)}). Fix: {fix}") from error


def first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def load_checkpoint_weights(module: torch.nn.Module, checkpoint: str | Path, fix: str = RESTART_FIX) -> int:
    """Put a verified Lightning checkpoint's weights into `module`; returns the epoch it was saved in."""
    state = read_checkpoint(checkpoint, fix)
    module.load_state_dict(state["state_dict"])
    return int(state["epoch"])


def load_best_weights(module: torch.nn.Module, best: ModelCheckpoint, fix: str = RESTART_FIX) -> int:
    """Put the weights of the best dev epoch that `best` kept into `module`; returns that epoch (a damaged file is
    refused with `fix`)."""
    if not best.best_model_path:
        raise ConfigError(f"no checkpoint of the best dev epoch was written (callbacks.best monitors "
                          f"{best.monitor}). Fix: task.monitor must be a dev metric of the task")
    return load_checkpoint_weights(module, best.best_model_path, fix)


def best_checkpoint(trainer: L.Trainer) -> ModelCheckpoint:
    """The callback that keeps the best dev epoch (`callbacks.best`, the first ModelCheckpoint with a monitor)."""
    for callback in trainer.callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.monitor:
            return callback
    raise ConfigError("no ModelCheckpoint monitors a dev metric: the best dev epoch is what train.py exports. "
                      "Fix: keep callbacks=finetune")


def run_identity(cfg: DictConfig) -> DictConfig:
    """The configuration that a run's results and checkpoints belong to: all of `cfg` but `finetune.resume`, which
    says only how to go on with the run."""
    identity = copy.deepcopy(cfg)
    with open_dict(identity):
        identity.finetune.pop("resume", None)
    return identity


class ResumePolicy:
    """How a run relaunched into its folder goes on (`policy`; its messages name it `name`, the setting the user
    chooses it by: train.py's `finetune.resume`). auto: from the newer of last.ckpt (epoch
    end) and step.ckpt (every few steps), if any; best: from best.ckpt (the state at the end of the best dev epoch so
    far); restart: from the start, the run's checkpoints deleted. Checkpoints are verified against their recorded
    hash; those of another configuration are refused, never resumed or overwritten."""

    def __init__(self, policy: str = "auto", name: str = "resume"):
        if policy not in RESUME_POLICIES:
            raise ConfigError(f"{name}={policy!r} is not a way to resume. Fix: {name}=auto (the newest checkpoint), "
                              f"best ({BEST}, the best dev epoch) or restart (train from the start)")
        self.policy, self.name = policy, name
        self.restart = restart_fix(name)  # the fix of a checkpoint that cannot be resumed

    def checkpoint(self, checkpoints: str | None, config: dict[str, Any], is_rank_zero: bool) -> str | None:
        """The checkpoint in the folder `checkpoints` of an interrupted run of this same configuration to resume
        from; None to train from the start. The folder records the configuration its checkpoints belong to
        (config.json, written by rank 0, which also deletes the checkpoints on a restart)."""
        if not checkpoints:
            return None
        folder = Path(checkpoints)
        recorded = folder / CHECKPOINT_CONFIG
        found = [folder / name for name in (BEST, LAST, STEP) if (folder / name).is_file()]
        if found and recorded.is_file() and not same_run(json.loads(recorded.read_text(encoding="utf-8")), config):
            raise ConfigError(f"{folder} holds the checkpoints of a run of another configuration. Fix: run into a new "
                              "folder (hydra.run.dir=...), or relaunch with the same settings to resume it")
        if is_rank_zero:
            folder.mkdir(parents=True, exist_ok=True)
            if self.policy == "restart":
                for path in found:
                    path.unlink()
                    hash_file(path).unlink(missing_ok=True)
            write_atomically(recorded, json.dumps(config, indent=2) + "\n")
        chosen = self.choose(folder)
        if chosen is not None:
            log.info("resuming from %s", chosen)
        return chosen

    def choose(self, folder: Path) -> str | None:
        """The verified checkpoint of `folder` that this policy resumes from, or None."""
        if self.policy == "restart":
            return None
        if self.policy == "best":
            if not (folder / BEST).is_file():
                raise ConfigError(f"{self.name}=best, but {folder} holds no {BEST} (no epoch of this run was "
                                  f"validated). Fix: {self.name}=auto or {self.name}=restart")
            return resumable(folder / BEST, self.restart)
        found = [folder / name for name in (LAST, STEP) if (folder / name).is_file()]
        if not found:
            return None
        newest = max(found, key=lambda path: path.stat().st_mtime_ns)
        fix = (f"relaunch with {self.name}=best to resume from {BEST} (the end of the best dev epoch), or "
               f"{self.name}=restart to train from the start") if (folder / BEST).is_file() else self.restart
        return resumable(newest, fix)


def resumable(checkpoint: Path, fix: str) -> str:
    """`checkpoint` once verified and read as Lightning will load it (its tensors mapped, not read), so that a file
    Lightning would refuse is one CheckpointError ending in `fix` instead of a traceback from Lightning's fit."""
    read_checkpoint(checkpoint, fix, mmap=True)
    return str(checkpoint)


class HashedCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that records the SHA-256 of each file it writes (and removes it with the file)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Lightning warns when the folder is not empty; ours always holds config.json, and on a resume the checkpoints
        # that ResumePolicy checked and logged: the warning would only alarm.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
            super().setup(trainer, pl_module, stage)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Lightning's, in a run folder that was moved since the checkpoint was written: the paths the state holds
        (the best checkpoint so far, ...) are first moved to where the checkpoint folder is now. Lightning would keep
        only the old path of the best checkpoint and forget its score, so the next validation would replace best.ckpt
        whatever its score, and the best epoch would be read from where the folder no longer is."""
        recorded = state_dict.get("dirpath")
        if recorded and self.dirpath and recorded != self.dirpath:
            state_dict = {key: relocated(value, recorded, self.dirpath) for key, value in state_dict.items()}
        super().load_state_dict(state_dict)

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


class ContinuedCSVLog(L.Callback):
    """The CSV log (metrics.csv) of a run resumed from a checkpoint keeps the rows logged before the checkpoint's
    step; the resumed run logs the rest, as an uninterrupted run would have. Made before anything opens the loggers:
    it moves the log it finds to metrics.previous.csv (nothing is lost if the relaunch dies too) and holds its rows;
    a resumed run writes them back, a run that starts over drops them. Every checkpoint flushes the log first, so that
    the rows before it are on disk."""

    PREVIOUS = "metrics.previous.csv"

    def __init__(self, loggers: list[Logger]) -> None:
        self.loggers = [logger for logger in loggers if isinstance(logger, CSVLogger)]
        # Rank 0 alone writes the CSV log (Lightning's rank, set from the launcher's environment before the trainer).
        self.previous_rows = [self.take_previous_rows(logger) if rank_zero_only.rank == 0 else []
                              for logger in self.loggers]

    def take_previous_rows(self, logger: CSVLogger) -> list[dict[str, str]]:
        """The rows of the log in logger's folder, moved to metrics.previous.csv; the logger opened on an empty log."""
        log, previous = Path(logger.log_dir) / ExperimentWriter.NAME_METRICS_FILE, Path(logger.log_dir) / self.PREVIOUS
        if log.is_file():
            log.replace(previous)
        rows = []
        if previous.is_file():
            with open(previous, newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
        with warnings.catch_warnings():  # "... will be deleted": there is nothing left for it to delete
            warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
            logger.experiment  # noqa: B018 (opened here, under the filter, rather than by the first log)
        return rows

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.is_global_zero:
            for logger in self.loggers:
                logger.save()

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if not trainer.is_global_zero:
            return
        resumed_step = int(checkpoint.get("global_step", 0))
        for logger, rows in zip(self.loggers, self.previous_rows):
            logger.experiment.metrics[:0] = [row for row in rows if logged_before(row, resumed_step)]
            logger.save()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            for logger in self.loggers:
                (Path(logger.log_dir) / self.PREVIOUS).unlink(missing_ok=True)
        self.previous_rows = [[] for _ in self.loggers]


def logged_before(row: dict[str, str], step: int) -> bool:
    """Whether a CSV log row was logged at a global step before `step` (the resumed run logs the rest again)."""
    try:
        return int(float(row.get("step") or "nan")) < step
    except ValueError:
        return False


def relocated(value: Any, old_dir: str, new_dir: str) -> Any:
    """A ModelCheckpoint state value with the paths in `old_dir` (strings, or the keys of best_k_models) moved to
    `new_dir`."""
    if isinstance(value, dict):
        return {relocated(key, old_dir, new_dir): item for key, item in value.items()}
    if isinstance(value, str) and (value == old_dir or value.startswith(old_dir.rstrip("/") + "/")):
        return new_dir + value[len(old_dir):]
    return value


def as_tuple(value: Any) -> Any:
    """Python's random state as `random.setstate` takes it (tuples all the way down; a checkpoint may hold lists)."""
    return tuple(as_tuple(item) for item in value) if isinstance(value, (list, tuple)) else value
