"""bench/tree_probe.py: its step and its bare products run on the bundled sample's training sentences, for both
kinds of structural probe, and it writes its figures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO


@pytest.mark.parametrize("kind", ["distance", "depth"])
def test_the_tree_probe_bench_times_the_bundled_training_sentences(tmp_path, kind):
    figures = tmp_path / "figures.json"
    command = [sys.executable, str(REPO / "bench" / "tree_probe.py"), "--kind", kind, "--epochs", "2",
               "--input-dim", "16", "--rank", "4", "--json", str(figures)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(figures.read_text())
    assert (result["kind"], result["rank"], result["sentences"], result["batches"]) == (kind, 4, 521, 27)
    assert result["step_epoch_s"] > 0 and result["bare_epoch_s"] > 0
    assert f"step_vs_bare={result['step_vs_bare']}" in done.stdout


def test_the_tree_probe_bench_times_synthetic_sentences_of_the_real_lengths(tmp_path):
    figures, cache = tmp_path / "figures.json", tmp_path / "synthetic"
    command = [sys.executable, str(REPO / "bench" / "tree_probe.py"), "--epochs", "2", "--input-dim", "16",
               "--rank", "4", "--synthetic-contexts", "2000", "--synthetic-cache", str(cache), "--json", str(figures)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(figures.read_text())
    assert result["words"] == 2000 and result["batches"] == -(-result["sentences"] // 20)
    # the sample's 521 sentences hold 6,680 words: 2,000 words are about 156 of them
    assert 100 < result["sentences"] < 250
    assert np.load(result["synthetic"]["file"], mmap_mode="r").shape == (1, 2000, 16)
