"""What the jobs share: checking the composed config, the settings of the feature stores, the Trainer and
its loggers (closed however the job ends), the run folder (one job at a time) and results.json (written atomically; a
finished job is not run again, also when its folder was moved since, unless its data or model changed since, and
never overwritten by another configuration)."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import socket
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.loggers import Logger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from probing.cli import process_rank
from probing.config import build, same_run, wandb_online_asked
from probing.data.files import write_json_atomically
from probing.data.settings import choose, require_int, require_number
from probing.data.task_records import TASK_KINDS
from probing.data.text import data_files_read, forget_data_files, sha256_file
from probing.errors import ConfigError
from probing.features.encoder import forget_local_models, local_models_loaded, local_weights_sha256
from probing.features.provision import lock_wait_seconds
from probing.locks import holding, open_lock_file
from probing.report.aggregate import RESULTS_FILE, json_type
from probing.results import migrated, stamped

log = logging.getLogger(__name__)

# What Lightning's DDP launcher writes into the launching process's environment.
DDP_ENVIRONMENT = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
WANDB_SERVER = "https://api.wandb.ai"  # wandb's default base URL (WANDB_BASE_URL changes it)
RUN_LOCK = "job.lock"  # in the run folder, held by the job running there (`run_folder_lock`)
WANDB_CONNECT_TIMEOUT_S = 3.0  # how long a run waits to learn that the W&B server cannot be reached


def check_config(cfg: DictConfig) -> None:
    """Refuse what Hydra lets through: a seed that is not an integer, a token budget of the stores' extraction below
    one (every input would be a batch of its own), a task of a kind no job knows. (A top-level key that the config
    does not have, such as `+laeyr=3`, is refused by the command-line check, `probing.cli`.)"""
    if "seed" in cfg:
        require_int("seed", cfg.seed)
    if "max_tokens_per_batch" in (cfg.get("features") or {}):
        require_int("features.max_tokens_per_batch", cfg.features.max_tokens_per_batch, minimum=1)
    if cfg.get("task") is not None and cfg.task.get("kind") is not None:
        choose("task.kind", cfg.task.kind, TASK_KINDS)


def store_settings(features: DictConfig) -> dict[str, Any]:
    """The keyword arguments of `probing.features.provision.ensure_features` that `features` sets: where the stores
    live, their dtype, the token budget of a batch, and how long to wait for another run extracting into a store."""
    return {"store_dir": features.store_dir, "dtype": features.dtype,
            "max_tokens_per_batch": features.max_tokens_per_batch,
            "lock_wait_s": lock_wait_seconds(features.get("lock_wait_s"), in_multirun())}


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def build_trainer(cfg: DictConfig, extra_callbacks: Iterable[L.Callback] = (), *,
                  loggers: Sequence[Logger]) -> L.Trainer:
    """The Trainer of `trainer`, with the callbacks of `callbacks` (then `extra_callbacks`) and the job's `loggers`
    (those `closing_loggers` built and closes)."""
    check_devices(cfg.trainer)
    callbacks = [built_callback(name, node) for name, node in (cfg.get("callbacks") or {}).items()]
    return build(cfg.trainer, "trainer", callbacks=[*callbacks, *extra_callbacks], logger=list(loggers) or False)


def built_callback(name: str, node: DictConfig) -> L.Callback:
    """The callback of `callbacks.<name>`; an early stop's patience and min_delta are checked here, as Lightning
    compares them only once an epoch fails to improve."""
    callback = build(node, f"callbacks.{name}")
    if isinstance(callback, EarlyStopping):
        require_int(f"callbacks.{name}.patience", node.get("patience", callback.patience), minimum=0)
        require_number(f"callbacks.{name}.min_delta", node.get("min_delta", 0.0), example="1e-4")
    return callback


def build_loggers(logger: DictConfig | None) -> list[Logger]:
    """The Lightning loggers of `logger` (one per entry; none for null or {})."""
    loggers = [build(node, f"logger.{name}") for name, node in (logger or {}).items()]
    for built in loggers:
        if isinstance(built, WandbLogger):
            without_unset_anonymous(built)
            offline_when_unreachable(built)
    return loggers


def offline_when_unreachable(logger: WandbLogger) -> None:
    """A W&B logger about to log online, checked against the server first, so that a run on a machine without network
    neither waits for wandb's own time-out (about two minutes) nor dies after it. Online because the user asked
    (WANDB_MODE=online): the unreachable server is a ConfigError. Online only because a key is set: the run logs
    offline instead (`wandb sync` uploads it later), with a warning."""
    if logger._offline:
        return
    problem = wandb_server_problem(os.environ.get("WANDB_BASE_URL") or WANDB_SERVER)
    if problem is None:
        return
    if wandb_online_asked():
        raise ConfigError(f"WANDB_MODE=online, but the W&B server cannot be reached ({problem}). Fix: WANDB_MODE="
                          "offline (upload the run later with `wandb sync`), or logger=csv")
    log.warning("WANDB_API_KEY is set, but the W&B server cannot be reached (%s): this run logs to W&B offline, into "
                "its folder (upload it later with `wandb sync`). WANDB_MODE=offline skips this check, "
                "WANDB_MODE=online makes an unreachable server an error", problem)
    logger._offline = True


@functools.lru_cache(maxsize=8)
def wandb_server_problem(base_url: str) -> str | None:
    """Why the W&B server at `base_url` (or the HTTPS/HTTP proxy the environment names for it) cannot be reached: a
    TCP connection tried for WANDB_CONNECT_TIMEOUT_S; None when it connects. Checked once per process and URL (the
    jobs of a sweep share the answer)."""
    url = urllib.parse.urlsplit(base_url)
    proxy = urllib.request.getproxies().get(url.scheme or "https")
    target = urllib.parse.urlsplit(proxy) if proxy and not urllib.request.proxy_bypass(url.hostname or "") else url
    host, port = target.hostname, target.port or (80 if target.scheme == "http" else 443)
    if not host:
        return f"{base_url} names no host"
    try:
        socket.create_connection((host, port), timeout=WANDB_CONNECT_TIMEOUT_S).close()
    except OSError as error:
        via = f" through the proxy {host}:{port}" if target is not url else f" at {host}:{port}"
        return f"no connection{via}: {error.strerror or error}"
    return None


def without_unset_anonymous(logger: WandbLogger) -> None:
    """Leave wandb's deprecated `anonymous` setting out of `wandb.init` when nobody set it: Lightning's WandbLogger
    passes `anonymous=None` always, and wandb (since it deprecated the setting) then warns on every run."""
    if getattr(logger, "_wandb_init", {}).get("anonymous", "set") is None:
        del logger._wandb_init["anonymous"]


def devices_asked(devices: Any, on_gpu: bool, available: int) -> int:
    """How many devices `trainer.devices` asks for, in the forms Lightning takes: a count N >= 1 or "auto", and on
    GPUs also -1 (every GPU) or GPU indices ([0,2], "0,2"). Anything else (0, -1 on the CPU, "abc") is a ConfigError
    here rather than a traceback from Lightning."""
    if devices == "auto" or (on_gpu and str(devices).strip() == "-1"):
        return available
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1:
        return devices
    indices = gpu_indices(devices) if on_gpu else None
    if indices:
        return max(indices) + 1
    forms = (f"a number of GPUs from 1 to {available}, -1 for all of them, or GPU indices such as [0,1]" if on_gpu
             else f"a number of processes from 1 to {available} (this run is on the CPU)")
    raise ConfigError(f"trainer.devices={devices} is not a number of devices Lightning can start. Fix: "
                      f"trainer.devices=N, {forms}")


def gpu_indices(devices: Any) -> list[int] | None:
    """The GPU indices of a list ([0, 2]) or of a comma-separated string ("0,2"); None for anything else."""
    if isinstance(devices, str):
        parts = [part.strip() for part in devices.split(",") if part.strip()]
    elif isinstance(devices, list) or OmegaConf.is_list(devices):
        parts = [str(part) if isinstance(part, int) and not isinstance(part, bool) else "-" for part in devices]
    else:
        return None
    return [int(part) for part in parts] if parts and all(part.isdigit() for part in parts) else None


def check_trainer(trainer: DictConfig) -> None:
    """Refuse, before any work, a Trainer that would train nothing (max_epochs 0 would score untrained weights) or
    that this machine cannot start (`check_devices`)."""
    require_int("trainer.max_epochs", trainer.get("max_epochs"), minimum=1)
    check_devices(trainer)


def check_devices(trainer: DictConfig) -> None:
    """Refuse what Lightning would start anyway or quietly change: more devices than there are, and float16 on a
    CPU (Lightning would switch it to bf16 with a warning)."""
    accelerator = str(trainer.get("accelerator", "auto"))
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    available = torch.cuda.device_count() if on_gpu else os.cpu_count() or 1
    devices = trainer.get("devices", 1)
    where = "GPUs" if on_gpu else "CPU cores"
    if on_gpu and available == 0:
        build = "" if torch.version.cuda else " (this torch is a CPU-only build)"
        raise ConfigError(f"trainer.accelerator={accelerator} asks for a GPU, but torch sees none on this "
                          f"machine{build}. Fix: trainer=cpu, or run on a machine with a CUDA GPU")
    if devices_asked(devices, on_gpu, available) > available:
        raise ConfigError(f"trainer.devices={devices}, but this machine has {available} {where}. Fix: "
                          f"trainer.devices={available} or fewer")
    precision = str(trainer.get("precision", "32-true"))
    if not on_gpu and precision in ("16", "16-mixed", "16-true"):
        raise ConfigError(f"trainer.precision={precision} needs a GPU; this run is on the CPU. Fix: "
                          "trainer.precision=bf16-mixed (fast on CPUs with bf16 units) or 32-true")


def keep_ddp_processes_on_this_job() -> None:
    """Lightning's DDP launcher starts the other processes with this process's command line (sys.argv) and Hydra's
    `hydra.run.dir`. In a multirun job that command is the whole sweep, which every child would run again: point
    both at this job (its overrides, its folder, a single run) before Lightning starts them."""
    if not in_multirun():
        return
    hydra_cfg = HydraConfig.instance().cfg.hydra
    sys.argv = [sys.argv[0], *hydra_cfg.overrides.task, "hydra.mode=RUN"]
    OmegaConf.set_readonly(hydra_cfg, False)
    hydra_cfg.run.dir = hydra_cfg.runtime.output_dir
    OmegaConf.set_readonly(hydra_cfg, True)


@contextlib.contextmanager
def distributed_state_of_this_job() -> Iterator[None]:
    """Leave no DDP state behind for the next job of a multirun, which runs in the same process: Lightning's launcher
    sets the rendezvous variables in this process's environment (the next job would take itself for a child started
    by someone else) and the process group stays open (with peers that have exited)."""
    saved = {name: os.environ.get(name) for name in DDP_ENVIRONMENT}
    try:
        yield
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def finished_results(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The results.json at `path` if an earlier job wrote it for exactly this configuration, wherever its folder
    was then (a run or sweep folder moved and relaunched into its new place is still finished: see
    `probing.config.location_free`), read as the current schema version holds it (`probing.results.migrated`: results
    written before the schema); None if there is none (or a damaged one, which is run again). Results of another
    configuration, and a file that holds no run's results, are never overwritten: refused."""
    if not path.is_file():
        return None
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        log.warning("%s is damaged (its job was stopped while writing it); running the job again", path)
        return None
    if not isinstance(previous, dict):
        raise ConfigError(f"{path} holds {json_type(previous)}, not the results of a run, and this job would "
                          "overwrite it. Fix: run into a new folder (hydra.run.dir=... or hydra.sweep.dir=...), "
                          "or delete that results.json")
    if same_run(previous.get("config"), config):
        check_inputs_unchanged(path, previous)
        return migrated(previous)
    raise ConfigError(f"{path} holds the results of another configuration, which this job would overwrite. Fix: run "
                      "into a new folder (hydra.run.dir=... or hydra.sweep.dir=...), or delete that results.json")


