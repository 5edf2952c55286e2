"""What every entry script shares: the check of its command line before Hydra runs it (through Hydra's public API
only), user errors printed as one clear message (no traceback), the check of a sweep before its first job, and logging.

Logging scheme: every module logs to `logging.getLogger(__name__)`, so all of it sits under the `probing` logger
(Hydra's job logging prints it and writes it to the run folder). In a multi-process run (DDP) only the process of
rank 0 logs below warnings: the other ranks would repeat every line.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import functools
import importlib.util
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from hydra import initialize_config_dir, initialize_config_module
from hydra.core.config_loader import ConfigLoader
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, ValueType
from hydra.errors import HydraException, OverrideParseException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from probing.errors import ConfigError, ProbingError

# Library noise that says nothing about the run: a deprecation inside Lightning's own code, and the advertisement
# Lightning logs once per Trainer for its cloud logger.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


class DropLightningTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


# Lightning's rank-zero messages go to one of these two loggers, whichever of its packages was imported last.
for _name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
    logging.getLogger(_name).addFilter(DropLightningTip())


# Hydra's launcher plugins (hydra/launcher=<name>): the module that registers each and the package that installs it.
LAUNCHER_PLUGINS = {
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "'probing[cluster]' (hydra-submitit-launcher)"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "'probing[cluster]' (hydra-submitit-launcher)"),
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    "ray": ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"),
    "ray_aws": ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"),
    "rq": ("hydra_plugins.hydra_rq_launcher", "hydra-rq-launcher"),
}


def command_line_checked(config_path: str, config_name: str) -> Callable[[Callable], Callable]:
    """Run the Hydra app `main` after checking its command line (`check_command_line`): Hydra would report a
    misspelt key or config name with a page of text, and exit status 1. `config_path`: the app's configs, as Hydra's
    main decorator takes them (a folder's absolute path or `pkg://<package>`); `config_name`: its primary config."""

    def decorate(main: Callable) -> Callable:
        @functools.wraps(main)
        def wrapper(*args, **kwargs):
            try:
                check_command_line(sys.argv[1:], config_path, config_name)
            except ProbingError as error:
                exit_with(error)
            return main(*args, **kwargs)

        return wrapper

    return decorate


# The check reads the configs through Hydra's public API only (the compose API's initialize_config_dir/_module, the
# ConfigLoader and ConfigSource interfaces its plugins use, the override parser): tests/test_hydra_api.py pins it to
# the Hydra versions that pyproject.toml allows.
HYDRA_VERSION_BASE = "1.3"  # the version_base of the entry points' main decorator (probing.console)

SWITCH, VALUE, OPTIONAL_VALUE = {"action": "store_true"}, {}, {"nargs": "?", "const": "all"}
# Hydra's command-line flags, as `--hydra-help` lists them (Hydra's own parser is private), and what each takes.
HYDRA_FLAGS = {("--help", "-h"): SWITCH, ("--hydra-help",): SWITCH, ("--version",): SWITCH, ("--resolve",): SWITCH,
               ("--run", "-r"): SWITCH, ("--multirun", "-m"): SWITCH, ("--shell-completion", "-sc"): SWITCH,
               ("--cfg", "-c"): VALUE, ("--package", "-p"): VALUE, ("--config-path", "-cp"): VALUE,
               ("--config-name", "-cn"): VALUE, ("--config-dir", "-cd"): VALUE, ("--experimental-rerun",): VALUE,
               ("--info", "-i"): OPTIONAL_VALUE}

# Hydra's flags under which it does not compose the app's config as given (help, version, another config or search
# path): the command line is then left to Hydra.
HYDRA_OWN_FLAGS = ("help", "hydra_help", "version", "info", "shell_completion", "config_path", "config_name",
                   "config_dir", "experimental_rerun")


def hydra_flags_parser() -> argparse.ArgumentParser:
    """A parser of Hydra's flags (HYDRA_FLAGS) and the overrides. Only which flags are given matters here: Hydra
    itself refuses a flag or value it does not take."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("overrides", nargs="*")
    for flags, takes in HYDRA_FLAGS.items():
        parser.add_argument(*flags, **takes)
    return parser


def check_command_line(arguments: list[str], config_path: str, config_name: str) -> None:
    """Refuse, as one ConfigError, what Hydra would refuse with a page of text: a launcher that is not installed, an
    option that a config group does not have (`probe=mlp3`, also within a sweep), a key the config does not have
    (a misspelling of `trainer.max_epochs`: the closest keys are named), and any other override that does not parse
    or compose; and what Hydra lets through: a top-level setting that the command line adds (`+laeyr=3`), which no
    job reads. A multirun is checked with each sweep at its first value (the jobs' own configs are checked by
    SweepCheck)."""
    check_launcher(arguments, config_path)
    options, _ = hydra_flags_parser().parse_known_args(arguments)
    if any(getattr(options, flag) for flag in HYDRA_OWN_FLAGS):
        return
    try:
        overrides = OverridesParser.create().parse_overrides(options.overrides)
    except OverrideParseException as error:
        raise ConfigError(f"the command line does not parse: {one_line(str(error))}") from None
    with app_config_loader(config_path) as loader:
        check_config_group_options(overrides, loader, config_name)
        lines = job_override_lines(overrides, options, loader, config_name)
        composed(loader, config_name, lines, RunMode.RUN)
        check_no_setting_added_at_the_top(lines, loader, config_name)


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


def check_config_group_options(overrides: list[Override], loader: ConfigLoader, config_name: str) -> None:
    """Refuse an option that a config group of the app does not have (`probe=mlp3`, also within a sweep
    `probe=mlp1,mlp3`), naming the group's options. Hydra's own groups (hydra/...) are left to Hydra."""
    lines = [override.input_line for override in overrides]
    for override in overrides:
        group = override.key_or_group
        if override.is_delete() or override.is_hydra_override():
            continue
        options = group_options(loader, group, config_name, lines)
        for name in chosen_names(override.value()) if options else []:
            if name not in options:
                raise ConfigError(f"{group}={name}: {group} has no config {name!r}. Fix: one of {', '.join(options)}")


def group_options(loader: ConfigLoader, group: str, config_name: str, lines: list[str]) -> list[str]:
    """The configs of the config group `group` (none: no such group), in the search path that the command line
    `lines` gives (hydra.searchpath can add folders)."""
    try:
        return loader.get_group_options(group, ObjectType.CONFIG, config_name, lines)
    except HydraException as error:
        raise not_composing(error) from None


def chosen_names(value: object) -> list[str]:
    """The config names an override's value chooses: one (`mlp1`), a list (`[a,b]`) or a sweep's choices (`a,b`).
    A value that chooses none (null) or that only Hydra can expand (glob) gives none."""
    if isinstance(value, ChoiceSweep):
        value = value.list
    values = value if isinstance(value, list) else [value]
    return [str(item) for item in values if isinstance(item, str | int | float) and not isinstance(item, bool)]


def job_override_lines(overrides: list[Override], options: argparse.Namespace, loader: ConfigLoader,
                       config_name: str) -> list[str]:
    """The override lines as the job gets them: as given, or in a multirun those of its first job (each sweep at its
    first value). Only a sweep on the command line needs the mode (a single run refuses it): as Hydra decides it, a
    multirun with `-m` or a preset's `hydra.mode: MULTIRUN` (learnt from the command line composed as a multirun)."""
    lines = [override.input_line for override in overrides]
    if not any(override.is_sweep_override() for override in overrides):
        return lines
    if options.multirun or composed(loader, config_name, lines, RunMode.MULTIRUN).hydra.mode == RunMode.MULTIRUN:
        return [line for line in map(first_job_override, overrides) if line is not None]
    return lines


def first_job_override(override: Override) -> str | None:
    """The override as the first job of a multirun gets it: a listed sweep (`layer=0,1`, `seed=range(3)`) at its
    first value, an interval or glob left out (Hydra's sweeper expands those), anything else as given."""
    if override.value_type in (ValueType.INTERVAL_SWEEP, ValueType.GLOB_CHOICE_SWEEP):
        return None
    if not override.is_sweep_override():
        return override.input_line
    first = next(iter(override.sweep_string_iterator()), None)
    return None if first is None else f"{override.get_key_element()}={first}"


def composed(loader: ConfigLoader, config_name: str, lines: list[str], mode: RunMode) -> DictConfig:
    """The config composed from `config_name` and the override `lines` in `mode`, or a ConfigError; a key the config
    lacks names the closest keys."""
    try:
        return loader.load_configuration(config_name, lines, mode)
    except (HydraException, ValueError) as error:
        missing = error.__cause__
        if not isinstance(missing, ConfigAttributeError | ConfigKeyError) or not missing.full_key:
            raise not_composing(error) from None
        raise ConfigError(unknown_key_message(missing.full_key, lines, loader, config_name, mode)) from None


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


def check_no_setting_added_at_the_top(lines: list[str], loader: ConfigLoader, config_name: str) -> None:
    """Refuse a top-level setting that the command line adds and the config does not have (`+laeyr=3`, the fix Hydra
    suggests for a misspelt key, or `++laeyr=3`): Hydra lets it in, but no job reads a setting that its config does
    not have, so the run would go on with the default layer. A config group added to the defaults (`+group=option`)
    and Hydra's own settings are no settings of the job; a setting added inside a section may be an argument of the
    object built from it."""
    additions = [line for line in lines if adds_a_key_at_the_top(line, loader, config_name, lines)]
    if not additions:
        return
    config = composed(loader, config_name, [line for line in lines if line not in additions], RunMode.RUN)
    for line in additions:
        key = key_of(line).split(".")[0]
        if key not in config:
            raise ConfigError(unknown_key_message(key, lines, loader, config_name, RunMode.RUN))


def adds_a_key_at_the_top(line: str, loader: ConfigLoader, config_name: str, lines: list[str]) -> bool:
    """Whether the override `line` adds (+ or ++) a setting of the job's config at or below a top-level key, rather
    than a config group's option or a setting of Hydra's."""
    [override] = OverridesParser.create().parse_overrides([line])
    key = override.key_or_group
    return ((override.is_add() or override.is_force_add()) and not override.is_hydra_override() and "/" not in key
            and ("." in key or not group_options(loader, key, config_name, lines)))


def unknown_key_message(key: str, lines: list[str], loader: ConfigLoader, config_name: str, mode: RunMode) -> str:
    """The error for the override (one of `lines`) whose path meets `key`, the first key on it that the config lacks
    (`a.b` of `a.b.c=1` where `a` has no `b`): the closest keys at that place (a misspelling), else the keys that end
    in the override's path from that place on (a wrong place), else all keys at that place, as the config composed
    without that override has them."""
    offending = [line for line in lines if key_of(line) == key or key_of(line).startswith(f"{key}.")]
    shown = offending[0] if offending else key
    parent, _, name = key.rpartition(".")
    try:
        config = loader.load_configuration(config_name, [line for line in lines if line not in offending], mode)
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


def user_errors_exit_cleanly(main: Callable) -> Callable:
    """Run `main`; a ProbingError becomes its message on stderr and exit status 2 (bugs keep their traceback), also
    when a config resolver raised it (OmegaConf wraps it); Ctrl-C becomes one line on how to go on, and status 130."""

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
        except KeyboardInterrupt:
            exit_interrupted()
        except SystemExit as exit_:
            if isinstance(exit_.__context__, KeyboardInterrupt):  # Lightning's exit after its shutdown on Ctrl-C
                exit_interrupted()
            raise

    return wrapper


INTERRUPTED_EXIT_STATUS = 130  # 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C


def exit_interrupted() -> NoReturn:
    """After Ctrl-C: one line on what is kept and how to go on (rank 0 only), instead of a traceback."""
    if process_rank() == 0:
        print(f"interrupted. {how_to_go_on()}", file=sys.stderr)
    sys.exit(INTERRUPTED_EXIT_STATUS)


def how_to_go_on() -> str:
    """How to take up an interrupted run where it stopped: relaunched into its folder (a sweep's or a run's)."""
    if not HydraConfig.initialized():
        return "Run the command again to go on"
    hydra = HydraConfig.get()
    output_dir = Path(hydra.runtime.output_dir)  # a multirun's job folder is <sweep folder>/<job>
    folder = f"hydra.sweep.dir={output_dir.parent}" if hydra.mode == RunMode.MULTIRUN else f"hydra.run.dir={output_dir}"
    return (f"To go on where it stopped, run the same command with {folder}: feature stores resume row by row, "
            "train.py from its last checkpoint, and a sweep skips its finished jobs")


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
    """Print the error as one `error:` line and exit with status 2. In a multi-process run (DDP) only the process of
    rank 0 prints it: every process meets the same bad setting, and the other ranks would repeat the line."""
    if process_rank() == 0:
        print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


def process_rank() -> int:
    """This process's global rank: Lightning's (set when DDP starts, and from the launcher's environment when
    Lightning is imported), else the launcher's RANK or LOCAL_RANK variable, else 0."""
    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    try:
        return int(rank)
    except ValueError:
        return 0


# The check each job makes of its config before any work, by the job's `task_name` (the job modules register their
# own: probing.tasks); SweepCheck makes it for every job of a sweep.
JOB_CHECKS: dict[str, Callable[[DictConfig], object]] = {}


def job_error_in(config: DictConfig) -> ProbingError | None:
    """The ProbingError that the check of `config`'s job (JOB_CHECKS) raises, if any; other failures are left to the
    job, which reports them as it would."""
    check = JOB_CHECKS.get(OmegaConf.select(config, "task_name", default=None))
    try:
        if check is not None:
            check(config)
    except Exception as error:  # only a user's error is reported here
        return probing_cause(error)
    return None


class SweepCheck(Callback):
    """Hydra callback: resolve the sweep and check each job's config (JOB_CHECKS) before the first job, so that a
    ProbingError raised by a resolver (e.g. `finetuned=` naming a folder without a fine-tuned model) or by the check
    (`layer=abc`) is one `error:` line and exit status 2 rather than
    Hydra's report of an interpolation failure, or a failure of a late job. (SystemExit passes through Hydra's error
    handler.)

    Both sources of sweep axes are checked: the config's (`hydra.sweeper.params`, as the presets declare them, often a
    plain dict or None) and the command line's (`layer=0,1`, in hydra.overrides.task; Hydra composes the config
    without them). Every value of a command-line axis is set, in turn, in a copy of the config (the other axes at
    their first value), and that copy is resolved value by value: the job's settings and the sweeper's params.
    Failures that are not ProbingErrors (a `${hydra:...}` value before any job exists, a mandatory value left
    unset) are left to Hydra and the jobs, which report them as they would."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        for setting, variant in sweep_variants(config):
            cause = user_error_in(variant) or job_error_in(variant)
            if cause is not None:
                exit_with(cause if setting is None else type(cause)(f"the job with {setting}: {cause}"))


def sweep_variants(config: DictConfig) -> Iterator[tuple[str | None, DictConfig]]:
    """(`key=value`, `config` with that value) for each value of each command-line sweep axis in turn (the other axes
    at their first value); (None, `config`) when the command line sweeps nothing."""
    axes = command_line_axes(config)
    if not axes:
        yield None, config
        return
    first = {key: values[0] for key, values in axes.items()}
    for key, values in axes.items():
        for value in values:
            variant = copy.deepcopy(config)
            with read_write(variant), open_dict(variant):
                for name, chosen in {**first, key: value}.items():
                    OmegaConf.update(variant, name, chosen, merge=False, force_add=True)
            yield f"{key}={value}", variant


def command_line_axes(config: DictConfig) -> dict[str, list]:
    """The config values the command line sweeps (`layer=0,1`, `seed=range(3)`): key -> its values. Config groups
    (`model=bert,gpt2`), Hydra's own settings and sweeps the basic sweeper cannot list (intervals) are left out."""
    groups = set(OmegaConf.select(config, "hydra.runtime.choices", default=None) or {})
    task = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    axes = {}
    for override in OverridesParser.create().parse_overrides(list(task)):
        if (not override.is_sweep_override() or override.is_delete() or override.is_hydra_override()
                or override.key_or_group in groups or isinstance(override.value(), IntervalSweep)):
            continue
        axes[override.key_or_group] = list(override.sweep_iterator())
    return axes


def user_error_in(node: DictConfig | ListConfig, top: bool = True) -> ProbingError | None:
    """The first ProbingError a resolver raises while `node` is resolved value by value (at the top: the job's
    settings and `hydra.sweeper.params`, not the rest of Hydra's own section)."""
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        try:
            value = node[key]
        except OmegaConfBaseException as error:
            cause = probing_cause(error)
            if cause is not None:
                return cause
            continue
        if top and key == "hydra":
            value = OmegaConf.select(value, "sweeper.params", default=None)
        if isinstance(value, (DictConfig, ListConfig)):
            cause = user_error_in(value, top=False)
            if cause is not None:
                return cause
    return None


def quiet_on_other_ranks() -> None:
    """Keep info messages to the process of rank 0 (Lightning sets the rank from the launcher's environment)."""
    if process_rank() != 0:
        logging.getLogger("probing").setLevel(logging.WARNING)
