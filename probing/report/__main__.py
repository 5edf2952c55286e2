"""`python -m probing.report DIR`: write the report of the results.json files below DIR."""

from __future__ import annotations

import argparse
from pathlib import Path

import probing.report
from probing.report import write_report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=probing.report.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a multirun folder (or any folder containing results.json files)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the report (default: the folder)")
    args = parser.parse_args(argv)
    if write_report(args.folder, args.out) is None:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
