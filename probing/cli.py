"""What every entry script shares: user errors printed as one clear message (no traceback), and logging.

Logging scheme: every module logs to `logging.getLogger(__name__)`, so all of it sits under the `probing` logger
(Hydra's job logging prints it and writes it to the run folder). In a multi-process run (DDP) only the process of
rank 0 logs below warnings: the other ranks would repeat every line.
"""

from __future__ import annotations

import functools
import logging
import sys
import warnings
from collections.abc import Callable

from lightning.fabric.utilities.rank_zero import rank_zero_only

from probing.errors import ProbingError

# Library noise that says nothing about the run: a deprecation inside Lightning's own code.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


def user_errors_exit_cleanly(main: Callable) -> Callable:
    """Run `main`; a ProbingError becomes its message on stderr and exit status 2 (bugs keep their traceback)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        quiet_on_other_ranks()
        try:
            return main(*args, **kwargs)
        except ProbingError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def quiet_on_other_ranks() -> None:
    """Keep info messages to the process of rank 0 (Lightning sets the rank from the launcher's environment)."""
    if getattr(rank_zero_only, "rank", 0) != 0:
        logging.getLogger("probing").setLevel(logging.WARNING)