def check_inputs_unchanged(path: Path, previous: dict[str, Any]) -> None:
    """The data files and local model folders that the results at `path` were computed from (`data_files`: [file,
    SHA-256] pairs; `model_weights`: [folder, weights_sha256] pairs), as they are now: a file changed since (a task's
    JSONL edited in place, a model's weights or task.json replaced) would have the job return results of other inputs.
    One no longer there is not checked (a run folder moved with its data refers to the old place)."""
    for file, digest in recorded_pairs(previous.get("data_files")):
        if Path(file).is_file() and sha256_file(file) != digest:
            raise ConfigError(changed_since(path, file, "that file has changed since"))
    for folder, digest in recorded_pairs(previous.get("model_weights")):
        if Path(folder).is_dir() and local_weights_sha256(folder) != digest:
            raise ConfigError(changed_since(path, f"the model {folder}", "its weights have changed since"))


def recorded_pairs(entries: Any) -> list[list[str]]:
    """The [name, SHA-256] pairs of a results.json entry; anything else in it is left unchecked."""
    return [entry for entry in entries if isinstance(entry, list) and len(entry) == 2
            and all(isinstance(part, str) for part in entry)] if isinstance(entries, list) else []


def changed_since(path: Path, source: str, change: str) -> str:
    return (f"{path} holds the results of this configuration computed from {source} as it was then, and {change}. "
            "Fix: run into a new folder (hydra.run.dir=... or hydra.sweep.dir=...), or delete the run folder "
            f"{path.parent} to run it again")


