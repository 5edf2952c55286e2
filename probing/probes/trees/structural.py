"""The structural probes of Hewitt & Manning (2019, "A Structural Probe for Finding Syntax in Word Representations"):
one linear map B (D x rank) under which the squared distance of two word vectors predicts their distance in the
dependency tree (`kind="distance"`: ‖B(hᵢ − hⱼ)‖²) and the squared norm of a word vector its depth (`kind="depth"`:
‖B hᵢ‖²).

See docs/structural.md, 'Probes and training'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from probing.data.settings import choose
from probing.errors import ConfigError, setting
from probing.probes.components.batched_probes import check_rank_within
from probing.probes.components.families import ProbeFamily
from probing.probes.components.scalar_mix import ScalarMix

KINDS = ("distance", "depth")
INIT_BOUND = 0.05  # the reference's uniform initialisation of B


class StructuralHead(nn.Module):
    """B of one task (the real tree's, or the control tree's), on one layer or on an ELMo scalar mix of all layers
    (with `num_layers`: features (B, T, num_layers, D) are mixed into (B, T, D) first, `mix` its options).

    forward: features (B, T, D) -> (B, T, T) predicted squared distances, or (B, T) predicted squared norms (depths);
    positions beyond a sentence's length hold padding and give meaningless values, which the loss and the metrics
    leave out."""

    def __init__(self, input_dim: int, rank: int, kind: str, num_layers: int | None = None,
                 mix: Mapping[str, Any] | None = None):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.mix = ScalarMix(num_layers, **dict(mix or {})) if num_layers is not None else None
        self.proj = nn.Parameter(torch.empty(input_dim, rank))
        nn.init.uniform_(self.proj, -INIT_BOUND, INIT_BOUND)

    @property
    def rank(self) -> int:
        return self.proj.shape[1]

    def forward(self, features: Tensor) -> Tensor:
        if self.mix is not None:
            if features.dim() != 4:
                raise ValueError(
                    f"the scalar mix needs features of shape (batch, words, layers, dim), got {tuple(features.shape)}")
            features = self.mix(features.permute(2, 0, 1, 3))
        projected = features @ self.proj.to(features.dtype)  # (B, T, rank)
        norms = projected.pow(2).sum(dim=-1)  # (B, T)
        if self.kind == "depth":
            return norms
        gram = projected @ projected.transpose(1, 2)  # (B, T, T)
        return (norms[:, :, None] + norms[:, None, :] - 2 * gram).clamp_min(0)

    def penalty(self) -> Tensor | float:
        """The mix's L2 penalty on its pre-softmax weights (0 without a mix)."""
        return self.mix.l2_penalty() if self.mix is not None else 0.0

    def parameter_groups(self, mix_lr: float | None = None) -> list[dict]:
        """B with the optimizer's own settings; the mix's parameters as their own group (no weight decay)."""
        groups = [{"params": [self.proj]}]
        if self.mix is not None:
            groups.append(self.mix.parameter_group(mix_lr))
        return groups


@dataclass(frozen=True)
class StructuralMap:
    """The family of a structural probe: B of `kind`, of rank `family.rank` (full rank D when None), trained with
    `family.optimizer`; `family` is the linear family it was made from (what results and saved settings record)."""

    kind: str
    family: ProbeFamily

    @property
    def rank(self) -> int | None:
        return self.family.rank

    @property
    def optimizer(self) -> Callable[..., torch.optim.Optimizer]:
        return self.family.optimizer

    def record(self) -> dict[str, Any]:
        return self.family.record()

    def head(self, num_probes: int, input_dim: int, num_outputs: int | None = None, num_layers: int | None = None,
             mix: Mapping[str, Any] | None = None) -> StructuralHead:
        """B of one task (`num_probes` is 1, `num_outputs` unused: B predicts distances or depths, not labels)."""
        check_rank_within(self.rank, input_dim)
        return StructuralHead(input_dim, self.rank or input_dim, self.kind, num_layers, mix)


def structural_map(family: ProbeFamily, kind: str) -> StructuralMap:
    """B of `kind` ("distance" or "depth") from the run's probe family: a structural probe is one linear map B, so
    another family, dropout and an elastic-net penalty, which it would not honour, are refused."""
    kind = choose("kind", kind, KINDS)
    # the family's settings are named as parts of the argument `family` (probe.py: probe.module.<key>)
    dropout, l1, l2 = setting("family.dropout"), setting("family.l1"), setting("family.l2")
    if not family.linear:
        raise ConfigError(f"the probe family {family.name}: a structural probe is a linear map B (Hewitt & Manning "
                          f"2019), of the linear family. Fix: probe=linear (the tree tasks' default), with "
                          f"{setting('family.rank')}=r for B's rank")
    if family.dropout:
        raise ConfigError(f"{dropout}={family.dropout}: a structural probe is trained without dropout, as "
                          f"the reference. Fix: {dropout}=0")
    if family.l1 or family.l2:
        raise ConfigError(f"{l1}={family.l1}, {l2}={family.l2}: a structural probe is trained "
                          f"without an elastic-net penalty. Fix: {l1}=0 {l2}=0")
    return StructuralMap(kind, family)
