"""Hydra/OmegaConf glue: building objects from `_target_` configs, and custom resolvers used by the configs in conf/
(where the configs are is the entry scripts' business: they hand it to Hydra)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from probing.errors import ConfigError, ProbingError


def build(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate(node, **kwargs)` (plain containers for the arguments), with the errors a user can fix
    kept as they are: Hydra wraps whatever a constructor raises, which would turn a one-line ProbingError into a
    traceback. Any other failure to build is a ConfigError naming the config key `key`."""
    try:
        return instantiate(node, _convert_="all", **kwargs)
    except InstantiationException as error:
        cause = error.__cause__
        while isinstance(cause, InstantiationException):
            cause = cause.__cause__
        if isinstance(cause, ProbingError):
            raise cause from None
        first_line = str(cause or error).strip().splitlines()[-1]
        raise ConfigError(f"{key}: cannot be built ({first_line}). Fix: check the values under `{key}` "
                          "(python probe.py --cfg job shows the composed config)") from error


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


SHORT_OVERRIDE = 32  # characters of an override that a shortened job folder name keeps whole


def job_dir_name(overrides: str, max_length: int = 100) -> str:
    """A sweep job's folder, named after its overrides (`hydra.job.override_dirname`, e.g. "layer=3,seed=1"), so that
    a relaunched sweep finds each configuration's results where it left them; characters that are unsafe in a folder
    name become "_". A name over `max_length` keeps its short overrides ("layer=3", not the file lists beside it) and
    is tagged with a hash of the whole, which keeps the folders of different configurations apart."""
    name = folder_safe(overrides) or "defaults"
    if len(name) <= max_length:
        return name
    tag = hashlib.sha256(overrides.encode()).hexdigest()[:10]
    short = folder_safe(",".join(item for item in override_items(overrides) if len(item) <= SHORT_OVERRIDE))
    return f"{short[:max_length - 11]}-{tag}" if short else tag


def folder_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", text)


def override_items(overrides: str) -> list[str]:
    """The overrides of an override_dirname, split at the commas outside brackets (`paths=[a,b],layer=3`)."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(overrides):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(overrides[start:index])
            start = index + 1
    return [*items, overrides[start:]]


def register_resolvers(**extra: Callable[..., Any]) -> None:
    """Register the resolvers of the configs in conf/: this module's own, and `extra` (resolvers made of a lower
    layer's code, registered by the package that imports it: `probing.tasks` registers the fine-tuned comparison's)."""
    resolvers = {"launch_dir": launch_dir, "wandb_offline": wandb_offline, "layers": layer_list,
                 "job_dir": job_dir_name, **extra}
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register_resolvers()
