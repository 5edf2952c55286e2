#!/usr/bin/env bash
# Every GPU bench and `pytest -m gpu` on one CUDA device, in under 5 minutes, with one JSON summary of the figures
# against the targets of docs/benchmarks.md "On a GPU".
#
#   bash bench/gpu.sh                       # writes bench-gpu/ (each bench's JSON and log) and bench-gpu/summary.json
#   GPU_BENCH_DIR=/tmp/g EWT_DIR=/path/to/ud_english_ewt bash bench/gpu.sh    # also erasure fitted on EWT dev
#
# Each step has its own time limit; a step that fails or runs out of time is recorded as failed in the summary and
# the others still run.
set -u -o pipefail
cd "$(dirname "$0")/.."
out=${GPU_BENCH_DIR:-bench-gpu}
mkdir -p "$out"
python=${PYTHON:-python}

step() {  # step NAME SECONDS COMMAND...: run COMMAND with a time limit, its output in $out/NAME.log
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "{\"rc\": $rc, \"seconds\": $((SECONDS - start))}" > "$out/$name.status.json"
    echo "$name: rc=$rc, $((SECONDS - start)) s"
}

nvidia-smi -L > "$out/device.txt" 2>&1 || { echo "error: no CUDA device (nvidia-smi failed): run this on a GPU machine" >&2; exit 2; }
step extract 60 "$python" bench/extract.py --device cuda --records 1000 --warmup 1 --json "$out/extract.json"
step extract_all 60 "$python" bench/extract.py --device cuda --records 0 --warmup 1 --json "$out/extract_all.json"
step extract_padded 60 "$python" bench/extract.py --device cuda --records 0 --warmup 1 --pad-to-multiple-of 64 \
    --json "$out/extract_padded.json"
step probe_fp32 60 "$python" bench/probe.py --device cuda --synthetic-contexts 200000 --epochs 3 --steps 200 \
    --json "$out/probe_fp32.json"
step probe_bf16 60 "$python" bench/probe.py --device cuda --synthetic-contexts 200000 --epochs 3 --steps 200 \
    --precision bf16 --json "$out/probe_bf16.json"
step tree_probe 30 "$python" bench/tree_probe.py --device cuda --synthetic-contexts 200000 --json "$out/tree_probe.json"
step erase 30 "$python" bench/erase.py --device cuda --json "$out/erase.json"
if [ -n "${EWT_DIR:-}" ]; then
    step erase_ewt 60 "$python" bench/erase.py --device cuda --data-dir "$EWT_DIR" --override data.source.dev_fraction=0.01 \
        --override 'data.source.splits={train: "*-dev.conllu", dev: "*-test.conllu"}' --json "$out/erase_ewt.json"
fi
step finetune 40 "$python" bench/finetune.py --accelerator gpu --json "$out/finetune.json"
step quickstart 90 "$python" probe.py experiment=quickstart trainer=gpu logger=csv hydra.sweep.dir="$out/quickstart"
step pytest_gpu 120 "$python" -m pytest -m gpu -q -p no:cacheprovider --junitxml="$out/pytest_gpu.xml"
"$python" bench/gpu_summary.py "$out"
