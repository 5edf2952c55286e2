"""The entry points: what `python probe.py` (train.py, extract.py, analyze.py) runs, built once here.

A checkout's scripts read conf/ beside them; the commands of an installed package (`pip install .`: probing-probe,
probing-train, probing-extract, probing-analyze) read the package's copy of conf/ (`probing.conf`, shipped in the
wheel; see pyproject.toml), which Hydra reads as `pkg://probing.conf`, and run from any folder. The Hydra job is
named after the entry script (`hydra.job.name: ${task_name}` in conf/hydra/default.yaml), whichever way it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig

from probing.cli import HYDRA_VERSION_BASE, command_line_checked, user_errors_exit_cleanly
from probing.devices import keep_freed_memory
from probing.tasks import analyze, extract, probe, train
from probing.tasks.sweeper import optimized_value

PACKAGE_CONFIGS = "pkg://probing.conf"


def entry_point(config_name: str, job: Callable[[DictConfig], Any],
                config_path: str = PACKAGE_CONFIGS) -> Callable[[], Any]:
    """The Hydra app that composes `config_name` from `config_path` and runs `job` on it: the command line is checked
    first (`cli.check_command_line`), and a user error ends as one `error:` line with exit status 2. The process keeps
    its freed memory for reuse (`keep_freed_memory`: a training step's large tensors are not page-faulted afresh)."""

    @command_line_checked(config_path, config_name)
    @hydra.main(version_base=HYDRA_VERSION_BASE, config_path=config_path, config_name=config_name)
    @user_errors_exit_cleanly
    def main(cfg: DictConfig) -> Any:
        keep_freed_memory()
        return job(cfg)

    return main


def probe_job(cfg: DictConfig) -> float:
    """Returns `optimized_metric` of the run (dev micro-F1 by default) to a Hydra sweeper."""
    return optimized_value(probe.run(cfg), cfg.optimized_metric)


def train_job(cfg: DictConfig) -> float:
    """Returns `optimized_metric` of the run (the task's monitored dev metric by default) to a Hydra sweeper."""
    return optimized_value(train.run(cfg), cfg.optimized_metric)


JOBS = {"probe": probe_job, "train": train_job, "extract": extract.run, "analyze": analyze.run}
probe_main = entry_point("probe", probe_job)
train_main = entry_point("train", train_job)
extract_main = entry_point("extract", extract.run)
analyze_main = entry_point("analyze", analyze.run)
