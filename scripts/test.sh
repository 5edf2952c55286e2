#!/usr/bin/env bash
# Set up, then run the test suite (tests reading ../shared/data run when CI=true and skip elsewhere without it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q "$@"
