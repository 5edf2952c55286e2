"""ScalarMix: the ELMo layer mix of Peters et al. 2018 (Eq. 1, §3.3, §5.1), checked against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from probing.errors import ConfigError
from probing.probes.components import ScalarMix

# three layers (layer 0 = embeddings first), batch dims (2,), D = 2; the second position is all zeros
LAYERS = torch.tensor(
    [
        [[1.0, 2.0], [0.0, 0.0]],
        [[3.0, 4.0], [0.0, 0.0]],
        [[5.0, 9.0], [0.0, 0.0]],
    ]
)


def test_initial_mix_is_the_plain_average_of_all_layers_and_gamma_scales_it():
    mix = ScalarMix(3)
    torch.testing.assert_close(mix.normalized_weights(), torch.full((3,), 1 / 3))
    torch.testing.assert_close(mix(LAYERS), torch.tensor([[3.0, 5.0], [0.0, 0.0]]))
    # extra batch dims are kept: (L, B, T, D) -> (B, T, D)
    assert mix(LAYERS.reshape(3, 1, 2, 2)).shape == (1, 2, 2)
    with torch.no_grad():
        mix.gamma.fill_(2.5)
    torch.testing.assert_close(mix(LAYERS), torch.tensor([[7.5, 12.5], [0.0, 0.0]]))


def test_initial_weights_give_the_softmax_weighted_mix():
    # softmax([0, ln 2, ln 5]) = [1, 2, 5] / 8
    mix = ScalarMix(3, initial_weights=[0.0, math.log(2), math.log(5)])
    torch.testing.assert_close(mix.normalized_weights(), torch.tensor([1 / 8, 2 / 8, 5 / 8]))
    # (1*1 + 2*3 + 5*5) / 8 = 4,  (1*2 + 2*4 + 5*9) / 8 = 6.875
    torch.testing.assert_close(mix(LAYERS)[0], torch.tensor([4.0, 6.875]))


def test_layer_norm_statistics_use_only_unmasked_elements():
    # batch of 3 positions, D = 2, the last position is padding holding huge values
    layers = torch.tensor(
        [
            [[1.0, 3.0], [5.0, 7.0], [1e6, -1e6]],  # unmasked 1, 3, 5, 7: mean 4, var (9+1+1+9)/4 = 5
            [[2.0, 2.0], [2.0, 6.0], [-1e6, 1e6]],  # unmasked 2, 2, 2, 6: mean 3, var (1+1+1+9)/4 = 3
        ]
    )
    mask = torch.tensor([True, True, False])
    mix = ScalarMix(2, layer_norm=True, initial_weights=[0.0, 0.0])
    out = mix(layers, mask)
    r5, r3 = math.sqrt(5), math.sqrt(3)
    expected_unmasked = 0.5 * torch.tensor(
        [
            [-3 / r5 - 1 / r3, -1 / r5 - 1 / r3],
            [1 / r5 - 1 / r3, 3 / r5 + 3 / r3],
        ]
    )
    torch.testing.assert_close(out[:2], expected_unmasked)
    # the padding is normalised with the same per-layer statistics (allennlp), it just never enters them
    expected_padding = 0.5 * torch.tensor([(1e6 - 4) / r5 + (-1e6 - 3) / r3, (-1e6 - 4) / r5 + (1e6 - 3) / r3])
    torch.testing.assert_close(out[2], expected_padding)
    # whatever the padding holds (even inf), the unmasked output is unchanged
    layers[:, 2] = float("inf")
    torch.testing.assert_close(mix(layers, mask)[:2], expected_unmasked)
    # a constant layer normalises to 0 (eps keeps it finite), without a mask everything counts
    torch.testing.assert_close(ScalarMix(1, layer_norm=True)(torch.full((1, 2, 2), 7.0)), torch.zeros(2, 2))
    no_mask = ScalarMix(1, layer_norm=True)(torch.tensor([[[0.0, 2.0], [4.0, 6.0]]]))  # mean 3, var 5
    torch.testing.assert_close(no_mask, torch.tensor([[-3.0, -1.0], [1.0, 3.0]]) / r5)


def test_l2_penalty_is_on_pre_softmax_weights():
    mix = ScalarMix(3, l2_lambda=0.1, initial_weights=[1.0, -2.0, 0.5])
    penalty = mix.l2_penalty()
    assert penalty.dim() == 0
    assert penalty.item() == pytest.approx(0.1 * (1 + 4 + 0.25))
    assert ScalarMix(3, initial_weights=[1.0, -2.0, 0.5]).l2_penalty().item() == 0.0


def test_parameter_group_has_its_lr_and_no_weight_decay():
    mix = ScalarMix(4)
    group = mix.parameter_group(0.3)
    assert group["lr"] == 0.3 and group["weight_decay"] == 0.0
    assert group["params"][0] is mix.weights and group["params"][1] is mix.gamma
    optimizer = torch.optim.AdamW([group], lr=1e-3, weight_decay=0.5)
    assert optimizer.param_groups[0]["weight_decay"] == 0.0 and optimizer.param_groups[0]["lr"] == 0.3


def test_dropout_acts_on_the_mixed_output_only_in_training():
    mix = ScalarMix(3, dropout=0.5).eval()
    layers = torch.ones(3, 1000, 4) * torch.tensor([1.0, 2.0, 6.0]).view(3, 1, 1)  # average 3
    torch.testing.assert_close(mix(layers), torch.full((1000, 4), 3.0))
    torch.manual_seed(0)
    train_out = mix.train()(layers)
    # inverted dropout of the mix itself: every element is either dropped or 3 / (1 - 0.5)
    kept = train_out[train_out != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 6.0))
    assert 0.45 < (train_out == 0).float().mean().item() < 0.55


def test_gradient_reaches_weights_and_gamma():
    mix = ScalarMix(3)
    mix(LAYERS).sum().backward()
    # layer sums S = (3, 7, 14), mix sum = 8; d/dgamma = 8, d/dw_j = gamma * s_j * (S_j - 8) with s_j = 1/3
    assert mix.gamma.grad.item() == pytest.approx(8.0)
    torch.testing.assert_close(mix.weights.grad, torch.tensor([-5 / 3, -1 / 3, 2.0]))
    frozen = ScalarMix(3, trainable=False)
    assert not frozen.weights.requires_grad and not frozen.gamma.requires_grad


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ScalarMix(0), "num_layers >= 1"),
        (lambda: ScalarMix(3, initial_weights=[0.0, 1.0]), "initial_weights has 2 values but num_layers is 3"),
        (lambda: ScalarMix(3, l2_lambda=-0.1), r"^probe.mix.l2_lambda=-0.1 is not a number in \[0, inf\)"),
        (lambda: ScalarMix(3, dropout=1.0), r"^probe.mix.dropout=1.0 is not a number in \[0, 1\). Fix: e.g. "),
        (lambda: ScalarMix(3, layer_norm="no"), r"^probe.mix.layer_norm must be true or false"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ScalarMix(3)(torch.zeros(4, 2, 5)), "expected 3 layers stacked on dim 0.*got 4"),
        (lambda: ScalarMix(3)(torch.zeros(3, 2, 5), torch.ones(3, dtype=torch.bool)), r"mask shape \(3,\)"),
    ],
)
def test_invalid_inputs_raise_with_expected_and_got(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def _fit_one_layer(l2_lambda: float, num_layers: int = 3, target_layer: int = 1) -> torch.Tensor:
    """Train only the mix (Adam, lr 0.1, 200 steps) to reproduce one layer exactly; return the final s."""
    torch.manual_seed(0)
    layers = torch.randn(num_layers, 32, 8)
    mix = ScalarMix(num_layers, l2_lambda=l2_lambda)
    optimizer = torch.optim.Adam([mix.parameter_group(0.1)])
    for _ in range(200):
        optimizer.zero_grad()
        loss = F.mse_loss(mix(layers), layers[target_layer]) + mix.l2_penalty()
        loss.backward()
        optimizer.step()
    return mix.normalized_weights()


def test_peters_5_1_large_lambda_keeps_the_average_small_lambda_lets_weights_move():
    free = _fit_one_layer(l2_lambda=0.0)
    assert free[1] > 0.9
    regularised = _fit_one_layer(l2_lambda=1.0)
    assert regularised.argmax().item() == 1  # the data still pulls towards the target layer...
    # ...but lambda * ||w||^2 holds it near 1/3. The weights settle (by ~100 steps) where the penalty gradient
    # 2w balances the O(1) MSE gradient of unit-variance layers: max |s_j - 1/3| is ~0.08-0.11 across seeds,
    # against ~0.64 without the penalty; 0.15 leaves a margin and still rules out any real concentration.
    assert (regularised - 1 / 3).abs().max() < 0.15


def test_center_of_gravity_is_the_expected_layer_under_the_weights():
    # Tenney et al. (2019): sum_j j * s_j; s = (0.1, 0.2, 0.7) gives 0 * 0.1 + 1 * 0.2 + 2 * 0.7 = 1.6
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.weights.copy_(torch.log(torch.tensor([0.1, 0.2, 0.7])))
    assert mix.center_of_gravity() == pytest.approx(1.6)
    summary = mix.summary()
    assert summary["mix_weights"] == pytest.approx([0.1, 0.2, 0.7])
    assert summary["center_of_gravity"] == pytest.approx(1.6)
