"""What a job checks of its composed config before any work (what Hydra lets through), and the settings of the
feature stores that a job hands to probing.features.provision."""

from __future__ import annotations

from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from probing.config import keyed_errors
from probing.data.settings import choose, require_int
from probing.data.task_records import TASK_KINDS
from probing.errors import ConfigError
from probing.features.provision import lock_wait_seconds

MAX_SEED = 2**32 - 1  # numpy's (Lightning's seed_everything seeds it)


def check_config(cfg: DictConfig) -> None:
    """Refuse what Hydra lets through: a seed that is not an integer numpy takes, a token budget of the stores'
    extraction below one (every input would be a batch of its own), a task of a kind no job knows. (A top-level key
    that the config does not have, such as `+laeyr=3`, is refused by the command-line check, `probing.cli`.)"""
    if "seed" in cfg and require_int("seed", cfg.seed) not in range(MAX_SEED + 1):
        raise ConfigError(f"seed={cfg.seed} is outside 0..{MAX_SEED}, the seeds numpy takes. Fix: seed= an integer in "
                          "that range")
    if "max_tokens_per_batch" in (cfg.get("features") or {}):
        require_int("features.max_tokens_per_batch", cfg.features.max_tokens_per_batch, minimum=1)
    if cfg.get("task") is not None and cfg.task.get("kind") is not None:
        choose("task.kind", cfg.task.kind, TASK_KINDS)


def with_run_folders(cfg: DictConfig) -> DictConfig:
    """`cfg` with the folders that conf/ leaves null filled from their one home, `paths`, before the job records its
    config: the stores' (`features.store_dir`:
    paths.store_dir) and the run folder's (paths.output_dir), where the Trainer (`trainer.default_root_dir`) and the
    loggers (`logger.<name>.save_dir`) write, and the checkpoints (`callbacks.<name>.dirpath`: <run>/checkpoints).
    A folder set on the command line is kept."""
    # interpolations, resolved where they are read: the run folder is Hydra's, known only once the job runs
    filled = [(cfg.get("features"), "store_dir", "${paths.store_dir}"),
              (cfg.get("trainer"), "default_root_dir", "${paths.output_dir}"),
              *((node, "save_dir", "${paths.output_dir}") for node in (cfg.get("logger") or {}).values()),
              *((node, "dirpath", "${paths.output_dir}/checkpoints") for node in (cfg.get("callbacks") or {}).values())]
    for node, key, home in filled:
        if isinstance(node, DictConfig) and key in node and node[key] is None:
            with open_dict(node):
                node[key] = home
    return cfg


def with_data_settings(cfg: DictConfig) -> DictConfig:
    """`cfg` with the settings of the data source (`data.source`) that conf/ leaves null filled from the data's
    settings of the same name, their one home (`data.data_dir`, `data.split`, `data.corpus`, ...: what users set on
    the command line), before the job builds the source and records its config."""
    data = cfg.get("data")
    source = data.get("source") if isinstance(data, DictConfig) else None
    if isinstance(source, DictConfig):
        with open_dict(source):
            for key in [key for key in source if key in data and key != "source" and source[key] is None]:
                source[key] = f"${{data.{key}}}"  # its errors then name data.<key>, where the user sets it
    return cfg


def store_settings(features: DictConfig) -> dict[str, Any]:
    """The keyword arguments of `probing.features.provision.ensure_features` that `features` sets: where the stores
    live, their dtype, the token budget of a batch, and how long to wait for another run extracting into a store."""
    with keyed_errors(features, "features"):
        lock_wait_s = lock_wait_seconds(features.get("lock_wait_s"), in_multirun())
    return {"store_dir": features.store_dir, "dtype": features.dtype,
            "max_tokens_per_batch": features.max_tokens_per_batch, "lock_wait_s": lock_wait_s}


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
