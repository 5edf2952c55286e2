"""The check of a sweep before its first job (`SweepCheck`, a Hydra callback): a user error that a resolver raises
for any job is one `error:` line before any job runs."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from probing.cli.exits import exit_with, probing_cause
from probing.errors import ProbingError

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
