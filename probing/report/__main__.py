"""`python -m probing.report DIR`: write the report of the results.json files below DIR."""

from __future__ import annotations

import argparse
from pathlib import Path

import probing.report
from probing.cli import user_errors_exit_cleanly
from probing.errors import ConfigError
from probing.report import write_report
from probing.report.aggregate import RESULTS_FILE

FOLDER_FIX = "name the folder of a finished run or sweep, e.g. logs/probe/multiruns/<time>"


@user_errors_exit_cleanly
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=probing.report.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a multirun folder (or any folder containing results.json files)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the report (default: the folder)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        raise ConfigError(f"{args.folder} is not a folder. Fix: {FOLDER_FIX}")
    if not any(args.folder.rglob(RESULTS_FILE)):
        raise ConfigError(f"no {RESULTS_FILE} below {args.folder} (no run there has finished). Fix: {FOLDER_FIX}")
    write_report(args.folder, args.out)


if __name__ == "__main__":
    main()
