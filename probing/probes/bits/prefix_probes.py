"""The prefix probes of the MDL online code (Voita & Titov 2020 §2.2), all of them one module beside a task's probes.

See docs/word_tasks.md, 'MDL probing, online code'.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics import Metric

from probing.errors import ProbingError
from probing.probes.bits import mdl
from probing.probes.components.batched_probes import BatchedProbes, Family
from probing.probes.components.scalar_mix import ScalarMix


def check_block_ends(ends: Iterable[int] | None) -> list[int] | None:
    """The MDL block ends (`mdl.block_ends`): at least one, increasing, the first >= 1."""
    if ends is None:
        return None
    ends = [int(end) for end in ends]
    if not ends or ends[0] < 1 or any(b <= a for a, b in zip(ends, ends[1:])):
        raise ProbingError(f"mdl_block_ends={ends} must be increasing positive example counts (mdl.block_ends gives "
                           "them)")
    return ends


class PrefixProbes(nn.Module):
    """The (S-1) x T prefix probes of one online code (see the module docstring); `heads` is empty when there is
    one block only (S = 1: every label is sent with the uniform code).

    Prefix probes' weights: Voita & Titov train each block's probe to convergence with early stopping; here each
    probe keeps, in memory, the weights of its epoch with the lowest dev cross-entropy (`end_dev_epoch`; the dev
    split is not part of the transmitted data), restored by `restore_best` when fitting ends.
    """

    def __init__(self, block_ends: Sequence[int], num_targets: int, input_dim: int, num_labels: int,
                 family: Family, num_layers: int | None = None, mix: Mapping[str, Any] | None = None):
        super().__init__()
        ends = check_block_ends(block_ends)
        if num_targets < 1:
            raise ValueError(f"num_targets must be >= 1, got {num_targets}")
        self.ends, self.num_targets = ends, num_targets
        self.num_prefixes = len(ends) - 1
        self.heads = nn.ModuleList(
            PrefixHead(num_targets, input_dim, num_labels, family, num_layers, mix) for _ in range(self.num_prefixes))
        self.register_buffer("block_ends", torch.tensor(ends, dtype=torch.long), persistent=False)
        self.dev_loss = HeadLoss(self.num_prefixes * num_targets)
        self.best: dict[str, Any] | None = None  # {"state", "loss" (heads,), "epoch" (heads,)}

    def losses(self, features: Tensor, targets: Tensor, order: Tensor | None) -> Tensor:
        """(prefixes, T): each probe's mean cross-entropy over the rows of its prefix (0 without any); targets (B, T)
        int64, order (B,) the rows' positions in the MDL order."""
        if order is None:
            raise ProbingError("MDL probing needs each training example's position in the MDL order (the batch key "
                               "`order`), but the training batches have none. Fix: build the datamodule with the "
                               "online code (its argument online_code), which orders the training examples")
        losses = []
        for prefix in range(self.num_prefixes):
            rows = (order < self.block_ends[prefix]).nonzero().flatten()
            if rows.numel() == 0:
                losses.append(features.new_zeros(self.num_targets))
                continue
            logits = self.heads[prefix](features[rows])  # (b, T, K)
            per_row = F.cross_entropy(logits.flatten(0, 1), targets[rows].flatten(), reduction="none")
            losses.append(per_row.view(-1, self.num_targets).mean(dim=0))
        return torch.stack(losses) if losses else features.new_zeros(0, self.num_targets)

    def penalty(self) -> Tensor | float:
        return sum(head.penalty() for head in self.heads)

    def parameter_groups(self, mix_lr: float | None = None) -> list[dict]:
        return [group for head in self.heads for group in head.parameter_groups(mix_lr)]

    def update_dev(self, features: Tensor, targets: Tensor) -> None:
        """Add a dev batch to each probe's dev cross-entropy (every probe scores every dev row)."""
        if not self.num_prefixes:
            return
        logits = torch.cat([head(features) for head in self.heads], dim=1)  # (B, prefixes * T, K)
        per_row = F.cross_entropy(logits.flatten(0, 1).float(), targets.repeat(1, self.num_prefixes).flatten(),
                                  reduction="none")
        self.dev_loss.update(per_row.view(logits.shape[:2]))

    def end_dev_epoch(self, epoch: int, keep: bool) -> None:
        """Close a dev pass; with `keep` (a fitting epoch, not the sanity check), keep each probe's weights if its dev
        cross-entropy is its lowest so far."""
        if not self.num_prefixes or not self.dev_loss.update_called:
            return
        loss = self.dev_loss.compute().detach().cpu()
        self.dev_loss.reset()
        if keep:
            self._keep_best(loss, epoch)

    def state_of_heads(self) -> list[dict[str, Tensor]]:
        """Each prefix's `PrefixHead.state_of_heads` (a detached copy, its T probes on dim 0)."""
        return [head.state_of_heads() for head in self.heads]

    def _keep_best(self, loss: Tensor, epoch: int) -> None:
        """loss (prefixes * T,): this epoch's dev cross-entropy of each probe, prefix-major."""
        if self.best is None:
            improved = torch.isfinite(loss)
            self.best = {"state": self.state_of_heads(), "loss": torch.full_like(loss, math.inf),
                         "epoch": torch.full(loss.shape, -1, dtype=torch.long)}
        else:
            improved = loss < self.best["loss"]
            for prefix, current in enumerate(self.state_of_heads()):
                better = improved[self.heads_of(prefix)]
                for name, value in self.best["state"][prefix].items():
                    value[better.to(value.device)] = current[name][better.to(value.device)]
        self.best["loss"][improved] = loss[improved]
        self.best["epoch"][improved] = epoch

    def heads_of(self, prefix: int) -> slice:
        """The positions of prefix `prefix`'s T probes in the prefix-major order of the dev losses."""
        return slice(prefix * self.num_targets, (prefix + 1) * self.num_targets)

    def restore_best(self) -> None:
        if self.best is None:
            return
        kept = self.best["epoch"] >= 0
        for prefix, head in enumerate(self.heads):
            head.copy_heads_(self.best["state"][prefix], kept[self.heads_of(prefix)].to(self.block_ends.device))

    def best_epochs(self) -> list[list[int]]:
        """(prefixes, T): the epoch whose weights each probe kept (-1: the last epoch, no dev split)."""
        epochs = self.best["epoch"] if self.best is not None else torch.full((self.num_prefixes * self.num_targets,),
                                                                             -1)
        return epochs.view(self.num_prefixes, self.num_targets).tolist()

    @torch.no_grad()
    def online_code(self, batches: Iterable[tuple[Tensor, Tensor, Tensor]], num_labels: int,
                    task_columns: slice, control_columns: slice | None = None) -> dict[str, Any]:
        """`mdl.summary` of the labels in the target columns `task_columns` (and of the control task's, in
        `control_columns`), each example sending one label per column, plus `prefix_best_epochs` (and
        `control_prefix_best_epochs`): per prefix, the epoch its probes kept (a list per prefix when a task has
        several columns). `batches` as `block_bits`; run after fitting, in eval mode."""
        was_training = self.training
        self.eval()
        try:
            bits = self.block_bits(batches)
        finally:
            self.train(was_training)
        epochs = torch.tensor(self.best_epochs(), dtype=torch.long).view(self.num_prefixes, self.num_targets)
        columns = {"": task_columns, "control_": control_columns}
        per_task = {name: bits[:, cols].sum(dim=1).tolist() for name, cols in columns.items() if cols is not None}
        labels_per_example = len(range(self.num_targets)[task_columns])
        result = mdl.summary(num_labels, self.ends, per_task[""], per_task.get("control_"), labels_per_example)
        for name, cols in columns.items():
            if cols is not None:
                result[f"{name}prefix_best_epochs"] = [row[0] if len(row) == 1 else row
                                                       for row in epochs[:, cols].tolist()]
        return result

    @torch.no_grad()
    def block_bits(self, batches: Iterable[tuple[Tensor, Tensor, Tensor]]) -> Tensor:
        """(prefixes, T) float64: the bits of block p+1 under prefix probe p, sum -log2 p(y | x), per target column.

        `batches`: (features, targets (B, T), order (B,)) holding every training example exactly once, in any
        order; run in eval mode on the module's device (the caller switches modes)."""
        device = self.block_ends.device
        ends = self.block_ends
        bits = torch.zeros(self.num_prefixes, self.num_targets, dtype=torch.float64, device=device)
        counts = torch.zeros(len(ends) + 1, dtype=torch.long, device=device)
        for features, targets, order in batches:
            features, targets, order = features.to(device).float(), targets.to(device), order.to(device)
            counts += torch.bucketize(order, ends, right=True).bincount(minlength=len(ends) + 1)
            for prefix in range(self.num_prefixes):
                rows = ((order >= ends[prefix]) & (order < ends[prefix + 1])).nonzero().flatten()
                if rows.numel():
                    logits = self.heads[prefix](features[rows]).double()
                    nll = -logits.log_softmax(dim=-1).gather(-1, targets[rows][..., None])[..., 0]
                    bits[prefix] += nll.sum(dim=0) / math.log(2)
        expected = torch.cat([torch.diff(ends, prepend=ends.new_zeros(1)), ends.new_zeros(1)])
        if not torch.equal(counts, expected):
            raise ProbingError(f"codelength got {counts.tolist()} training examples per MDL block, expected "
                               f"{expected.tolist()}: the batches must hold every training example exactly once. Fix: "
                               "pass the whole training split, unshuffled, not dropping the last batch")
        return bits


