"""What a job checks of its composed config before any work (what Hydra lets through), and the settings of the
feature stores that a job hands to probing.features.provision."""

from __future__ import annotations

from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from probing.data.settings import choose, require_int
from probing.data.task_records import TASK_KINDS
from probing.features.provision import lock_wait_seconds


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
