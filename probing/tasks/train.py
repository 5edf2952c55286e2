"""train.py: fine-tune an encoder on a task, keep the best dev epoch, export it as a Hugging Face folder, write
results.json.

A run relaunched into its folder resumes from its newest checkpoint (the best one is kept apart), exactly: the same
weights as a run never interrupted (`finetune.resume` chooses: auto, best or restart). Checkpoints are verified
against the SHA-256 recorded when they were written. A run whose results.json holds the same configuration is not
run again. With DDP (trainer=ddp), the results and the exported model are written by the process of rank 0 only.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, open_dict

from probing.config import build
from probing.data.settings import require_int
from probing.data.task_records import SENTENCE_TASKS
from probing.errors import ConfigError
from probing.features.attention import parse_attention_policy
from probing.features.finetuned import MODEL_DIR
from probing.finetune.checkpoints import RandomStates, hash_file, load_checkpoint_weights, verify_checkpoint
from probing.finetune.datamodule import TaskDataModule
from probing.finetune.export import export_model
from probing.tasks.common import (
    build_trainer,
    check_config,
    closing_loggers,
    distributed_state_of_this_job,
    job_state,
    keep_ddp_processes_on_this_job,
    write_json_atomically,
)

log = logging.getLogger(__name__)

# The top-level settings of conf/train.yaml (anything else is a typo).
KNOWN_KEYS = ("task_name", "paths", "model", "task", "data", "finetune", "trainer", "callbacks", "logger", "seed",
              "optimized_metric", "run_name", "run_group")
CHECKPOINT_CONFIG = "config.json"  # beside the checkpoints: the configuration they belong to
BEST, LAST, STEP = "best.ckpt", "last.ckpt", "step.ckpt"  # the files of conf/callbacks/finetune.yaml
RESUME_POLICIES = ("auto", "best", "restart")  # finetune.resume; see conf/finetune/default.yaml


def run(cfg: DictConfig) -> dict[str, Any]:
    """Fine-tune, export the best dev model to <run>/model, write results.json (rank 0)."""
    check_config(cfg, KNOWN_KEYS)
    policy = resume_policy(cfg.finetune.get("resume", "auto"))
    out, config, previous = job_state(run_identity(cfg))
    if previous is not None:
        return previous
    check_finetune_settings(cfg)
    if "ddp" in str(cfg.trainer.get("strategy", "")):
        keep_ddp_processes_on_this_job()
    with closing_loggers(cfg.get("logger")) as loggers, distributed_state_of_this_job():
        results, is_rank_zero = finetune(cfg, config, policy, loggers)
    if is_rank_zero:
        write_json_atomically(out, results)
        log.info("%s: dev %s -> %s", cfg.task.name, format_scores(results["dev"]), out)
    return results


def check_finetune_settings(cfg: DictConfig) -> None:
    """Refuse bad fine-tuning settings before any model is loaded."""
    window = cfg.finetune.attention_window
    parse_attention_policy(cfg.finetune.attention_policy, "finetune.attention_policy")
    if window is not None:
        require_int("finetune.attention_window", window, minimum=0)
        if cfg.task.name in SENTENCE_TASKS:
            raise ConfigError(f"finetune.attention_window={window} restricts attention to nearby words, which Zhao et "
                              f"al. (appendix C) apply to word-level tasks only; {cfg.task.name} is classified from "
                              "the whole text. Fix: finetune.attention_window=null, or task=pos / task=ner")
    require_int("task.batch_size", cfg.task.batch_size, minimum=1)
    require_int("trainer.max_epochs", cfg.trainer.get("max_epochs"), minimum=1)


def resume_policy(value: Any) -> str:
    if value not in RESUME_POLICIES:
        raise ConfigError(f"finetune.resume={value!r} is not a way to resume. Fix: finetune.resume=auto (the newest "
                          f"checkpoint), best ({BEST}, the best dev epoch) or restart (train from the start)")
    return value


def run_identity(cfg: DictConfig) -> DictConfig:
    """The configuration that a run's results and checkpoints belong to: all of `cfg` but `finetune.resume`, which
    says only how to go on with the run."""
    identity = copy.deepcopy(cfg)
    with open_dict(identity):
        identity.finetune.pop("resume", None)
    return identity


def finetune(cfg: DictConfig, config: dict[str, Any], policy: str,
             loggers: list[Logger]) -> tuple[dict[str, Any], bool]:
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    data = build(cfg.data.source, "data.source").load()
    if data.name != cfg.task.name:
        raise ConfigError(f"data.source reads {data.name} data, but task={cfg.task.name}. Fix: keep the data of the "
                          f"task config (task={data.name}), or point data.source at {cfg.task.name} data")
    if data.skips.total():
        log.warning("%s: skipped while reading: %s", data.name, data.skips.summary())
    kind = "token" if data.token_level else "sentence"
    module = build(cfg.finetune.module, "finetune.module")(labels=data.labels, kind=kind)
    max_length = usable_max_length(cfg.task.max_length, module)
    datamodule = TaskDataModule(data, module.tokenizer, max_length=max_length, batch_size=cfg.task.batch_size,
                                seed=cfg.seed)
    trainer = build_trainer(cfg, extra_callbacks=[RandomStates()], loggers=loggers)
    best = best_checkpoint(trainer)
    for logger in trainer.loggers:
        logger.log_hyperparams(config)
    resume = resume_point(best.dirpath, config, trainer.is_global_zero, policy)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    if not best.best_model_path:
        raise ConfigError(f"no checkpoint of the best dev epoch was written (callbacks.best monitors "
                          f"{best.monitor}). Fix: task.monitor must be a dev metric of the task")
    trainer.strategy.barrier("best checkpoint hashed")
    best_epoch = load_checkpoint_weights(module, best.best_model_path)
    dev = {name.removeprefix("dev/"): float(value)
           for name, value in trainer.validate(module, datamodule=datamodule, verbose=False)[0].items()}
    model_dir = export_model(module, Path(cfg.paths.output_dir) / MODEL_DIR, data.name) \
        if trainer.is_global_zero else None
    results = {
        "task": data.name, "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path,
        "attention_window": cfg.finetune.attention_window, "attention_policy": module.window_policy,
        "isotropy_reg": cfg.finetune.isotropy_reg,
        "precision": str(trainer.precision), "devices": trainer.world_size, "labels": data.labels,
        "data_summary": datamodule.summary(), "data_skips": data.skips.as_dict(), "dev": dev,
        "best_epoch": best_epoch, "epochs_trained": trainer.current_epoch,
        "duration_s": round(time.time() - started, 2), "model_dir": str(model_dir), "config": config,
    }
    return results, trainer.is_global_zero


def usable_max_length(requested: int, module) -> int:
    """`task.max_length`, or the model's own limit on positions where that is smaller (with a warning)."""
    require_int("task.max_length", requested, minimum=3)
    limits = [module.tokenizer.model_max_length, getattr(module.encoder.config, "max_position_embeddings", requested)]
    usable = min(requested, *limits)
    if usable < requested:
        log.warning("task.max_length=%d is more than %s takes; using %d", requested, module.info.model_name, usable)
    return usable


