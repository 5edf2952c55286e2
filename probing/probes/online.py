"""Probes trained straight from the forward pass (the probe's `online` setting), as a LightningModule that probe.py's
Trainer fits: no store is written. Each step runs the frozen encoder on a batch of tokenised records (a feature
source, `probing.probes.online_data`: hooks on the asked-for layers only, the forward stopped after the last) and
steps one probe per layer, all layers' probes one batched module (`BatchedProbes`, one input per head); with the
control task, a second one on the shuffled labels. Each probe keeps the weights of its own best dev epoch.
See docs/scale.md, 'Probing without a store'."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn
from torch.nn import functional as F

from probing.errors import ProbingError
from probing.probes.online_data import FeatureSource
from probing.probes.word_probe import computed, selectivity, split_metrics, update

PROBES, CONTROL = "probes", "control"  # the heads: the task's probes, the control task's
SCORED = ("dev", "test")


class OnlineProbes(L.LightningModule):
    """One probe of `family` per layer of `layers` (the rows of the features that `source` gives), over `labels`;
    with `control`, one more per layer trained on the batches' `control_label`.

    The encoder is inside `source`, a plain function: no submodule of this module, so the Trainer neither moves nor
    optimises nor saves it. The probes are drawn from the global random stream as `BatchedProbes` draws heads (the
    task's, then the control task's): seed it first.

    Training: the loss is the sum of every probe's mean cross-entropy over the batch (+ the family's penalty), so
    each probe gets the gradient it would get alone. Dev after each epoch: every probe's accuracy, macro-F1 and
    per-label F1 (torchmetrics, as a stored word or statement run scores its probe), and with the control task its
    control scores and selectivity, logged as <split>/layer<L>/<score>; <split>/micro_f1 is the best layer's accuracy
    (what early stopping watches). While fitting, each probe keeps the weights of its own best dev accuracy (the
    earliest epoch on ties) and gets them back when fitting ends (after every callback's end of fit, so that a
    whole-module keeper of the Trainer's callbacks does not overrule it); `best_epoch[head]` says which, and a
    checkpoint carries them. `split_scores[split]`: the latest scores of each layer's probe, in the order of
    `layers`."""

    def __init__(self, source: FeatureSource, layers: Sequence[int], input_dim: int, labels: Sequence[str],
                 family: Any, control: bool = False):
        super().__init__()
        self.source, self.layers, self.labels, self.family = source, list(layers), list(labels), family
        self.probes = family.probes(len(self.layers), input_dim, len(self.labels))
        self.control = family.probes(len(self.layers), input_dim, len(self.labels)) if control else None
        self.metrics = nn.ModuleDict({f"{split}_{head}": nn.ModuleList(split_metrics(len(self.labels))
                                                                       for _ in self.layers)
                                      for split in SCORED for head in self.heads()})
        self.best = {head: torch.full((len(self.layers),), -1.0) for head in self.heads()}
        self.best_epoch = {head: torch.zeros(len(self.layers), dtype=torch.long) for head in self.heads()}
        self.kept: dict[str, dict[str, Tensor]] = {}
        self.split_scores: dict[str, list[dict[str, Any]]] = {}

    def heads(self) -> list[str]:
        """The trained heads' names: the task's probes, and the control task's."""
        return [PROBES] + ([CONTROL] if self.control is not None else [])

    def features(self, split: str, batch: dict) -> Tensor:
        """(layers, B, D): the batch's features from the source, where the probes are."""
        return self.source(split, batch["index"]).to(self.device)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        features = self.features("train", batch)
        loss = self.head_loss(self.probes, features, batch["label"])
        if self.control is not None:
            loss = loss + self.head_loss(self.control, features, batch["control_label"])
        if not loss.isfinite():
            raise ProbingError(f"the training loss became {float(loss.detach())} at epoch {self.current_epoch}, step "
                               f"{batch_idx}: the learning rate is too high for these features, or the model's "
                               "forward pass gave non-finite states. Fix: lower the optimizer's learning rate")
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=len(batch["label"]))
        return loss

    def head_loss(self, head: nn.Module, features: Tensor, targets: Tensor) -> Tensor:
        """Every probe's mean cross-entropy, summed, + the head's penalty."""
        logits = head(features)  # (B, layers, K)
        return sum(F.cross_entropy(logits[:, layer], targets) for layer in range(len(self.layers))) + head.penalty()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.family.optimizer([{"params": list(getattr(self, head).parameters())} for head in self.heads()])

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.score_batch("dev", batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.score_batch("test", batch)

    def score_batch(self, split: str, batch: dict) -> None:
        features = self.features(split, batch)
        for head, targets in zip(self.heads(), (batch["label"], batch.get("control_label"))):
            logits = getattr(self, head)(features)
            for layer, metrics in enumerate(self.metrics[f"{split}_{head}"]):
                update(metrics, logits[:, layer], targets)

    def end_split(self, split: str) -> None:
        """Each layer's scores of `split` into `split_scores[split]`, logged."""
        scores = [computed(metrics, self.labels) for metrics in self.metrics[f"{split}_{PROBES}"]]
        if self.control is not None:
            controls = [computed(metrics, self.labels) for metrics in self.metrics[f"{split}_{CONTROL}"]]
            scores = [each | selectivity(each, control) for each, control in zip(scores, controls)]
        self.split_scores[split] = scores
        for layer, each in zip(self.layers, scores):
            for name in ("accuracy", "macro_f1", "control_accuracy", "selectivity"):
                if name in each:
                    self.log(f"{split}/layer{layer}/{name}", each[name])
        self.log(f"{split}/micro_f1", max(each["accuracy"] for each in scores), prog_bar=split == "dev")

    def on_validation_epoch_end(self) -> None:
        self.end_split("dev")
        if not self.trainer.sanity_checking and self.trainer.state.fn == TrainerFn.FITTING:
            scores = self.split_scores["dev"]
            self.keep_best(PROBES, [each["accuracy"] for each in scores])
            if self.control is not None:
                self.keep_best(CONTROL, [each["control_accuracy"] for each in scores])

    def on_test_epoch_end(self) -> None:
        self.end_split("test")

    def keep_best(self, head: str, accuracies: list[float]) -> None:
        """Keep the weights of each probe of `head` whose dev accuracy beat its best."""
        accuracy = torch.tensor(accuracies, dtype=torch.float32)
        better = accuracy > self.best[head]
        self.best[head] = torch.maximum(accuracy, self.best[head])
        self.best_epoch[head][better] = self.current_epoch
        current = getattr(self, head).state_of_heads()
        kept = self.kept.get(head)
        if kept is None:  # the first epoch beats the initial -1 everywhere
            self.kept[head] = current
            return
        mask = better.to(self.device)
        self.kept[head] = {name: torch.where(mask.view(-1, *[1] * (value.dim() - 1)), current[name], value.to(
            current[name].device)) for name, value in kept.items()}

    def on_fit_end(self) -> None:
        for head, kept in self.kept.items():
            probes = getattr(self, head)
            probes.copy_heads_(kept, torch.ones(len(self.layers), dtype=torch.bool, device=probes.w1.device))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["online_best"] = {"best": self.best, "best_epoch": self.best_epoch, "kept": self.kept}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint.get("online_best", {})
        self.best = saved.get("best", self.best)
        self.best_epoch = saved.get("best_epoch", self.best_epoch)
        self.kept = saved.get("kept", self.kept)
