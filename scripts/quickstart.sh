#!/usr/bin/env bash
# Set up, then probe every layer of the packaged MiniLM on the bundled STREUSLE sample (offline) and report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
.venv/bin/python probe.py experiment=quickstart "$@"
