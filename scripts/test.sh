#!/usr/bin/env bash
# Set up, check the code with the linter (ruff, configured in pyproject.toml), build the documentation site strictly
# (mkdocs.yml: a broken link or anchor, or a page missing from the nav, fails), then run the test suite (tests
# reading ../shared/data run when CI=true and skip elsewhere without it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site
.venv/bin/python -m pytest -q "$@"
