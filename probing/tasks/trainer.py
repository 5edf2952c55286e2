"""The job's Lightning Trainer with its callbacks, and the checks of the trainer settings that this machine must be
able to start (devices, precision) before any work."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf

from probing.config import build
from probing.data.settings import require_int, require_number
from probing.devices import has_native_bf16
from probing.errors import ConfigError

log = logging.getLogger(__name__)


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


@functools.cache  # once per process (a sweep's jobs in one process share it)
def note_precision(precision: str, device: torch.device) -> None:
    """What the probes' training at `precision` on `device` costs here (probe.py, once its Trainer is built): bf16
    training on a device without bf16 arithmetic units is correct but emulated, many times slower than
    float32 (on CPU: no AVX-512 BF16 or AMX): a warning. float32 on a CPU with them: a one-line hint, as bf16-mixed
    trains the default probe run 2.3 times as fast there at the same F1 within the seeds' spread (bench/probe_run.py).
    It stays opt-in so that a command gives the same numbers on every machine (a default that followed the hardware
    would make a laptop's table differ from a cluster's)."""
    if precision.startswith("bf16") and not has_native_bf16(device):
        log.warning("trainer.precision=%s: this %s has no bf16 arithmetic units, so bf16 is emulated and slower than "
                    "float32 here (the scores are unaffected). Fix: trainer.precision=32-true on this machine",
                    precision, device.type)
    elif precision.startswith("32") and device.type == "cpu" and has_native_bf16(device):
        log.info("this CPU has bf16 units: trainer.precision=bf16-mixed trains the probes about twice as fast")
