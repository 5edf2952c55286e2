"""What every entry script shares: user errors printed as one clear message (no traceback), and logging.

Logging scheme: every module logs to `logging.getLogger(__name__)`, so all of it sits under the `probing` logger
(Hydra's job logging prints it and writes it to the run folder). In a multi-process run (DDP) only the process of
rank 0 logs below warnings: the other ranks would repeat every line.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from hydra.experimental.callback import Callback
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from probing.config import CONFIG_DIR
from probing.errors import ConfigError, ProbingError

# Library noise that says nothing about the run: a deprecation inside Lightning's own code.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


# Hydra's launcher plugins (hydra/launcher=<name>): the module that registers each and the package that installs it.
LAUNCHER_PLUGINS = {
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "'probing[cluster]' (hydra-submitit-launcher)"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "'probing[cluster]' (hydra-submitit-launcher)"),
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    "ray": ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"),
    "ray_aws": ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"),
    "rq": ("hydra_plugins.hydra_rq_launcher", "hydra-rq-launcher"),
}


def launcher_installed(main: Callable) -> Callable:
    """Run the Hydra app `main` after checking that a launcher named on the command line (hydra/launcher=<name>) is
    installed: without its plugin Hydra would fail with a page of "Could not find" instead of one `error:` line."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            check_launcher(sys.argv[1:])
        except ProbingError as error:
            exit_with(error)
        return main(*args, **kwargs)

    return wrapper


def check_launcher(arguments: list[str]) -> None:
    for argument in arguments:
        key, _, name = argument.partition("=")
        if key.lstrip("+~") != "hydra/launcher" or name == "basic" or _own_launcher_config(name):
            continue
        if name not in LAUNCHER_PLUGINS:
            raise ConfigError(f"hydra/launcher={name} is no launcher known here. Fix: one of basic, "
                              f"{', '.join(LAUNCHER_PLUGINS)} (with its plugin installed)")
        module, package = LAUNCHER_PLUGINS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"hydra/launcher={name} needs a Hydra launcher plugin that is not installed. Fix: pip "
                              f"install {package}, or leave out hydra/launcher (jobs then run one after another)")


def _own_launcher_config(name: str) -> bool:
    return (Path(CONFIG_DIR) / "hydra" / "launcher" / f"{name}.yaml").is_file()


def user_errors_exit_cleanly(main: Callable) -> Callable:
    """Run `main`; a ProbingError becomes its message on stderr and exit status 2 (bugs keep their traceback), also
    when a config resolver raised it (OmegaConf wraps it)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        quiet_on_other_ranks()
        try:
            return main(*args, **kwargs)
        except ProbingError as error:
            exit_with(error)
        except OmegaConfBaseException as error:
            cause = probing_cause(error)
            if cause is None:
                raise
            exit_with(cause)

    return wrapper


def probing_cause(error: BaseException) -> ProbingError | None:
    """The ProbingError behind an error that OmegaConf raised while resolving a config (a resolver raised it)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ProbingError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def exit_with(error: ProbingError) -> NoReturn:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


class SweepCheck(Callback):
    """Hydra callback: resolve the sweep's axes before the first job, so that a ProbingError raised by a resolver
    there (e.g. `finetuned=` naming a folder without a fine-tuned model) is one `error:` line and exit status 2 rather
    than Hydra's report of an interpolation failure. (SystemExit passes through Hydra's error handler.)"""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        try:
            OmegaConf.to_container(config.hydra.sweeper.get("params") or {}, resolve=True)
        except OmegaConfBaseException as error:
            cause = probing_cause(error)
            if cause is None:
                raise
            exit_with(cause)


def quiet_on_other_ranks() -> None:
    """Keep info messages to the process of rank 0 (Lightning sets the rank from the launcher's environment)."""
    if getattr(rank_zero_only, "rank", 0) != 0:
        logging.getLogger("probing").setLevel(logging.WARNING)
