"""The structural probes of Hewitt & Manning (2019) as a probe module of the one pipeline: the distance probe (tree
distances of every word pair of a sentence) and the depth probe (each word's tree depth), trained as the reference
(john-hewitt/structural-probes: loss.py, regimen.py) trains them, scored by its metrics
(`probing.probes.trees.metrics`).

See docs/structural.md, 'Probes and training'.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from probing.probes.components import families
from probing.probes.controls import CONTROL
from probing.probes.probe_module import ProbeModule
from probing.probes.trees.metrics import TreeMetrics
from probing.probes.trees.structural import StructuralMap, structural_map
from probing.vocabulary import TREE_SCORES, TREE_UNDEFINED

log = logging.getLogger(__name__)

LR_FACTOR, LR_PATIENCE = 0.1, 0  # the reference's ReduceLROnPlateau


def tree_loss(predictions: Tensor, gold: Tensor, lengths: Tensor) -> Tensor:
    """The reference's L1 loss of a batch: per sentence, the absolute errors summed over its pairs (words) within its
    length, divided by its squared length (its length); the mean over the sentences."""
    positions = torch.arange(predictions.shape[1], device=predictions.device)
    valid = positions[None, :] < lengths[:, None]  # (B, T)
    lengths = lengths.to(predictions.dtype)
    if predictions.dim() == 3:
        valid, scale = valid[:, :, None] & valid[:, None, :], lengths.pow(2)
    else:
        scale = lengths
    errors = (predictions - gold.to(predictions.dtype)).abs() * valid
    return (errors.flatten(1).sum(dim=1) / scale).mean()


class TreeProbe(ProbeModule):
    """A structural probe (see the module docstring): the `ProbeModule` contract, its `family` the `StructuralMap`
    of kind "distance" or "depth"."""

    def __init__(self, *, family: StructuralMap, **contract: Any):
        self.kind = family.kind
        self.dev_loss: dict[str, list] = {}  # per head (its scores' prefix): sum of sentence losses, sentences
        super().__init__(family=family, **contract)
        self.SCORES = TREE_SCORES[self.kind]
        self.record_settings()

    @classmethod
    def from_settings(cls, kind: str, **settings: Any) -> TreeProbe:
        """The probe of `kind` from the flat settings of a linear family (family, rank, dropout, l1, l2, optimizer:
        `probing.probes.components.families.pop_family`) beside the contract."""
        return cls(family=structural_map(families.pop_family(settings, default="linear"), kind), **settings)

    def probe_shape(self) -> tuple[int, int]:
        """One map B (its outputs are distances or depths, not logits)."""
        return 1, 1

    def task_loss(self, predictions: Tensor, batch: dict, control: bool) -> Tensor:
        return tree_loss(predictions, batch[f"{CONTROL}_gold" if control else "gold"], batch["lengths"])

    def configure_optimizers(self) -> dict:
        optimizer = super().configure_optimizers()
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=LR_FACTOR,
                                                               patience=LR_PATIENCE)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "dev/loss"}}

    def new_scores(self) -> TreeMetrics:
        return TreeMetrics(self.kind)

    def update_scores(self, metrics: nn.Module, head: nn.Module, batch: dict, control: bool, split: str) -> None:
        """The head's scores, and on dev its loss (dev/loss, dev/control_loss: what the keepers monitor)."""
        gold, lengths = batch[f"{CONTROL}_gold" if control else "gold"], batch["lengths"]
        predictions = head(batch["features"])
        metrics.update(predictions, gold, lengths, batch["punctuation"])
        if split == "dev":
            loss = self.dev_loss.setdefault(f"{CONTROL}_" if control else "", [0.0, 0])
            loss[0] += float(tree_loss(predictions, gold, lengths)) * len(lengths)
            loss[1] += len(lengths)

    def scored(self, metrics: nn.Module) -> bool:
        return metrics.update_called

    def computed(self, metrics: nn.Module) -> dict[str, float | int | None]:
        values = metrics.compute()
        metrics.reset()
        return values

    def selectivity(self, scores: dict, control: dict) -> dict:
        """control_<score> and selectivity_<score> of each score (null where either is undefined)."""
        return {f"{CONTROL}_{key}": control[key] for key in self.SCORES} | {
            f"selectivity_{key}": None if None in (scores[key], control[key]) else scores[key] - control[key]
            for key in self.SCORES}

    def control_logs(self, scores: dict) -> dict:
        return {f"{CONTROL}_{key}": scores[f"{CONTROL}_{key}"] for key in self.SCORES}

    def log_scores(self, split: str, scores: dict) -> None:
        """Each score (the first on the progress bar, for dev), a warning for each undefined one; dev's losses."""
        self._warn_undefined(split, scores)
        for key in self.SCORES:
            if scores.get(key) is not None:
                self.log(f"{split}/{key}", scores[key], prog_bar=split == "dev" and key == self.SCORES[0])
        if split == "dev":
            for prefix, (total, sentences) in self.dev_loss.items():
                if sentences:
                    self.log(f"dev/{prefix}loss", total / sentences)
            self.dev_loss = {prefix: [0.0, 0] for prefix in self.dev_loss}

    def _warn_undefined(self, split: str, scores: Mapping[str, Any]) -> None:
        """Warn once per run (in the log and in results.json's warnings) of each score of `split` that is undefined:
        recorded as null, never as NaN."""
        for key in self.SCORES:
            for name in (key, f"{CONTROL}_{key}"):
                if name in scores and scores[name] is None:
                    warning = f"{split} {name} is undefined ({TREE_UNDEFINED[key]}): recorded as null"
                    if warning not in self.score_warnings:
                        log.warning("%s", warning)
                        self.score_warnings.append(warning)