def write_results(out: Path, results: dict[str, Any], kind: str) -> dict[str, Any]:
    """results.json of a job, its results of `kind` stamped with the schema version, the job and the kind and checked
    against the kind's schema (`probing.results.stamped`), with `data_files`: every data file the job read and its
    SHA-256, and `model_weights`: every local model folder it loaded and its weights_sha256 (checked by
    `check_inputs_unchanged` before the results are returned again). Strict JSON: a number that is not finite (NaN,
    which JSON has no word for) is recorded as null, with a warning in the log and in the results' warnings. Returns
    what was written."""
    results["data_files"] = [[file, sha256_file(file)] for file in data_files_read() if Path(file).is_file()]
    results["model_weights"] = local_models_loaded()
    for name in nulled_non_finite(results):
        warning = f"`{name}` was not a finite number: recorded as null"
        log.warning("%s", warning)
        results.setdefault("warnings", []).append(warning)
    record = stamped(results, kind)
    write_json_atomically(out, record)
    return record


@contextlib.contextmanager
def running_job(cfg: DictConfig) -> Iterator[tuple[Path, dict[str, Any], dict[str, Any] | None]]:
    """`job_state`, with the run folder locked for the whole job (`run_folder_lock`)."""
    with run_folder_lock(Path(cfg.paths.output_dir)):
        yield job_state(cfg)


