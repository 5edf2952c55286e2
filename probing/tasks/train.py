"""train.py: fine-tune an encoder on a task, keep the best dev epoch, export it as a Hugging Face folder, write
results.json.

See docs/finetuning.md, 'Checkpoints and resuming' under 'What it does'.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf, open_dict

from probing.config import build, keyed_errors
from probing.data.settings import require_int
from probing.data.task_records import FINETUNING_KINDS
from probing.data.task_records import TASK_NAMES as FINETUNING_TASKS
from probing.errors import ConfigError
from probing.features.finetuned import MODEL_DIR
from probing.finetune.checkpoints import (
    ContinuedCSVLog,
    RandomStates,
    ResumePolicy,
    best_checkpoint,
    load_best_weights,
    run_identity,
)
from probing.finetune.datamodule import TaskDataModule, load_task_data
from probing.finetune.export import export_model
from probing.results.kinds import FinetuningResults
from probing.tasks.distributed import distributed_state_of_this_job, keep_ddp_processes_on_this_job
from probing.tasks.loggers import closing_loggers, name_the_run
from probing.tasks.results_file import running_job, write_results
from probing.tasks.settings import check_config, with_data_settings, with_run_folders
from probing.tasks.trainer import build_trainer

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Fine-tune, export the best dev model to <run>/model, write results.json (rank 0)."""
    check_config(cfg)
    with_run_folders(cfg)
    with_data_settings(cfg)
    check_finetuning_task(cfg.task)
    check_finetuned_weights(cfg.model)
    with_the_task_monitor(cfg)
    resume = ResumePolicy(cfg.finetune.get("resume", "auto"), name="finetune.resume")
    name_the_run(cfg, *run_name(cfg))
    with running_job(run_identity(cfg)) as (out, config, previous):
        if previous is not None:
            return previous
        require_int("trainer.max_epochs", cfg.trainer.get("max_epochs"), minimum=1)  # 0 would train nothing
        # 0 would save no step.ckpt (Lightning's "never"), and an interrupted run would resume from its last epoch's end
        require_int("finetune.checkpoint_every_n_steps", cfg.finetune.get("checkpoint_every_n_steps"), minimum=1)
        if "ddp" in str(cfg.trainer.get("strategy", "")):
            keep_ddp_processes_on_this_job()
        with closing_loggers(cfg.get("logger")) as loggers, distributed_state_of_this_job():
            results, is_rank_zero = finetune(cfg, config, resume, loggers)
        if is_rank_zero:
            results = write_results(out, results, FinetuningResults.KIND)
            log.info("%s: dev %s -> %s", cfg.task.name, format_scores(results["dev"]), out)
    return results


def run_name(cfg: DictConfig) -> tuple[str, str]:
    """The name and group of the run in W&B: model-task-seed<seed>, model-task."""
    group = f"{cfg.model.name}-{cfg.task.name}"
    return f"{group}-seed{cfg.seed}", group


def with_the_task_monitor(cfg: DictConfig) -> None:
    """What conf/ leaves null for train.py to fill from its one home before the config is recorded: the task's
    monitored dev metric (task.monitor) as the value returned to a sweeper (`optimized_metric`) and as the metric of
    the best checkpoint (`callbacks.<name>.monitor`), and finetune.checkpoint_every_n_steps as the step checkpoint's
    interval (`callbacks.<name>.every_n_train_steps`). A value set on the command line is kept."""
    homes = {"monitor": OmegaConf.select(cfg, "task.monitor"),
             "every_n_train_steps": OmegaConf.select(cfg, "finetune.checkpoint_every_n_steps")}
    with open_dict(cfg):
        cfg.optimized_metric = homes["monitor"] if cfg.get("optimized_metric") is None else cfg.optimized_metric
    for node in (cfg.get("callbacks") or {}).values():
        if isinstance(node, DictConfig):
            with open_dict(node):
                for key in [key for key in homes if key in node and node[key] is None]:
                    node[key] = homes[key]


def check_finetuning_task(task: DictConfig) -> None:
    """A probing-only task (the s-class task, word-pair and FEATS tasks) is refused with the fix."""
    if task.get("kind") not in FINETUNING_KINDS:
        raise ConfigError(f"task={task.name} is a probing task (python probe.py task={task.name}); train.py fine-tunes "
                          f"on a tagging or sentence task. Fix: task={', '.join(FINETUNING_TASKS)}")


