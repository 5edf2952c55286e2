"""bench/probe_run.py's FLOP floor: the products of every probe of a run, counted by hand for small cases."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers import REPO


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_probe_run", REPO / "bench" / "probe_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "feature_dim", lambda results: 4)
    return module


def word_results(**extra) -> dict:
    return {"labels": ["A", "B", "C"], "probe_family": "mlp1", "rank": None, "epochs_trained": 3,
            "config": {"probe": {"module": {"hidden_dim": 8}, "batch_size": 2}},
            "data_summary": {"train": {"examples": 11}, "dev": {"examples": 5}},
            "extraction_skipped_rows": {"train": 1, "dev": 0}, "test": {"accuracy": 0.5}, **extra}


def test_a_word_probe_run_with_control_and_mdl(bench):
    # layers 4 -> 8 -> 3: products 32 + 24; forward 2 * 56 = 112; train 112 + 112 (weights) + 48 (hidden's input)
    results = word_results(test={"accuracy": 0.5, "control_accuracy": 0.3}, mdl={"block_ends": [2, 5, 10]})
    per_epoch = 2 * (10 * 272 + 5 * 112) + 2 * (2 * 272 + 5 * 112) + 2 * (5 * 272 + 5 * 112)
    figures = bench.run_flops(results)
    assert figures["flops"] == 3 * per_epoch == 37_824
    assert figures["sizes"] == [4, 8, 3] and figures["targets"] == 2 and figures["prefix_probes"] == 2


def test_a_linear_pair_probe_without_control(bench):
    # [a; b] of 4-dim words: 8 -> 3, one product of 24; forward 48, train 48 + 48
    figures = bench.run_flops(word_results(probe_family="linear", pair=True))
    assert figures["flops"] == 3 * (10 * 96 + 5 * 48)


def test_an_sclass_run_counts_c_binary_probes_per_task(bench):
    results = {"classes": ["x", "y"], "epochs_trained": 2, "config": {"probe": {"module": {"hidden_dim": 8},
                                                                                "batch_size": 2}},
               "data_summary": {"train": {"contexts": 6}, "dev": {"contexts": 3}},
               "extraction_skipped_rows": {"train": 0, "dev": 0}, "test": {"micro_f1": 0.5, "control_micro_f1": 0.1}}
    # layers 4 -> 8 -> 2: products 32 + 16; forward 96, train 96 + 96 + 32; 2 classes x 2 tasks
    assert bench.run_flops(results)["flops"] == 2 * 4 * (6 * 224 + 3 * 96)


def test_an_sclass_run_of_linear_probes_counts_their_one_layer(bench):
    results = {"classes": ["x", "y"], "probe_family": "linear", "rank": None, "epochs_trained": 2,
               "config": {"probe": {"module": {"hidden_dim": 8}, "batch_size": 2}},
               "data_summary": {"train": {"contexts": 6}, "dev": {"contexts": 3}},
               "extraction_skipped_rows": {"train": 0, "dev": 0}, "test": {"micro_f1": 0.5}}
    # layers 4 -> 2: one product of 8; forward 16, train 16 + 16; 2 classes, no control task
    assert bench.run_flops(results)["flops"] == 2 * 2 * (6 * 32 + 3 * 16)