@contextlib.contextmanager
def run_folder_lock(folder: Path) -> Iterator[None]:
    """Hold `<folder>/job.lock` (a `probing.locks` lock) while the job runs: a second launch into the folder is
    refused before it does anything (it would train beside the first, then fail in the CSV log that the first is
    writing, which loses rows). The other processes of a DDP job take none: the lock of rank 0 covers them."""
    if process_rank() != 0:
        yield
        return

    def refused(holder: str) -> ConfigError:
        return ConfigError(f"{folder}: another job (pid {holder}) is running in this run folder. Fix: wait for it "
                           "to finish (a relaunch then skips or resumes it), or run into a new folder "
                           "(hydra.run.dir=... or hydra.sweep.dir=...)")

    with holding(open_lock_file(folder / RUN_LOCK), refused):
        yield


def nulled_non_finite(value: Any, where: str = "") -> list[str]:
    """Replace, in place, every float of `value` (nested dicts and lists) that is not finite by None; the names of
    those replaced ("test.uuas", "mix_weights[2]")."""
    if isinstance(value, dict):
        items = [(key, f"{where}.{key}" if where else str(key)) for key in value]
    elif isinstance(value, list):
        items = [(index, f"{where}[{index}]") for index in range(len(value))]
    else:
        return []
    replaced = []
    for key, name in items:
        if isinstance(value[key], float) and not math.isfinite(value[key]):
            value[key] = None
            replaced.append(name)
        else:
            replaced += nulled_non_finite(value[key], name)
    return replaced


