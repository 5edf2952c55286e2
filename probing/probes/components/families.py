"""The probe families of Hewitt & Liang (2019) §4, each built by a factory that a config names (`_target_` of
`probe.module`, conf/probe/*.yaml):

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import torch

from probing.data.settings import check_optimizer, choose, require_int, require_number
from probing.errors import ConfigError, setting
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

    closed_form: ClassVar[bool] = False  # fitted by gradient steps (a closed-form family: `MassMeanFamily`)

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


@dataclass(frozen=True)
class MassMeanFamily(ProbeFamily):
    """The mass-mean probe of Marks & Tegmark (2024) §5, two labels (the second the positive one), fitted in closed
    form from the training vectors, no gradient steps: the direction θ = μ+ - μ- of the class means, or with
    `whiten` ("iid" MM) Σ⁺θ, Σ the pooled within-class covariance (each class centred on its own mean, divided by
    N, as their code) and Σ⁺ its pseudo-inverse without the eigenvalues below `atol`. Their probe predicts σ(θᵀx) on
    activations centred beforehand; here the centring and the scale are fitted instead: σ(a·θᵀx + b), with a and b
    the logistic regression of the labels on the one number θᵀx (Newton's method; a tiny ridge on a keeps it finite
    on separable data), so that the probe's cross-entropy (bits, V-information) is that of a calibrated probe. The
    probe is then the linear head [0, a·θ] (K = 2 logits) with bias [0, b]."""

    closed_form: ClassVar[bool] = True

    whiten: bool = False
    atol: float = 1e-3

    def record(self) -> dict[str, Any]:
        return {**super().record(), "whiten": self.whiten, "atol": self.atol}

    def check_fits(self, num_labels: int, num_layers: int | None) -> None:
        """Two labels, one layer (the scalar mix is learned by gradient steps)."""
        if num_labels != 2:
            raise ConfigError(f"probe={self.name} separates two labels (the difference of their means), and the task "
                              f"has {num_labels}. Fix: probe=linear")
        if num_layers is not None:
            raise ConfigError(f"probe={self.name} is fitted in closed form on one layer; layer=mix learns its mix by "
                              "gradient steps. Fix: layer=N, or probe=linear")

    def direction(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(D,) float64: θ, or Σ⁺θ when whitened (see the class docstring)."""
        x = features.double()
        positive, negative = x[labels == 1], x[labels == 0]
        if not len(positive) or not len(negative):
            raise ConfigError(f"probe={self.name} needs training examples of both labels, and one label has none. "
                              "Fix: more training data, or another split seed")
        theta = positive.mean(0) - negative.mean(0)
        if not self.whiten:
            return theta
        centred = torch.cat([positive - positive.mean(0), negative - negative.mean(0)])
        covariance = centred.T @ centred / len(x)
        return torch.linalg.pinv(covariance, hermitian=True, atol=self.atol) @ theta

    def fit(self, features: torch.Tensor, labels: torch.Tensor, num_labels: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight (2, D), bias (2,)) float32 of the fitted probe's linear head."""
        self.check_fits(num_labels, None)
        direction = self.direction(features, labels)
        scale, shift = logistic_1d(features.double() @ direction, labels.double())
        weight = torch.zeros(2, len(direction), dtype=torch.float64)
        weight[1] = scale * direction
        return weight.float(), torch.tensor([0.0, shift], dtype=torch.float32)


def logistic_1d(score: torch.Tensor, target: torch.Tensor, ridge: float = 1e-4,
                steps: int = 100) -> tuple[float, float]:
    """(a, b) minimising the mean cross-entropy of σ(a·score + b) against `target` (0/1) plus ridge/2·a² on the
    standardised score, by Newton's method (two parameters; converged to 1e-10 or `steps`)."""
    centre, spread = score.mean(), score.std().clamp_min(1e-12)
    z = torch.stack([(score - centre) / spread, torch.ones_like(score)], dim=1)
    params = torch.zeros(2, dtype=torch.float64)
    penalty = torch.diag(torch.tensor([ridge, 0.0], dtype=torch.float64))
    for _ in range(steps):
        p = torch.sigmoid(z @ params)
        gradient = z.T @ (p - target) / len(z) + penalty @ params
        hessian = (z * (p * (1 - p))[:, None]).T @ z / len(z) + penalty + 1e-12 * torch.eye(2, dtype=torch.float64)
        step = torch.linalg.solve(hessian, gradient)
        params = params - step
        if float(step.abs().max()) < 1e-10:
            break
    a, b = params.tolist()
    return a / float(spread), b - a * float(centre) / float(spread)


def _family(name: str, hidden_layers: int, hidden_dim: int, rank: int | None, dropout: float, l1: float, l2: float,
            optimizer: Callable[..., torch.optim.Optimizer] | None) -> ProbeFamily:
    require_int(setting("hidden_dim"), hidden_dim, minimum=1)
    require_number(setting("dropout"), dropout, high=1.0, example="0.1")
    require_number(setting("l1"), l1, example="1e-3")
    require_number(setting("l2"), l2, example="1e-5")
    optimizer = DEFAULT_OPTIMIZER if optimizer is None else optimizer
    check_optimizer(optimizer, setting("optimizer"))
    if rank is not None:
        require_int(setting("rank"), rank, minimum=1)
        if hidden_layers:
            raise ConfigError(f"{setting('rank')}={rank} constrains a linear probe (D -> rank -> K), but the probe "
                              f"family is {name}: an MLP's capacity is set by {setting('hidden_dim')}. Fix: "
                              f"{setting('rank')}=null or probe=linear")
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


def mass_mean(whiten: bool = False, atol: float = 1e-3, hidden_dim: int = 1000, rank: int | None = None,
              dropout: float = 0.0, l1: float = 0.0, l2: float = 0.0,
              optimizer: Callable[..., torch.optim.Optimizer] | None = None) -> ProbeFamily:
    """The mass-mean probe of Marks & Tegmark (2024), fitted in closed form (`MassMeanFamily`); `whiten`: their
    "iid" variant, the direction whitened by the pooled within-class covariance (its pseudo-inverse, eigenvalues below
    `atol` dropped, as their code's pinv). The settings of the gradient-trained families are taken (the probe configs
    share them) and recorded; a rank, dropout or elastic net, which nothing here would honour, is refused."""
    for name, value in (("rank", rank), ("dropout", dropout or None), ("l1", l1 or None), ("l2", l2 or None)):
        if value is not None:
            raise ConfigError(f"{setting(name)}={value}: the mass-mean probe is fitted in closed form and has no such "
                              f"setting. Fix: leave {setting(name)} unset, or probe=linear")
    require_number(setting("atol"), atol, example="1e-3")
    return MassMeanFamily("mass_mean_iid" if whiten else "mass_mean", 0, hidden_dim, optimizer=optimizer or
                          DEFAULT_OPTIMIZER, whiten=bool(whiten), atol=float(atol))


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
