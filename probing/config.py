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


def layer_list(num_layers: int, *extra: str) -> str:
    """A sweep over every layer of a model and more: `${layers:7,mix}` -> "0,1,2,3,4,5,6,mix"
    (experiment presets sweep the layers of whichever model is chosen, `model.num_layers`)."""
    return ",".join([str(layer) for layer in range(int(num_layers))] + [str(item) for item in extra])


def register_resolvers() -> None:
    resolvers = {"launch_dir": launch_dir, "wandb_offline": wandb_offline, "layers": layer_list}
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register_resolvers()