def job_state(cfg: DictConfig) -> tuple[Path, dict[str, Any], dict[str, Any] | None]:
    """(where the job's results.json goes, the resolved config, the results of an earlier job of this same
    configuration there or None, also when the folder was moved since); a finished job is not run again."""
    forget_data_files()  # the jobs of a multirun share one process: this job's inputs are recorded from here
    forget_local_models()
    out = Path(cfg.paths.output_dir) / RESULTS_FILE
    config = OmegaConf.to_container(cfg, resolve=True)
    previous = finished_results(out, config)
    if previous is not None:
        log.info("%s already holds the results of this configuration; not running it again (delete it to rerun)", out)
    return out, config, previous





@contextlib.contextmanager
def closing_loggers(logger: DictConfig | None) -> Iterator[list[Logger]]:
    """The job's loggers, built once from `logger` (the job hands them to `build_trainer`, or logs through them
    itself), and closed in `finally` however the job ends: each logger finalized ("success", or "failed" when the
    job raised), then the W&B run finished, so that a failed job of a sweep does not leave its run open for the next
    job to log into (W&B keeps one run per process). A logger that fails to close does not keep the others open."""
    loggers = build_loggers(logger)
    failed = True
    try:
        yield loggers
        failed = False
    finally:
        close_loggers(loggers, failed)


def close_loggers(loggers: Iterable[Logger], failed: bool) -> None:
    """Finalize each logger, then finish the W&B run of this process; the first error of a logger is raised at the
    end, unless the job already failed (its own error is the one to see)."""
    errors = []
    for each in loggers:
        try:
            each.finalize("failed" if failed else "success")
        except Exception as error:  # the other loggers must still be closed
            log.warning("logger %s did not close: %s", type(each).__name__, error)
            errors.append(error)
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=1 if failed else 0)
    if errors and not failed:
        raise errors[0]


def optimized_value(results: dict[str, Any], metric: str) -> float:
    """The `optimized_metric` ("dev/micro_f1", "test/selectivity", "dev/accuracy", ...) of a run's results, for a Hydra
    sweeper; NaN where the run recorded that score as undefined (null: its warnings say why)."""
    split, _, name = str(metric).partition("/")
    block = results.get(split)
    if isinstance(block, dict) and name in block and block[name] is None:
        return math.nan
    value = block.get(name) if isinstance(block, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"optimized_metric={metric} is not a score of this run. Fix: <split>/<score>, e.g. "
                          "dev/micro_f1 or dev/selectivity for probe.py (the control task must be on for selectivity), "
                          "the task's monitor (task.monitor) for train.py")
    return float(value)


def summarise_in_wandb(loggers: Iterable[Logger], summary: dict[str, Any]) -> None:
    """Put a run's final values in the summary of its W&B run (the run is finished by `closing_loggers`)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.summary.update(summary)
