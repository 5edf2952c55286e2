"""What every entry script shares: user errors printed as one clear message, no traceback."""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable

from probing.errors import ProbingError

# Library noise that says nothing about the run: a deprecation inside Lightning's own code.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


def user_errors_exit_cleanly(main: Callable) -> Callable:
    """Run `main`; a ProbingError becomes its message on stderr and exit status 2 (bugs keep their traceback)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except ProbingError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)

    return wrapper
