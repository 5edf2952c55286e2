"""The mass-mean probe (Marks & Tegmark 2024): its direction computed by hand in numpy and by the reference code's
definition (their MMProbe.from_data: the difference of the class means; for "iid", the pseudo-inverse of the pooled
within-class covariance with atol 1e-3 times it), and its scale and bias, a one-number logistic regression."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probing.errors import ConfigError
from probing.probes.components.families import logistic_1d, mass_mean


def blobs(seed: int = 0, n: int = 200, d: int = 5, separation: float = 1.0):
    rng = np.random.default_rng(seed)
    labels = (np.arange(n) % 2).astype(np.int64)
    mixing = rng.normal(size=(d, d))
    x = rng.normal(size=(n, d)) @ mixing + separation * np.outer(labels, rng.normal(size=d)) + 3.0
    return torch.from_numpy(x).float(), torch.from_numpy(labels)


def test_the_direction_is_the_difference_of_the_class_means():
    x, y = blobs()
    xs, ys = x.double().numpy(), y.numpy()
    by_hand = xs[ys == 1].sum(0) / (ys == 1).sum() - xs[ys == 0].sum(0) / (ys == 0).sum()
    np.testing.assert_allclose(mass_mean().direction(x, y).numpy(), by_hand, rtol=1e-9)


def test_the_whitened_direction_is_the_reference_codes():
    x, y = blobs(1)
    xs, ys = x.double(), y
    positive, negative = xs[ys == 1], xs[ys == 0]
    direction = positive.mean(0) - negative.mean(0)
    centred = torch.cat([positive - positive.mean(0), negative - negative.mean(0)], 0)
    covariance = centred.t() @ centred / xs.shape[0]
    reference = torch.linalg.pinv(covariance, hermitian=True, atol=1e-3) @ direction  # x @ inv @ direction's vector
    np.testing.assert_allclose(mass_mean(whiten=True).direction(x, y).numpy(), reference.numpy(), rtol=1e-8)
    # by hand in numpy: the pooled within-class covariance, inverted (it is well conditioned here)
    xn, yn = x.double().numpy(), y.numpy()
    within = sum((xn[yn == k] - xn[yn == k].mean(0)).T @ (xn[yn == k] - xn[yn == k].mean(0)) for k in (0, 1)) / len(xn)
    np.testing.assert_allclose(reference.numpy(), np.linalg.solve(within, direction.numpy()), rtol=1e-8)


@pytest.mark.parametrize("whiten", [False, True])
def test_the_fitted_head_predicts_sigma_of_a_scaled_shifted_projection(whiten):
    x, y = blobs(2, separation=6.0)
    family = mass_mean(whiten=whiten)
    weight, bias = family.fit(x, y, 2)
    direction = family.direction(x, y)
    assert torch.count_nonzero(weight[0]) == 0 and bias[0] == 0
    scale = float(weight[1].double() @ direction / (direction @ direction))
    assert scale > 0  # the positive class lies along +direction
    np.testing.assert_allclose(weight[1].double().numpy(), scale * direction.numpy(), rtol=1e-5)
    probability = torch.softmax(x @ weight.T + bias, dim=-1)[:, 1]
    shift = float(bias[1])
    np.testing.assert_allclose(probability.double().numpy(),
                               torch.sigmoid(scale * (x.double() @ direction) + shift).numpy(), atol=1e-4)
    assert float(((probability > 0.5).long() == y).float().mean()) > 0.9


def test_the_scale_and_bias_are_the_logistic_regression_of_the_labels_on_the_score():
    rng = np.random.default_rng(3)
    score = torch.from_numpy(rng.normal(size=500))
    target = torch.from_numpy((rng.random(500) < 1 / (1 + np.exp(-(2.0 * score.numpy() - 0.5)))).astype(float))
    a, b = logistic_1d(score, target, ridge=0.0)
    # at the optimum the gradient of the mean cross-entropy is zero (the normal equations of logistic regression)
    p = torch.sigmoid(a * score + b)
    assert float((p - target).mean()) == pytest.approx(0.0, abs=1e-9)
    assert float(((p - target) * score).mean()) == pytest.approx(0.0, abs=1e-9)
    assert a == pytest.approx(2.0, abs=0.5) and b == pytest.approx(-0.5, abs=0.3)


def test_settings_it_cannot_honour_are_refused():
    with pytest.raises(ConfigError, match="rank=4: the mass-mean probe is fitted in closed form"):
        mass_mean(rank=4)
    with pytest.raises(ConfigError, match="separates two labels .* has 3"):
        mass_mean().check_fits(3, None)
    with pytest.raises(ConfigError, match="layer=mix"):
        mass_mean().check_fits(2, 7)
    assert mass_mean(whiten=True).record()["family"] == "mass_mean_iid"
