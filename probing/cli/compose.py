"""The app's config composed through Hydra's public API for the command-line check, each command line once, and
Hydra's refusals of it as one line that names the fix."""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Iterator

from hydra import initialize_config_dir, initialize_config_module
from hydra.core.config_loader import ConfigLoader
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from probing.errors import ConfigError

# The check reads the configs through Hydra's public API only (the compose API's initialize_config_dir/_module, the
# ConfigLoader and ConfigSource interfaces its plugins use, the override parser): tests/test_hydra_api.py pins it to
# the Hydra versions that pyproject.toml allows.
HYDRA_VERSION_BASE = "1.3"  # the version_base of the entry points' main decorator (probing.console)


@contextlib.contextmanager
def app_config_loader(config_path: str) -> Iterator[ConfigLoader]:
    """Hydra's config loader for the app whose configs are at `config_path` (a folder's absolute path, or
    `pkg://<package>`), with Hydra's config search path as the app's main decorator sets it up (Hydra's own configs,
    search path plugins, the ConfigStore). Hydra's global state is restored on leaving."""
    if config_path.startswith("pkg://"):
        hydra_set_up = initialize_config_module(config_module=config_path.removeprefix("pkg://"),
                                                version_base=HYDRA_VERSION_BASE)
    else:
        hydra_set_up = initialize_config_dir(config_dir=config_path, version_base=HYDRA_VERSION_BASE)
    with hydra_set_up:
        yield GlobalHydra.instance().config_loader()


class AppConfigs:
    """The app's primary config `config_name` as Hydra's `loader` composes it for the command-line check: each
    command line is composed once per mode and shared by the checks that read it (a misspelt key's message reads the
    config that another check composed already), and the options of a config group are listed once."""

    def __init__(self, loader: ConfigLoader, config_name: str) -> None:
        self.loader, self.config_name = loader, config_name
        self._configs: dict[tuple[tuple[str, ...], RunMode], DictConfig | Exception] = {}
        self._options: dict[tuple[str, tuple[str, ...]], list[str]] = {}

    def load(self, lines: list[str], mode: RunMode) -> DictConfig:
        """The config composed from the override `lines` in `mode`, as Hydra composes it (or Hydra's error)."""
        key = (tuple(lines), mode)
        if key not in self._configs:
            try:
                self._configs[key] = self.loader.load_configuration(self.config_name, list(lines), mode)
            except (HydraException, ValueError) as error:
                self._configs[key] = error
        found = self._configs[key]
        if isinstance(found, Exception):
            raise found
        return found

    def composed(self, lines: list[str], mode: RunMode) -> DictConfig:
        """The config composed from the override `lines` in `mode`, or a ConfigError; a key the config lacks names
        the closest keys."""
        try:
            return self.load(lines, mode)
        except (HydraException, ValueError) as error:
            missing = error.__cause__
            if not isinstance(missing, ConfigAttributeError | ConfigKeyError) or not missing.full_key:
                raise not_composing(error) from None
            raise ConfigError(unknown_key_message(missing.full_key, lines, self, mode)) from None

    def group_options(self, group: str, lines: list[str]) -> list[str]:
        """The configs of the config group `group` (none: no such group), in the search path that the command line
        `lines` gives (hydra.searchpath can add folders)."""
        key = (group, tuple(lines))
        if key not in self._options:
            try:
                self._options[key] = self.loader.get_group_options(group, ObjectType.CONFIG, self.config_name, lines)
            except HydraException as error:
                raise not_composing(error) from None
        return self._options[key]


# Hydra's refusal of a group choice that the composed defaults list does not hold (a tree task's config sets `data`
# inline), with its advice to append the group (`+data=...`), which would add a second data beside the task's own.
NO_GROUP_TO_OVERRIDE = re.compile(r"Could not override '([\w/.@]+)'\. No match in the defaults list")


def not_composing(error: Exception) -> ConfigError:
    """Hydra's refusal of the command line, on one line."""
    unmatched = NO_GROUP_TO_OVERRIDE.search(str(error))
    if unmatched:
        group = unmatched.group(1)
        given = re.search(rf"use \+({re.escape(group)}=\S+)", str(error))
        override = given.group(1) if given else f"{group}=..."
        return ConfigError(f"{override}: the configuration that the rest of the command line composes chooses no "
                           f"`{group}` (a task= that reads its own data sets it itself, e.g. a tree task's treebank). "
                           f"Fix: leave {group}= out, and point the task to other files through its own settings "
                           "(data.data_dir=..., task.path=...)")
    return ConfigError(f"the command line does not compose: {one_line(str(error))}")


def unknown_key_message(key: str, lines: list[str], configs: AppConfigs, mode: RunMode) -> str:
    """The error for the override (one of `lines`) whose path meets `key`, the first key on it that the config lacks
    (`a.b` of `a.b.c=1` where `a` has no `b`): the closest keys at that place (a misspelling), else the keys that end
    in the override's path from that place on (a wrong place), else all keys at that place, as the config composed
    without that override has them."""
    offending = [line for line in lines if key_of(line) == key or key_of(line).startswith(f"{key}.")]
    shown = offending[0] if offending else key
    parent, _, name = key.rpartition(".")
    try:
        config = configs.load([line for line in lines if line not in offending], mode)
    except (HydraException, ValueError):
        config = None
    place = OmegaConf.select(config, parent, default=None) if parent and config is not None else config
    siblings = [str(sibling) for sibling in place if sibling != "hydra"] if isinstance(place, DictConfig) else []
    closest = [f"{parent}.{other}" if parent else other for other in difflib.get_close_matches(name, siblings, n=3)]
    suffix = key_of(shown)[len(parent) + 1 if parent else 0:]  # `b.c` of `a.b.c`
    elsewhere = [other for other in dotted_keys(config) if other.endswith(f".{suffix}")] if config is not None else []
    if closest:
        fix = f"{' or '.join(closest)} (the closest {'names' if len(closest) > 1 else 'name'})"
    elif 0 < len(elsewhere) <= 3:
        fix = f"{' or '.join(elsewhere)} (where the config has {suffix})"
    elif siblings:
        fix = f"one of {', '.join(siblings)}"
    else:
        fix = "`--cfg job` shows the settings"
    if "_target_" in siblings:  # an object built from this section takes any argument its class takes
        fix += f", or +{key_of(shown)}=... to pass {place['_target_']} an argument that {parent} does not list"
    return f"{shown}: {parent or 'the config'} has no setting {name!r}. Fix: {fix}"


def dotted_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """Every key of the config below `node` as a dotted path (`finetune.module.optimizer.lr`), Hydra's own left out."""
    keys = []
    for key in node:
        if not prefix and key == "hydra":
            continue
        path = f"{prefix}{key}"
        keys.append(path)
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            keys.extend(dotted_keys(child, f"{path}."))
    return keys


def key_of(line: str) -> str:
    """The key an override line sets, adds or deletes (`+a.b=1` -> a.b)."""
    return line.lstrip("~+").partition("=")[0]


def one_line(message: str) -> str:
    """A multi-line message (Hydra's) as one line."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())
