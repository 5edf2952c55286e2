"""Gao et al. (2019)'s cosine regulariser, the isotropy penalty of fine-tuning (`finetune.isotropy_reg=γ`).

    CosReg(W) = mean over pairs i != j of cos(w_i, w_j) = (‖Σ_i ŵ_i‖² − N) / (N (N − 1)),   ŵ_i = w_i / ‖w_i‖

The closed form follows from ‖Σ ŵ_i‖² = Σ_i Σ_j ŵ_i·ŵ_j = N + Σ_{i≠j} ŵ_i·ŵ_j: it costs O(N d) instead of the
O(N² d) of the pairs, and shows that the penalty is the squared norm of the mean direction of the rows (Bis et al.
2021, appendix A). Bis et al. write it with a 1/N² factor and the −N outside the fraction; that differs from the mean
over pairs by a constant scale and offset only, which changes γ's meaning, not the minimiser. Here γ multiplies the
mean pairwise cosine, so γ = 0.1 adds at most 0.1 to the loss.
"""

from __future__ import annotations

import torch
from torch import Tensor


def mean_pairwise_cosine(vectors: Tensor, eps: float = 1e-12) -> Tensor:
    """Mean cosine similarity over all ordered pairs i != j of the rows of `vectors` (N, d), N >= 2, in O(N d)."""
    count = vectors.shape[0]
    if count < 2:
        raise ValueError(f"the mean pairwise cosine needs at least 2 vectors, got {count}")
    unit = vectors.float() / vectors.float().norm(dim=1, keepdim=True).clamp_min(eps)
    total = unit.sum(dim=0)
    return (total.dot(total) - count) / (count * (count - 1))


def mean_pairwise_cosine_by_pairs(vectors: Tensor) -> Tensor:
    """The definition itself, O(N² d): for checking the closed form on small inputs."""
    unit = torch.nn.functional.normalize(vectors.float(), dim=1)
    similarities = unit @ unit.T
    count = vectors.shape[0]
    return (similarities.sum() - similarities.diagonal().sum()) / (count * (count - 1))
