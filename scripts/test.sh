#!/usr/bin/env bash
# Set up, check the code with the linter (ruff, configured in pyproject.toml), then run the test suite (tests
# reading ../shared/data run when CI=true and skip elsewhere without it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
