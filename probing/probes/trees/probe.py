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

from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.probes.components import families
from probing.probes.probe_module import CONTROL, ProbeModule
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
        super().__init__(family=family, **contract)
        self.SCORES = TREE_SCORES[self.kind]
        names = [*EVAL_SPLITS, *(f"{split}_{CONTROL}" for split in EVAL_SPLITS if self.has_control)]
        self.metrics = nn.ModuleDict({name: TreeMetrics(self.kind) for name in names})
        self.dev_loss = {"": [0.0, 0], f"{CONTROL}_": [0.0, 0]}  # sum of sentence losses, sentences
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

    def _update_metrics(self, split: str, batch: dict) -> None:
        features, lengths, punctuation = batch["features"], batch["lengths"], batch["punctuation"]
        heads = [("", self.probes, "gold")]
        if self.control_probes is not None:
            heads.append((f"{CONTROL}_", self.control_probes, f"{CONTROL}_gold"))
        for prefix, head, gold in heads:
            predictions = head(features)
            self.metrics[f"{split}_{CONTROL}" if prefix else split].update(predictions, batch[gold], lengths,
                                                                          punctuation)
            if split == "dev":
                loss = float(tree_loss(predictions, batch[gold], lengths))
                self.dev_loss[prefix][0] += loss * len(lengths)
                self.dev_loss[prefix][1] += len(lengths)

    def on_test_epoch_end(self) -> None:
        for split in TEST_SPLITS:
            if self.metrics[split].update_called:
                self._log_split(split)

    def _compute(self, name: str) -> dict[str, float | int | None]:
        metrics = self.metrics[name]
        values = metrics.compute()
        metrics.reset()
        return values

    def _log_split(self, split: str) -> None:
        if not self.metrics[split].update_called:
            return
        scores = self._compute(split)
        if self.control_probes is not None:
            control = self._compute(f"{split}_{CONTROL}")
            scores |= {f"{CONTROL}_{key}": control[key] for key in self.SCORES}
            scores |= {f"selectivity_{key}": None if None in (scores[key], control[key]) else scores[key] - control[key]
                       for key in self.SCORES}
        self.split_metrics[split] = scores
        self._warn_undefined(split, scores)
        for key in self.SCORES:
            for name in (key, f"{CONTROL}_{key}"):
                if scores.get(name) is not None:
                    self.log(f"{split}/{name}", scores[name], prog_bar=split == "dev" and name == self.SCORES[0])
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