class PrefixHead(nn.Module):
    """The probes of one MDL prefix (one per target column): `BatchedProbes`, with optional ELMo scalar mixes in front,
    one per probe (a task's `ProbeHead` has one mix for all its probes).

    With `num_layers` set, features are (B, num_layers, D) and each head gets its own `ScalarMix` (options in `mix`:
    layer_norm, dropout, l2_lambda): the heads are independent models, so none shares its layer weights. With one
    head this is ProbeHead's single mix; with several, each head's mixed vector is its own input (heads, B, D), read
    by the head's first layer alone.
    """

    def __init__(self, num_heads: int, input_dim: int, num_labels: int, family: Family,
                 num_layers: int | None = None, mix: Mapping[str, Any] | None = None):
        super().__init__()
        self.mixes = (nn.ModuleList(ScalarMix(num_layers, **dict(mix or {})) for _ in range(num_heads))
                      if num_layers is not None else None)
        self.probes = BatchedProbes(num_heads, input_dim, num_labels, family)

    @property
    def num_heads(self) -> int:
        return self.probes.num_heads

    def forward(self, features: Tensor) -> Tensor:
        """features (B, D), or (B, num_layers, D) with a mix -> logits (B, heads, K)."""
        if self.mixes is not None:
            if features.dim() != 3:
                raise ValueError(
                    f"the scalar mix needs features of shape (batch, layers, dim), got {tuple(features.shape)}")
            layers = features.transpose(0, 1)
            features = (self.mixes[0](layers) if len(self.mixes) == 1
                        else torch.stack([mix(layers) for mix in self.mixes]))
        return self.probes(features)

    def penalty(self) -> Tensor | float:
        """The probes' elastic-net terms (`BatchedProbes.penalty`, each probe's on its own weights) and the mixes' L2
        penalties on their pre-softmax weights, summed (0 when neither is set). With l1 or l2 set, a prefix probe
        gets its penalty's gradient at every step, also one whose prefix has no row in the batch."""
        return self.probes.penalty() + (sum(mix.l2_penalty() for mix in self.mixes) if self.mixes is not None else 0.0)

    def parameter_groups(self, mix_lr: float | None = None) -> list[dict]:
        """The probes' parameters (the optimizer's own lr and weight decay); the mixes' as one group of their own
        (mix_lr, the optimizer's lr when None; no weight decay, see `ScalarMix.parameter_group`)."""
        groups = [{"params": list(self.probes.parameters())}]
        if self.mixes is not None:
            group = self.mixes[0].parameter_group(mix_lr)
            groups.append({**group, "params": [p for mix in self.mixes for p in mix.parameter_group()["params"]]})
        return groups

    def state_of_heads(self) -> dict[str, Tensor]:
        """A detached copy of every parameter, heads on dim 0 (the mixes' weights and gammas stacked)."""
        state = {f"probes.{name}": value for name, value in self.probes.state_of_heads().items()}
        if self.mixes is not None:
            state["mix.weights"] = torch.stack([mix.weights.detach() for mix in self.mixes]).clone()
            state["mix.gamma"] = torch.stack([mix.gamma.detach() for mix in self.mixes]).clone()
        return state

    @torch.no_grad()
    def copy_heads_(self, state: Mapping[str, Tensor], heads: Tensor) -> None:
        """Load the heads selected by `heads` (bool (num_heads,)) from `state` (as `state_of_heads` gives it)."""
        self.probes.copy_heads_({name.removeprefix("probes."): value for name, value in state.items()
                                 if name.startswith("probes.")}, heads)
        if self.mixes is not None:
            for h in torch.as_tensor(heads).nonzero().flatten().tolist():
                self.mixes[h].weights.copy_(state["mix.weights"][h])
                self.mixes[h].gamma.copy_(state["mix.gamma"][h])


class HeadLoss(Metric):
    """The mean cross-entropy of each of `num_heads` probes over all rows seen (synced across processes)."""

    full_state_update = False

    def __init__(self, num_heads: int):
        super().__init__()
        self.add_state("total", default=torch.zeros(num_heads, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("rows", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, per_row: Tensor) -> None:
        """per_row (B, heads) losses."""
        self.total += per_row.double().sum(dim=0)
        self.rows += per_row.shape[0]

    def compute(self) -> Tensor:
        return self.total / self.rows.clamp(min=1)
