"""bench/neurons.py's measuring code on tiny synthetic data: both sides train the same probes, as plain loops and as
Lightning fits, and their ratios are reported."""

from __future__ import annotations

import importlib.util

import torch

from tests.helpers import REPO


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_neurons", REPO / "bench" / "neurons.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_batched_and_the_separate_probes_are_the_same_probes():
    bench = bench_module()
    groups = bench.batched_heads(input_dim=8, labels=3, rankings=2, hidden_dim=4, seed=0)
    alone = bench.separate_probes(groups)
    assert len(alone) == 2 * 2 * len([1, 2, 4, 8])
    features = torch.randn(5, 8)
    logits = torch.cat([probes(features) for probes in groups.values()], dim=1)
    for head, (probe, columns) in enumerate(alone):
        torch.testing.assert_close(logits[:, head], probe(features[:, columns]), rtol=1e-5, atol=1e-6)


def test_the_comparison_runs_and_reports_both_ratios():
    figures = bench_module().compare(rows=64, input_dim=4, labels=3, rankings=2, hidden_dim=4, epochs=1,
                                     batch_size=32, seed=0)
    assert figures["probes"] == 2 * 2 * 3
    for measure in ("loop", "fit"):
        assert figures[f"{measure}_batched_s"] > 0 and figures[f"{measure}_separate_s"] > 0
        assert figures[f"{measure}_ratio_vs_separate"] == figures[f"{measure}_separate_s"] / figures[
            f"{measure}_batched_s"]