def check_finetuned_weights(model: DictConfig) -> None:
    """train.py reads a model folder or hub name in float32 on the trainer's devices (its precision is
    trainer.precision): a GGUF file, another weights dtype or a device map would not be honoured, so each is
    refused."""
    if model.get("gguf_file"):
        raise ConfigError(f"model={model.name} is a GGUF file, which train.py does not fine-tune. Fix: point "
                          "model.name_or_path at its converted folder (under model.cache_dir, written by any "
                          "probe.py or extract.py run of it) and set model.gguf_file=null")
    if model.get("dtype") not in (None, "fp32") or model.get("device_map") is not None:
        raise ConfigError(f"model.dtype={model.get('dtype')}, model.device_map={model.get('device_map')}: train.py "
                          "loads the weights in float32 and places them by the trainer. Fix: model.dtype=fp32 "
                          "model.device_map=null, and trainer.precision=bf16-mixed for bf16")


# The settings of `finetune` that its module takes (the others are the run's: checkpoints, resume).
MODULE_SETTINGS = ("attention_window", "attention_policy", "isotropy_reg", "isotropy_on_context")


def finetune(cfg: DictConfig, config: dict[str, Any], resume: ResumePolicy,
             loggers: list[Logger]) -> tuple[dict[str, Any], bool]:
    started = time.time()
    L.seed_everything(cfg.seed, workers=True)
    with keyed_errors(cfg.data.source, "data.source"):  # what the source refuses while it reads
        data = load_task_data(build(cfg.data.source, "data.source"), cfg.task.name)
    module = build(cfg.finetune.module, "finetune.module", name_or_path=cfg.model.name_or_path,
                   revision=cfg.model.revision, metric=cfg.task.metric,
                   **{key: cfg.finetune[key] for key in MODULE_SETTINGS},
                   settings_from={"name_or_path": "model.name_or_path", "revision": "model.revision",
                                  "metric": "task.metric", **{key: f"finetune.{key}" for key in MODULE_SETTINGS}})
    module = module(labels=data.labels, kind="token" if data.token_level else "sentence")
    with keyed_errors(cfg.task, "task"):  # the datamodule's settings are the task's
        datamodule = TaskDataModule(data, module.tokenizer, max_length=cfg.task.max_length,
                                    batch_size=cfg.task.batch_size, seed=cfg.seed, max_positions=module.max_positions)
    csv_log = ContinuedCSVLog(loggers)  # before anything opens the CSV log, which Lightning would empty
    trainer = build_trainer(cfg, extra_callbacks=[RandomStates(), csv_log], loggers=loggers)
    best = best_checkpoint(trainer)
    for logger in trainer.loggers:
        logger.log_hyperparams(config)
    start = resume.checkpoint(best.dirpath, config, trainer.is_global_zero)
    with keyed_errors(cfg.task, "task"):  # a batch that the processes cannot share is refused once they are known
        trainer.fit(module, datamodule=datamodule, ckpt_path=start, weights_only=True)
    trainer.strategy.barrier("best checkpoint hashed")
    best_epoch = load_best_weights(module, best, resume.restart)
    dev = {name.removeprefix("dev/"): float(value)
           for name, value in trainer.validate(module, datamodule=datamodule, verbose=False)[0].items()}
    model_dir = export_model(module, Path(cfg.paths.output_dir) / MODEL_DIR, data.name) \
        if trainer.is_global_zero else None
    results = {
        "task": data.name, "model": cfg.model.name, "model_name_or_path": cfg.model.name_or_path,
        "attention_window": module.attention_window, "attention_policy": module.window_policy,
        "isotropy_reg": module.hparams.isotropy_reg,
        "precision": str(trainer.precision), "devices": trainer.world_size, "labels": data.labels,
        "data_summary": datamodule.summary(), "data_skips": data.skips.as_dict(), "dev": dev,
        "best_epoch": best_epoch, "epochs_trained": trainer.current_epoch,
        "duration_s": round(time.time() - started, 2), "model_dir": str(model_dir), "config": config,
    }
    return results, trainer.is_global_zero


def format_scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in scores.items())
