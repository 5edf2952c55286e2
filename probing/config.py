"""Hydra/OmegaConf glue: custom resolvers used by the configs in conf/, and the config folder location."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def launch_dir() -> str:
    """The directory the command was started from (jobs never chdir: `hydra.job.chdir=false`)."""
    return os.getcwd()


def wandb_offline() -> bool:
    """W&B runs offline unless the user has a key in the environment or asked for online mode explicitly."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in {"online", "run"}:
        return False
    if mode in {"offline", "dryrun", "disabled"}:
        return True
    return not os.environ.get("WANDB_API_KEY")


def register_resolvers() -> None:
    for name, fn in {"launch_dir": launch_dir, "wandb_offline": wandb_offline}.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register_resolvers()
