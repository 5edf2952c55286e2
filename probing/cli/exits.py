"""User errors and Ctrl-C as the end of an entry script: one `error:` line (or one line on how to go on) on stderr,
from the process of rank 0 only, and exit status 2 (130 after Ctrl-C), without a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf.errors import OmegaConfBaseException

from probing.cli.logs import process_rank, quiet_on_other_ranks
from probing.errors import ProbingError


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
