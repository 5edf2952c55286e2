"""The check of `hydra/launcher=` on the command line: a launcher of Hydra's own, of the app's configs, or a plugin
known here that is installed."""

from __future__ import annotations

import importlib.util

from hydra.core.object_type import ObjectType

from probing.cli.compose import app_config_loader
from probing.errors import ConfigError

# Hydra's launcher plugins (hydra/launcher=<name>): the module that registers each and the package that installs it.
LAUNCHER_PLUGINS = {
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "'probing[cluster]' (hydra-submitit-launcher)"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "'probing[cluster]' (hydra-submitit-launcher)"),
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    "ray": ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"),
    "ray_aws": ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"),
    "rq": ("hydra_plugins.hydra_rq_launcher", "hydra-rq-launcher"),
}


def check_launcher(arguments: list[str], config_path: str) -> None:
    """Refuse a launcher that is neither Hydra's own (basic), nor a config of the app (`config_path`, e.g.
    slurm_gpu), nor a plugin known here; and a known plugin that is not installed."""
    for argument in arguments:
        key, _, name = argument.partition("=")
        if key.lstrip("+~") != "hydra/launcher" or name == "basic" or name in own_launcher_configs(config_path):
            continue
        if name not in LAUNCHER_PLUGINS:
            raise ConfigError(f"hydra/launcher={name} is no launcher known here. Fix: one of basic, "
                              f"{', '.join(LAUNCHER_PLUGINS)} (with its plugin installed)")
        module, package = LAUNCHER_PLUGINS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"hydra/launcher={name} needs a Hydra launcher plugin that is not installed. Fix: pip "
                              f"install {package}, or leave out hydra/launcher (jobs then run one after another)")


APP_CONFIG_SOURCE = "main"  # the provider name that Hydra gives the app's own config source (config_path)


def own_launcher_configs(config_path: str) -> list[str]:
    """The launcher configs (hydra/launcher/<name>) of the app whose configs are at `config_path` (a folder or a
    package): those of its own config source, not those that Hydra or its plugins bring."""
    with app_config_loader(config_path) as loader:
        return sorted({name for source in loader.get_sources() if source.provider == APP_CONFIG_SOURCE
                       and source.is_group("hydra/launcher")
                       for name in source.list("hydra/launcher", ObjectType.CONFIG)})
