"""What one task's probing model trains (the real task's, or the control task's): an optional ELMo scalar mix over
the layers, then the task's probes, all of one family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from probing.probes.components.batched_probes import BatchedProbes, Family
from probing.probes.components.scalar_mix import ScalarMix


class ProbeHead(nn.Module):
    """The `num_probes` probes of one task (the C binary probes of the s-class task, a word task's one K-way probe)
    on one layer, or on a scalar mix of all layers; the probes of `family` (a `ProbeFamily`: `BatchedProbes`).

    With `num_layers` set, features are (B, num_layers, D) and one ScalarMix, shared by the probes of this head, turns
    them into (B, D); `mix` holds its options (layer_norm, dropout, l2_lambda). The mix weights are then one answer for
    the whole task, as in ELMo, where one mix serves one task model. (The MDL prefix probes, independent models, each
    have their own mix: `probing.probes.bits.prefix_probes.PrefixHead`.)
    """

    def __init__(self, num_probes: int, input_dim: int, num_labels: int, family: Family,
                 num_layers: int | None = None, mix: Mapping[str, Any] | None = None):
        super().__init__()
        self.mix = ScalarMix(num_layers, **dict(mix or {})) if num_layers is not None else None
        self.mlps = BatchedProbes(num_probes, input_dim, num_labels, family)

    @property
    def num_probes(self) -> int:
        return self.mlps.num_heads

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features (B, D), or (B, num_layers, D) with a mix -> logits (B, num_probes, K)."""
        if self.mix is not None:
            if features.dim() != 3:
                raise ValueError(
                    f"the scalar mix needs features of shape (batch, layers, dim), got {tuple(features.shape)}")
            features = self.mix(features.transpose(0, 1))
        elif features.dim() != 2:
            raise ValueError(f"expected features of shape (batch, {self.mlps.input_dim}), got {tuple(features.shape)}")
        return self.mlps(features)

    def penalty(self) -> torch.Tensor | float:
        """The probes' elastic-net terms, summed over the probes (`BatchedProbes.penalty`: each probe's term depends on
        its own weights only), plus the mix's L2 penalty on its pre-softmax weights; 0 when neither is set."""
        return self.mlps.penalty() + (self.mix.l2_penalty() if self.mix is not None else 0.0)

    def parameter_groups(self, mix_lr: float | None = None) -> list[dict]:
        """The probes' parameters (with the optimizer's own lr and weight decay); the mix's as its own group (mix_lr,
        the optimizer's lr when None; no weight decay)."""
        groups = [{"params": list(self.mlps.parameters())}]
        if self.mix is not None:
            groups.append(self.mix.parameter_group(mix_lr))
        return groups
