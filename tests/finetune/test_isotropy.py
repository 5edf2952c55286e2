"""The cosine regulariser's O(N d) closed form against its O(N² d) definition and hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from probing.finetune.isotropy import mean_pairwise_cosine, mean_pairwise_cosine_by_pairs


def test_hand_computed_cases():
    # Two orthogonal vectors and their opposite: cosines 0, 0, -1 (and symmetric): mean over 6 ordered pairs -1/3.
    vectors = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])
    assert float(mean_pairwise_cosine(vectors)) == pytest.approx(-1 / 3)
    # All rows in one direction (any lengths): every cosine is 1.
    assert float(mean_pairwise_cosine(torch.tensor([[1.0, 1.0], [2.0, 2.0], [5.0, 5.0]]))) == pytest.approx(1.0)
    # Two vectors at 60 degrees.
    assert float(mean_pairwise_cosine(torch.tensor([[1.0, 0.0], [0.5, math.sqrt(3) / 2]]))) == pytest.approx(0.5)


@pytest.mark.parametrize("shape,shift", [((50, 8), 0.0), ((200, 32), 3.0), ((7, 300), -1.0)])
def test_closed_form_equals_the_pairwise_definition(shape, shift):
    vectors = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[0])) + shift
    assert float(mean_pairwise_cosine(vectors)) == pytest.approx(float(mean_pairwise_cosine_by_pairs(vectors)),
                                                                 abs=1e-5)


def test_the_gradient_pulls_rows_apart():
    vectors = (torch.randn(20, 4, generator=torch.Generator().manual_seed(0)) + 2.0).requires_grad_()
    before = float(mean_pairwise_cosine(vectors))
    mean_pairwise_cosine(vectors).backward()
    with torch.no_grad():
        vectors -= 0.5 * vectors.grad
    assert float(mean_pairwise_cosine(vectors)) < before


def test_fewer_than_two_rows_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        mean_pairwise_cosine(torch.ones(1, 3))
