"""Gao et al. (2019)'s cosine regulariser, the isotropy penalty of fine-tuning (γ: the setting `finetune.isotropy_reg`).

See docs/finetuning.md, 'Isotropy penalty' under 'What it does'.
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
