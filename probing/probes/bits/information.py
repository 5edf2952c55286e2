"""Probing in bits: V-information (Xu et al. 2020) and conditional V-information (Hewitt et al. 2021), read from the
held-out cross-entropies of the probes a run trains.

See docs/information.md, 'Definitions'.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics import Metric

PRIOR_SMOOTHING = 1.0  # add-one: the pseudo-count of every label in the prior
UNIT = "bits per example (the s-class task: summed over its C binary decisions)"
SELECTED_BY = "dev cross-entropy"

# The heads a probe module may train, and what their cross-entropy estimates.
PROBES, CONTROL_PROBES, BASELINE_PROBES, JOINT_PROBES = "probes", "control_probes", "baseline_probes", "joint_probes"


class CrossEntropyBits(Metric):
    """The summed cross-entropy (nats) of P probes' logits (B, P, K) against their targets (B, P), and the number of
    examples; `compute()` gives each probe's mean in bits per example (P,)."""

    full_state_update = False

    def __init__(self, num_probes: int):
        super().__init__()
        self.add_state("nats", default=torch.zeros(num_probes, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, logits: Tensor, targets: Tensor) -> None:
        # in float64: a few thousand examples' sums, and bf16 logits, keep their precision
        nats = F.cross_entropy(logits.flatten(0, 1).double(), targets.flatten().long(), reduction="none")
        # not in place: a state reset under Lightning's inference mode cannot be updated in place outside it
        self.nats = self.nats + nats.view(targets.shape).sum(dim=0)
        self.count = self.count + targets.shape[0]

    def compute(self) -> Tensor:
        return self.nats / self.count.clamp(min=1) / math.log(2)


class LeastDevCrossEntropy:
    """For each head (by name), the weights of its epoch with the least dev cross-entropy, kept in memory."""

    def __init__(self) -> None:
        self.best: dict[str, tuple[float, int, dict[str, Tensor]]] = {}

    def offer(self, name: str, head: nn.Module, dev_bits: float, epoch: int) -> None:
        if math.isfinite(dev_bits) and (name not in self.best or dev_bits < self.best[name][0]):
            self.best[name] = (dev_bits, epoch, copy.deepcopy(head.state_dict()))

    def selected(self, name: str, head: nn.Module) -> nn.Module:
        """A frozen copy of `head` with its kept weights (the head as it is when no epoch was offered)."""
        chosen = copy.deepcopy(head)
        if name in self.best:
            chosen.load_state_dict(self.best[name][2])
        return chosen.requires_grad_(False)

    def epochs(self) -> dict[str, int]:
        return {name: epoch for name, (_, epoch, _) in self.best.items()}


def prior_bits(train_targets: Tensor, eval_targets: Tensor, num_outputs: int,
               smoothing: float = PRIOR_SMOOTHING) -> float:
    """H_V(Y) on the evaluated split: the mean over its examples of -log2 p(y), summed over target columns, p the
    add-`smoothing` prior of each column's training targets. Targets (N, P) with values in [0, num_outputs)."""
    total = 0.0
    for column in range(train_targets.shape[1]):
        counts = torch.bincount(train_targets[:, column].long(), minlength=num_outputs).double() + smoothing
        log_prior = torch.log2(counts / counts.sum())
        total += float(-log_prior[eval_targets[:, column].long()].mean())
    return total


def majority_rates(train_labels: Tensor, labels_of: Mapping[str, Tensor]) -> tuple[int, dict[str, float]]:
    """The most frequent training label (the lowest index among ties) and the share of each split's labels that
    carry it: the accuracy of the best constant guess, as H_V(Y) is its cross-entropy."""
    top = int(torch.bincount(train_labels).argmax())
    return top, {split: float((labels == top).double().mean()) for split, labels in labels_of.items()}


def split_information(prior: Mapping[str, float], conditional: Mapping[str, float]) -> dict[str, float]:
    """One split's bits from the priors ({"task", "control"}) and the heads' cross-entropies (by head name)."""
    bits: dict[str, float] = {}
    if PROBES in conditional:
        bits |= {"h_y": prior["task"], "h_y_given_r": conditional[PROBES],
                 "i_v": prior["task"] - conditional[PROBES]}
    if CONTROL_PROBES in conditional and "control" in prior:
        bits |= {"control_h_y": prior["control"], "control_h_y_given_r": conditional[CONTROL_PROBES],
                 "control_i_v": prior["control"] - conditional[CONTROL_PROBES]}
        if "i_v" in bits:
            bits["selectivity_bits"] = bits["i_v"] - bits["control_i_v"]
    if BASELINE_PROBES in conditional and JOINT_PROBES in conditional:
        bits |= {"h_y_given_x": conditional[BASELINE_PROBES], "h_y_given_xr": conditional[JOINT_PROBES],
                 "i_v_x": prior["task"] - conditional[BASELINE_PROBES],
                 "conditional_i_v": conditional[BASELINE_PROBES] - conditional[JOINT_PROBES]}
    return bits


def record(module: Any, splits: Mapping[str, Any], conditioned_on: str | None = None) -> dict[str, Any]:
    """The `bits` block of results.json: for each split the module scored, H_V(Y), H_V(Y|R), I_V (and the control
    task's, and the conditional ones on the representation `conditioned_on`), with how the probes' epochs were
    selected. `splits`: the datamodule's splits (their `tensors` hold the labels the priors are counted from)."""
    num_outputs, task, control = module.mdl_columns()
    train = module.mdl_targets(splits["train"].tensors)
    block: dict[str, Any] = {"unit": UNIT, "prior_smoothing": PRIOR_SMOOTHING, "selected_by": module.bits_selection,
                             "epochs": module.selection.epochs(), "weight_decay": module.weight_decay}
    if conditioned_on is not None:
        block["conditioned_on"] = conditioned_on
    for split, conditional in module.split_bits.items():
        targets = module.mdl_targets(splits[split].tensors)
        prior = {"task": prior_bits(train[:, task], targets[:, task], num_outputs)}
        if control is not None:
            prior["control"] = prior_bits(train[:, control], targets[:, control], num_outputs)
        block[split] = split_information(prior, conditional)
    return block


# The bits a run's W&B summary shows (`bits/<split>_<key>`).
SCORES = ("i_v", "h_y_given_r", "selectivity_bits", "conditional_i_v")


def scores(results: Mapping[str, Any]) -> dict[str, float]:
    """The `bits` block's headline numbers as `bits/<split>_<key>` (none without a `bits` block)."""
    block = results.get("bits") or {}
    return {f"bits/{split}_{key}": block[split][key] for split in ("dev", "test") if split in block
            for key in SCORES if key in block[split]}


def describe(results: Mapping[str, Any]) -> str:
    """', I_V 2.41 bits (conditional on 0: 0.35)' for a log line; '' without bits."""
    test = (results.get("bits") or {}).get("test") or {}
    if "i_v" not in test:
        return ""
    conditional = (f" (conditional on {results['bits']['conditioned_on']}: {test['conditional_i_v']:.2f})"
                   if "conditional_i_v" in test else "")
    return f", test I_V {test['i_v']:.2f} bits{conditional}"
