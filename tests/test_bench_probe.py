"""bench/probe.py on the CPU and on a CUDA GPU (marked `gpu`, skipped without one): the batched-probe benchmark runs on
the tiny BERT's features and writes its figures, both sides of the comparison scoring the same probes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO
from tests.helpers.run_if import run_if


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, run_if(min_gpus=1)])])
def test_the_probe_benchmark_runs(tmp_path, tiny_bert_path, device):
    figures = tmp_path / "bench.json"
    # --epochs 2: the smallest the script takes (its first epoch is an untimed warm-up)
    command = [sys.executable, str(REPO / "bench" / "probe.py"), "--model", str(tiny_bert_path), "--layer", "1",
               "--device", device, "--epochs", "2", "--batch-size", "64", "--hidden-dim", "64",
               "--override", "model.num_layers=3", "--store-dir", str(tmp_path / "stores"), "--json", str(figures)]
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "step_vs_gemm_limit=" in done.stdout
    result = json.loads(figures.read_text())
    assert result["device"].startswith(device) and bool(result["device_name"]) == (device == "cuda")
    assert result["epochs"] == 2
    assert result["input_dim"] == 32 and result["hidden_dim"] == 64
    [row] = result["comparisons"]
    assert row["batch_size"] == 64 and row["speedup"] > 0
    assert row["dev_max_abs_prob_diff"] < 1e-3  # the batched probes and the separate ones are the same probes


def test_the_probe_benchmark_trains_on_a_synthetic_store_of_the_real_shapes(tmp_path, tiny_bert_path):
    figures, cache = tmp_path / "bench.json", tmp_path / "synthetic"
    command = [sys.executable, str(REPO / "bench" / "probe.py"), "--model", str(tiny_bert_path), "--layer", "1",
               "--epochs", "2", "--steps", "2", "--batch-size", "64", "--hidden-dim", "16",
               "--synthetic-contexts", "2000", "--synthetic-cache", str(cache), "--profile",
               "--override", "model.num_layers=3", "--store-dir", str(tmp_path / "stores"), "--json", str(figures)]
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(figures.read_text())
    synthetic = result["synthetic"]
    real_counts, counts = np.array(synthetic["real_class_counts"]), np.array(synthetic["class_counts"])
    # the tiny BERT's store (model.num_layers=3): 3 layers of width 32; 2,000 training contexts in the real balance
    assert (synthetic["num_layers"], synthetic["width"], synthetic["store_layer"]) == (3, 32, 1)
    assert counts.sum() == 2000 and np.abs(counts - real_counts / real_counts.sum() * 2000).max() < 1
    real_rows = result["rows"]
    assert real_rows["train"] == 2000 and synthetic["contexts"] == real_rows
    for split, rows in real_rows.items():
        assert np.load(synthetic["files"][split], mmap_mode="r").shape == (3, rows, 32)
    [row] = result["comparisons"]
    assert row["steps_per_epoch"] == 2 and result["steps"] == 2
    assert row["dev_max_abs_prob_diff"] < 1e-3  # still the same probes on both sides
    assert {"aten::bmm", "aten::_fused_adam_"} <= set(row["profile_ms_per_step"])  # the products and the optimizer


def test_the_compiled_step_is_refused_off_cuda_in_one_line(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "probe.py"), "--compile", "--device", "cpu"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--compile" in done.stderr.splitlines()[-1] and "cuda" in done.stderr
