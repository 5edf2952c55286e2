"""Bits from probes (probing.probes.bits.information): cross-entropies and priors against hand-computed values, the
least-dev-cross-entropy selection, and the joined [X; R] splits of conditional probing."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from probing.probes.bits.information import (
    CrossEntropyBits,
    LeastDevCrossEntropy,
    prior_bits,
    split_information,
)
from probing.probes.word_data import ConcatenatedSplit, GatheredSplit


def test_cross_entropy_in_bits_matches_the_hand_computed_values():
    metric = CrossEntropyBits(num_probes=2)
    # probe 0: uniform over 2 outputs (1 bit each); probe 1: p(target) = 3/4 then 1/4
    logits = torch.tensor([[[0.0, 0.0], [math.log(3), 0.0]],
                           [[0.0, 0.0], [math.log(3), 0.0]]], dtype=torch.float64)
    targets = torch.tensor([[1, 0], [0, 1]])
    metric.update(logits[:1], targets[:1])
    metric.update(logits[1:], targets[1:])  # streamed over batches
    expected = [1.0, (-math.log2(0.75) - math.log2(0.25)) / 2]
    assert metric.compute().tolist() == pytest.approx(expected, abs=1e-12)


def test_the_prior_is_add_one_smoothed_and_summed_over_columns():
    train = torch.tensor([[0, 1], [0, 1], [1, 1]])
    evaluated = torch.tensor([[0, 0], [2, 1]])
    # column 0: counts (2, 1, 0) + 1 = (3, 2, 1) / 6; column 1: (0, 3, 0) + 1 = (1, 4, 1) / 6
    column0 = (-math.log2(3 / 6) - math.log2(1 / 6)) / 2
    column1 = (-math.log2(1 / 6) - math.log2(4 / 6)) / 2
    assert prior_bits(train, evaluated, num_outputs=3) == pytest.approx(column0 + column1, abs=1e-12)


def test_a_probe_that_outputs_the_prior_has_no_information():
    train = torch.tensor([[0], [0], [1], [2], [0]])
    evaluated = torch.tensor([[2], [0], [1], [1]])
    counts = torch.bincount(train[:, 0], minlength=3).double() + 1
    metric = CrossEntropyBits(num_probes=1)
    metric.update(torch.log(counts / counts.sum()).float().expand(len(evaluated), 1, 3), evaluated)
    prior = prior_bits(train, evaluated, num_outputs=3)
    bits = split_information({"task": prior}, {"probes": float(metric.compute().sum())})
    assert bits["i_v"] == pytest.approx(0.0, abs=1e-6)
    assert bits["h_y"] == pytest.approx(prior)


def test_split_information_assembles_selectivity_and_the_conditional_bits():
    bits = split_information({"task": 4.0, "control": 3.5},
                             {"probes": 1.0, "control_probes": 3.0, "baseline_probes": 2.0, "joint_probes": 0.75})
    assert bits == {"h_y": 4.0, "h_y_given_r": 1.0, "i_v": 3.0, "control_h_y": 3.5, "control_h_y_given_r": 3.0,
                    "control_i_v": 0.5, "selectivity_bits": 2.5, "h_y_given_x": 2.0, "h_y_given_xr": 0.75,
                    "i_v_x": 2.0, "conditional_i_v": 1.25}


def test_the_selection_keeps_each_heads_epoch_of_least_dev_cross_entropy():
    head = nn.Linear(2, 2)
    selection = LeastDevCrossEntropy()
    kept = None
    for epoch, dev_bits in enumerate([3.0, 1.0, 2.0, float("nan")]):
        with torch.no_grad():
            head.weight.fill_(epoch)
        if epoch == 1:
            kept = head.weight.clone()
        selection.offer("probes", head, dev_bits, epoch)
    chosen = selection.selected("probes", head)
    assert selection.epochs() == {"probes": 1}
    assert torch.equal(chosen.weight, kept) and not torch.equal(head.weight, kept)
    assert not chosen.weight.requires_grad


def gathered(vectors: torch.Tensor, rows: list[int], labels: list[int]) -> GatheredSplit:
    return GatheredSplit(vectors, torch.tensor(rows), None, {"label": torch.tensor(labels)})


def test_the_joined_split_reads_the_same_rows_of_its_parts():
    words = 5
    x_vectors, r_vectors = torch.randn(words, 2), torch.randn(words, 3)
    rows, labels = [4, 0, 2], [1, 0, 1]
    joined = ConcatenatedSplit(gathered(x_vectors, rows, labels), gathered(r_vectors, rows, labels))
    batch = joined[[2, 0]]
    assert torch.equal(batch["features"], torch.cat([x_vectors[[2, 4]], r_vectors[[2, 4]]], dim=1))
    assert batch["label"].tolist() == [1, 1]
    assert joined.feature_shape == (5,) and joined.conditioning_dim == 2 and len(joined) == 3


def test_parts_of_other_words_are_refused():
    vectors = torch.randn(4, 2)
    with pytest.raises(ValueError, match="must read the same words"):
        ConcatenatedSplit(gathered(vectors, [0, 1], [0, 1]), gathered(vectors, [0, 1], [1, 1]))
