"""bench/erase.py as typed, on the tiny BERT and the bundled UD sample: it fits on the training split's labelled
words, erases every vector of the store, and reports the ratio of its two medians."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_script

BUNDLED_TRAINING_WORDS = 6680  # the bundled UD English-EWT sample's training split (docs/benchmarks.md)


def test_the_bench_fits_on_the_labelled_training_words_and_reports_the_ratio_of_its_medians(tmp_path, tiny_bert_path):
    out = tmp_path / "erase.json"
    done = run_script("bench/erase.py", "--model", str(tiny_bert_path), "--layer", "1", "--rounds", "3",
                      "--store-dir", str(tmp_path / "stores"), "--json", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["device"] == "cpu" and figures["method"] == "leace" and figures["feature_dim"] == 32
    # every training word of the sample but those the tiny model's vocabulary cannot place (one)
    assert BUNDLED_TRAINING_WORDS - 5 <= figures["labelled_rows"] <= min(BUNDLED_TRAINING_WORDS, figures["rows"])
    # the ratio of the medians, which the file gives rounded to 0.1 ms
    assert figures["erase_vs_read"] == pytest.approx(figures["erase_s"] / figures["read_s"], rel=0.02)
    assert figures["erase_s"] > figures["read_s"]  # the erase side reads the same store, then fits and edits
    assert f"erase_vs_read={figures['erase_vs_read']}" in done.stdout
