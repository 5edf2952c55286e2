"""The check of an entry script's command line before Hydra runs it: what Hydra would refuse with a page of text
(an option a config group lacks, a misspelt key, an override that does not parse or compose), and a top-level
setting that the command line adds and no job reads, each as one ConfigError."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override, ValueType
from hydra.errors import OverrideParseException
from hydra.types import RunMode

from probing.cli.compose import AppConfigs, app_config_loader, key_of, one_line, unknown_key_message
from probing.cli.exits import exit_with
from probing.cli.launchers import check_launcher
from probing.errors import ConfigError, ProbingError


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
        configs = AppConfigs(loader, config_name)
        check_config_group_options(overrides, configs)
        lines = job_override_lines(overrides, options, configs)
        configs.composed(lines, RunMode.RUN)
        check_no_setting_added_at_the_top(lines, configs)


def check_config_group_options(overrides: list[Override], configs: AppConfigs) -> None:
    """Refuse an option that a config group of the app does not have (`probe=mlp3`, also within a sweep
    `probe=mlp1,mlp3`), naming the group's options. Hydra's own groups (hydra/...) are left to Hydra."""
    lines = [override.input_line for override in overrides]
    for override in overrides:
        group = override.key_or_group
        if override.is_delete() or override.is_hydra_override():
            continue
        options = configs.group_options(group, lines)
        for name in chosen_names(override.value()) if options else []:
            if name not in options:
                raise ConfigError(f"{group}={name}: {group} has no config {name!r}. Fix: one of {', '.join(options)}")


def chosen_names(value: object) -> list[str]:
    """The config names an override's value chooses: one (`mlp1`), a list (`[a,b]`) or a sweep's choices (`a,b`).
    A value that chooses none (null) or that only Hydra can expand (glob) gives none."""
    if isinstance(value, ChoiceSweep):
        value = value.list
    values = value if isinstance(value, list) else [value]
    return [str(item) for item in values if isinstance(item, str | int | float) and not isinstance(item, bool)]


def job_override_lines(overrides: list[Override], options: argparse.Namespace, configs: AppConfigs) -> list[str]:
    """The override lines as the job gets them: as given, or in a multirun those of its first job (each sweep at its
    first value). Only a sweep on the command line needs the mode (a single run refuses it): as Hydra decides it, a
    multirun with `-m` or a preset's `hydra.mode: MULTIRUN` (learnt from the command line composed as a multirun)."""
    lines = [override.input_line for override in overrides]
    if not any(override.is_sweep_override() for override in overrides):
        return lines
    if options.multirun or configs.composed(lines, RunMode.MULTIRUN).hydra.mode == RunMode.MULTIRUN:
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


def check_no_setting_added_at_the_top(lines: list[str], configs: AppConfigs) -> None:
    """Refuse a top-level setting that the command line adds and the config does not have (`+laeyr=3`, the fix Hydra
    suggests for a misspelt key, or `++laeyr=3`): Hydra lets it in, but no job reads a setting that its config does
    not have, so the run would go on with the default layer. A config group added to the defaults (`+group=option`)
    and Hydra's own settings are no settings of the job; a setting added inside a section may be an argument of the
    object built from it."""
    additions = [line for line in lines if adds_a_key_at_the_top(line, configs, lines)]
    if not additions:
        return
    config = configs.composed([line for line in lines if line not in additions], RunMode.RUN)
    for line in additions:
        key = key_of(line).split(".")[0]
        if key not in config:
            raise ConfigError(unknown_key_message(key, lines, configs, RunMode.RUN))


def adds_a_key_at_the_top(line: str, configs: AppConfigs, lines: list[str]) -> bool:
    """Whether the override `line` adds (+ or ++) a setting of the job's config at or below a top-level key, rather
    than a config group's option or a setting of Hydra's."""
    [override] = OverridesParser.create().parse_overrides([line])
    key = override.key_or_group
    return ((override.is_add() or override.is_force_add()) and not override.is_hydra_override() and "/" not in key
            and ("." in key or not configs.group_options(key, lines)))
