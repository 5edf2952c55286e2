"""probing/probes/components/probe_head.py: the C binary probes of one task on one layer, or on one ELMo scalar mix
of all layers shared by the C probes; logits, the mix's penalty and the optimizer's parameter groups by hand."""

from __future__ import annotations

import math

import pytest
import torch

from probing.probes.components.families import mlp1
from probing.probes.components.probe_head import ProbeHead


def hand_set(head: ProbeHead) -> ProbeHead:
    """Two probes, D=2, H=1: probe 0 scores (0, relu(x0)), probe 1 scores (2 relu(x1), 0)."""
    with torch.no_grad():
        mlps = head.mlps
        mlps.w1.copy_(torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]]))
        mlps.b1.zero_()
        mlps.w2.copy_(torch.tensor([[[0.0], [1.0]], [[2.0], [0.0]]]))
        mlps.b2.zero_()
    return head


def test_on_one_layer_the_head_is_the_probes():
    head = hand_set(ProbeHead(num_probes=2, input_dim=2, num_labels=2, family=mlp1(hidden_dim=1)))
    assert head.mix is None
    logits = head(torch.tensor([[3.0, -1.0], [-2.0, 5.0]]))
    assert logits.shape == (2, 2, 2)
    torch.testing.assert_close(logits, torch.tensor([[[0.0, 3.0], [0.0, 0.0]],
                                                     [[0.0, 0.0], [10.0, 0.0]]]))


def test_with_a_mix_the_probes_read_the_weighted_sum_of_the_layers():
    # softmax([0, ln 2, 0]) = (1/4, 1/2, 1/4); gamma = 2
    head = hand_set(ProbeHead(2, 2, 2, mlp1(hidden_dim=1), num_layers=3,
                              mix={"initial_weights": [0.0, math.log(2), 0.0]}))
    with torch.no_grad():
        head.mix.gamma.fill_(2.0)
    layers = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]]])          # (B=1, layers=3, D=2)
    # mixed = 2 * (1/4 (1, 2) + 1/2 (3, 4) + 1/4 (5, 0)) = 2 * (3, 2.5) = (6, 5)
    torch.testing.assert_close(head(layers), torch.tensor([[[0.0, 6.0], [10.0, 0.0]]]))


def test_the_default_mix_is_the_plain_average_of_the_layers():
    torch.manual_seed(0)
    head = ProbeHead(3, 4, 2, mlp1(hidden_dim=5), num_layers=2)
    layers = torch.randn(6, 2, 4)
    torch.testing.assert_close(head(layers), head.mlps(layers.mean(dim=1)))


def test_one_mix_serves_every_probe_of_the_head():
    for probes in (1, 26):
        head = ProbeHead(probes, 4, 2, mlp1(hidden_dim=3), num_layers=7)
        assert [name for name, _ in head.named_parameters() if name.startswith("mix.")] == ["mix.weights",
                                                                                          "mix.gamma"]
        assert head.mix.weights.shape == (7,)


def test_mix_options_reach_the_mix_and_need_a_layer_count():
    head = ProbeHead(2, 4, 2, mlp1(hidden_dim=3), num_layers=3,
                     mix={"l2_lambda": 0.5, "initial_weights": [1.0, 2.0, 0.0], "dropout": 0.25, "layer_norm": True})
    assert head.mix.layer_norm and head.mix.dropout.p == 0.25
    assert head.penalty().item() == pytest.approx(0.5 * (1 + 4 + 0))
    assert ProbeHead(2, 4, 2, mlp1(hidden_dim=3), mix={"l2_lambda": 0.5}).mix is None  # one layer: no mix used


def test_without_a_mix_there_is_no_penalty():
    assert ProbeHead(2, 4, 2, mlp1(hidden_dim=3)).penalty() == 0.0


def test_a_mix_refuses_features_of_one_layer():
    head = ProbeHead(2, 4, 2, mlp1(hidden_dim=3), num_layers=3)
    with pytest.raises(ValueError, match=r"^the scalar mix needs features of shape \(batch, layers, dim\), got \(5, "):
        head(torch.zeros(5, 4))


def test_parameter_groups_keep_the_mix_apart_without_weight_decay():
    plain = ProbeHead(2, 4, 2, mlp1(hidden_dim=3))
    [group] = plain.parameter_groups(mix_lr=0.5)
    assert [tuple(p.shape) for p in group["params"]] == [(2, 3, 4), (2, 3), (2, 2, 3), (2, 2)] and len(group) == 1

    head = ProbeHead(2, 4, 2, mlp1(hidden_dim=3), num_layers=3)
    probes, mix = head.parameter_groups(mix_lr=0.01)
    assert probes["params"] == list(head.mlps.parameters()) and set(probes) == {"params"}
    assert mix["params"] == [head.mix.weights, head.mix.gamma] and (mix["lr"], mix["weight_decay"]) == (0.01, 0.0)
    assert "lr" not in head.parameter_groups()[1]  # the optimizer's own lr

    optimizer = torch.optim.AdamW(head.parameter_groups(mix_lr=0.01), lr=1e-3, weight_decay=0.1)
    assert [(g["lr"], g["weight_decay"]) for g in optimizer.param_groups] == [(1e-3, 0.1), (0.01, 0.0)]
