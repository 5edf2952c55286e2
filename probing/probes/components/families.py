"""The probe families of Hewitt & Liang (2019) §4, each built by a factory that a config names (`_target_` of
`probe.module`, conf/probe/*.yaml):

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from probing.data.settings import check_optimizer, choose, require_int, require_number
from probing.errors import ConfigError
from probing.probes.components.batched_probes import BatchedProbes
from probing.probes.components.probe_head import ProbeHead
from probing.vocabulary import PROBE_FAMILIES

# fused: one pass over parameters, gradients and moments instead of ~10 (the Adam step of ~10M probe weights is
# memory-bound)
DEFAULT_OPTIMIZER = partial(torch.optim.Adam, lr=1e-3, fused=True)


@dataclass(frozen=True)
class ProbeFamily:
    """A probe family with its settings (see the module docstring): `hidden_layers` ReLU layers of `hidden_dim` units
    (none: a linear probe, rank-constrained with `rank`), `dropout`, the elastic net `l1`, `l2` and the `optimizer`
    (a partial taking the parameter groups)."""

    name: str
    hidden_layers: int
    hidden_dim: int = 1000
    rank: int | None = None
    dropout: float = 0.0
    l1: float = 0.0
    l2: float = 0.0
    optimizer: Callable[..., torch.optim.Optimizer] = field(default=DEFAULT_OPTIMIZER, compare=False)

    @property
    def linear(self) -> bool:
        """No hidden layer: nothing between the (one or two) affine maps."""
        return self.hidden_layers == 0

    def layer_sizes(self, input_dim: int, num_labels: int) -> list[int]:
        """The sizes of one probe's layers, input first: [D, K] for a linear probe ([D, r, K] with rank r), [D, H, K]
        for mlp1, [D, H, H, K] for mlp2."""
        if self.linear:
            return [input_dim, *([self.rank] if self.rank is not None else []), num_labels]
        return [input_dim, *[self.hidden_dim] * self.hidden_layers, num_labels]

    def record(self) -> dict[str, Any]:
        """What saved probes and results record of the family (`from_record` builds it back)."""
        return {"family": self.name, "hidden_dim": self.hidden_dim, "rank": self.rank, "dropout": self.dropout,
                "l1": self.l1, "l2": self.l2}

    @property
    def weight_decay(self) -> float | None:
        """The optimizer's weight decay (part of the family V), when the optimizer is a partial."""
        return getattr(self.optimizer, "keywords", {}).get("weight_decay")

    def probes(self, num_heads: int, input_dim: int, num_labels: int,
               input_mask: torch.Tensor | None = None) -> BatchedProbes:
        """`num_heads` independent probes of this family (`BatchedProbes`)."""
        return BatchedProbes(num_heads, input_dim, num_labels, self, input_mask=input_mask)

    def head(self, num_probes: int, input_dim: int, num_outputs: int, num_layers: int | None = None,
             mix: Mapping[str, Any] | None = None) -> ProbeHead:
        """One task's probes (`ProbeHead`): `num_probes` probes of `num_outputs` logits, on a scalar mix of
        `num_layers` layers when that is set."""
        return ProbeHead(num_probes, input_dim, num_outputs, self, num_layers=num_layers, mix=mix)


def _family(name: str, hidden_layers: int, hidden_dim: int, rank: int | None, dropout: float, l1: float, l2: float,
            optimizer: Callable[..., torch.optim.Optimizer] | None) -> ProbeFamily:
    require_int("probe.module.hidden_dim", hidden_dim, minimum=1)
    require_number("probe.module.dropout", dropout, high=1.0, example="0.1")
    require_number("probe.module.l1", l1, example="1e-3")
    require_number("probe.module.l2", l2, example="1e-5")
    optimizer = DEFAULT_OPTIMIZER if optimizer is None else optimizer
    check_optimizer(optimizer, "probe.module.optimizer")
    if rank is not None:
        require_int("probe.rank", rank, minimum=1)
        if hidden_layers:
            raise ConfigError(f"probe.rank={rank} constrains a linear probe (D -> rank -> K), but the probe family "
                              f"is {name}: an MLP's capacity is set by probe.module.hidden_dim. Fix: probe.rank=null "
                              "or probe=linear")
    return ProbeFamily(name, hidden_layers, hidden_dim, rank, float(dropout), float(l1), float(l2), optimizer)


def linear(hidden_dim: int = 1000, rank: int | None = None, dropout: float = 0.0, l1: float = 0.0, l2: float = 0.0,
           optimizer: Callable[..., torch.optim.Optimizer] | None = None) -> ProbeFamily:
    """A linear probe, D -> K (D -> rank -> K with `rank`); `hidden_dim` is recorded, not used."""
    return _family("linear", 0, hidden_dim, rank, dropout, l1, l2, optimizer)


def mlp1(hidden_dim: int = 1000, rank: int | None = None, dropout: float = 0.0, l1: float = 0.0, l2: float = 0.0,
         optimizer: Callable[..., torch.optim.Optimizer] | None = None) -> ProbeFamily:
    """MLP-1, D -> hidden_dim ReLU -> K (a rank is refused)."""
    return _family("mlp1", 1, hidden_dim, rank, dropout, l1, l2, optimizer)


def mlp2(hidden_dim: int = 1000, rank: int | None = None, dropout: float = 0.0, l1: float = 0.0, l2: float = 0.0,
         optimizer: Callable[..., torch.optim.Optimizer] | None = None) -> ProbeFamily:
    """MLP-2, D -> hidden_dim ReLU -> hidden_dim ReLU -> K (a rank is refused)."""
    return _family("mlp2", 2, hidden_dim, rank, dropout, l1, l2, optimizer)


FACTORIES = dict(zip(PROBE_FAMILIES, (linear, mlp1, mlp2)))  # by the name a family records
RECORDED = ("family", "hidden_dim", "rank", "dropout", "l1", "l2")  # the keys of `ProbeFamily.record`


def from_record(record: Mapping[str, Any], optimizer: Callable[..., torch.optim.Optimizer] | None = None,
                default: str = "mlp1", hidden_dim: int = 1000) -> ProbeFamily:
    """The family that `record` names (`ProbeFamily.record`'s keys: family, hidden_dim, rank, dropout, l1, l2; those
    missing take the factory's defaults, `default` and `hidden_dim` for the first two), as saved probes and the
    keyword settings of tests and analyses give it."""
    name = choose("family", record.get("family", default), PROBE_FAMILIES)
    settings = {key: record[key] for key in ("rank", "dropout", "l1", "l2") if key in record}
    return FACTORIES[name](hidden_dim=record.get("hidden_dim", hidden_dim), optimizer=optimizer, **settings)


def pop_family(settings: dict[str, Any], default: str = "mlp1", hidden_dim: int = 1000) -> ProbeFamily:
    """The family of flat keyword settings (`RECORDED` and `optimizer`, taken out of `settings`): `from_record`."""
    record = {key: settings.pop(key) for key in RECORDED if key in settings}
    return from_record(record, settings.pop("optimizer", None), default, hidden_dim)