def best_checkpoint(trainer: L.Trainer) -> ModelCheckpoint:
    """The callback that keeps the best dev epoch (`callbacks.best`, the first ModelCheckpoint with a monitor)."""
    for callback in trainer.callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.monitor:
            return callback
    raise ConfigError("no ModelCheckpoint monitors a dev metric: the best dev epoch is what train.py exports. "
                      "Fix: keep callbacks=finetune")


def resume_point(checkpoints: str | None, config: dict[str, Any], is_rank_zero: bool,
                 policy: str = "auto") -> str | None:
    """The checkpoint of an interrupted run of this same configuration to resume from (`policy`, see
    checkpoint_to_resume), verified against its recorded hash; None to train from the start. Checkpoints of another
    configuration are refused, never resumed or overwritten: the folder records the configuration its checkpoints
    belong to (config.json)."""
    if not checkpoints:
        return None
    folder = Path(checkpoints)
    recorded = folder / CHECKPOINT_CONFIG
    found = [folder / name for name in (BEST, LAST, STEP) if (folder / name).is_file()]
    if found and recorded.is_file() and json.loads(recorded.read_text(encoding="utf-8")) != config:
        raise ConfigError(f"{folder} holds the checkpoints of a run of another configuration. Fix: run into a new "
                          "folder (hydra.run.dir=...), or relaunch with the same settings to resume it")
    if is_rank_zero:
        folder.mkdir(parents=True, exist_ok=True)
        if policy == "restart":
            for path in found:
                path.unlink()
                hash_file(path).unlink(missing_ok=True)
        write_json_atomically(recorded, config)
    chosen = checkpoint_to_resume(folder, policy)
    if chosen is not None:
        log.info("resuming from %s", chosen)
    return chosen


def checkpoint_to_resume(folder: Path, policy: str) -> str | None:
    """auto: the newer of last.ckpt (epoch end) and step.ckpt (every few steps), if any; best: best.ckpt (the
    state at the end of the best dev epoch so far); restart: none."""
    if policy == "restart":
        return None
    if policy == "best":
        if not (folder / BEST).is_file():
            raise ConfigError(f"finetune.resume=best, but {folder} holds no {BEST} (no epoch of this run was "
                              "validated). Fix: finetune.resume=auto or finetune.resume=restart")
        return str(verify_checkpoint(folder / BEST))
    found = [folder / name for name in (LAST, STEP) if (folder / name).is_file()]
    if not found:
        return None
    newest = max(found, key=lambda path: path.stat().st_mtime_ns)
    fix = (f"relaunch with finetune.resume=best to resume from {BEST} (the end of the best dev epoch), or "
           "finetune.resume=restart to train from the start")
    return str(verify_checkpoint(newest, fix))


def format_scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in scores.items())
