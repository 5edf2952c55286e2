"""The probes that the neuron analysis trains (probing.probes.neurons.analysis), as one small LightningModule fitted by
Lightning's Trainer: named groups of `BatchedProbes` (the elastic-net linear probe on every neuron; one masked head
per (ranking, k) for the probes retrained on k neurons, linear and MLP-1) trained together on the same batches.

See docs/neurons.md, 'What a run computes' and 'Choices where the papers leave room'.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import lightning as L
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from probing.errors import ProbingError
from probing.probes.components.batched_probes import BatchedProbes

log = logging.getLogger(__name__)


class NeuronProbes(L.LightningModule):
    """`groups` {name: BatchedProbes} trained with Adam at `lr` on batches of `features` (B, D) and `label` (B,).
    `best_epochs[name]` (heads,): the epoch whose weights each head kept (-1 before any dev pass); `epochs_run`:
    the epochs trained (fewer than the trainer's max_epochs when `patience` stopped them)."""

    def __init__(self, groups: Mapping[str, BatchedProbes], lr: float = 1e-3, patience: int | None = None,
                 min_delta: float = 0.0):
        super().__init__()
        self.groups = nn.ModuleDict(dict(groups))
        self.lr = lr
        self.patience, self.min_delta = patience, min_delta
        self.epochs_without_gain = 0
        self.epochs_run = 0
        self.dev_correct: dict[str, Tensor] = {}
        self.dev_rows = 0
        self.best_states = {name: probes.state_of_heads() for name, probes in self.groups.items()}
        self.best_accuracy = {name: torch.full((probes.num_heads,), -1.0, dtype=torch.float64)
                              for name, probes in self.groups.items()}
        self.best_epochs = {name: torch.full((probes.num_heads,), -1) for name, probes in self.groups.items()}

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        features, labels = batch["features"], batch["label"]
        loss = sum(head_losses(probes(features), labels).sum() + probes.penalty() for probes in self.groups.values())
        if not loss.isfinite():
            raise ProbingError(f"the neuron probes' training loss became {float(loss.detach())} at epoch "
                               f"{self.current_epoch}: the features or the learning rate are broken. Fix: check the "
                               "feature store (delete it to rebuild it) or lower analysis.lr")
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        for name, probes in self.groups.items():
            correct = (probes(batch["features"]).argmax(dim=-1) == batch["label"][:, None]).sum(dim=0)
            self.dev_correct[name] = correct + self.dev_correct.get(name, 0)
        self.dev_rows += len(batch["label"])

    def on_train_epoch_end(self) -> None:
        self.epochs_run = self.current_epoch + 1

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking and self.dev_rows:
            gained, improved = 0, 0
            for name, probes in self.groups.items():
                accuracy = (self.dev_correct[name].double() / self.dev_rows).cpu()
                gained += int((accuracy > self.best_accuracy[name] + self.min_delta).sum())
                improved += self.keep_best(name, probes, accuracy)
            self.epochs_without_gain = 0 if gained else self.epochs_without_gain + 1
            stop = self.patience is not None and self.epochs_without_gain >= self.patience
            log.info("neuron probes (%s), epoch %d of at most %d: %d of %d heads beat their best dev accuracy (%d by "
                     "more than %g)%s", ", ".join(self.groups), self.current_epoch + 1, self.trainer.max_epochs,
                     improved, sum(probes.num_heads for probes in self.groups.values()), gained, self.min_delta,
                     f"; none for {self.patience} epochs: stopped" if stop else "")
            self.trainer.should_stop = self.trainer.should_stop or stop
        self.dev_correct, self.dev_rows = {}, 0

    def keep_best(self, name: str, probes: BatchedProbes, accuracy: Tensor) -> int:
        """Keep the weights of the heads whose dev accuracy beats their best so far; how many did."""
        improved = accuracy > self.best_accuracy[name]
        if improved.any():
            current = probes.state_of_heads()
            for key, value in self.best_states[name].items():  # kept on the CPU
                value[improved] = current[key].cpu()[improved]
            self.best_accuracy[name][improved] = accuracy[improved]
            self.best_epochs[name][improved] = self.current_epoch
        return int(improved.sum())

    def on_fit_end(self) -> None:
        for name, probes in self.groups.items():
            probes.copy_heads_(self.best_states[name], (self.best_epochs[name] >= 0).to(self.device))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def head_losses(logits: Tensor, labels: Tensor) -> Tensor:
    """(heads,): each head's mean cross-entropy; logits (B, heads, K), labels (B,)."""
    return F.cross_entropy(logits.permute(0, 2, 1), labels[:, None].expand(-1, logits.shape[1]),
                           reduction="none").mean(dim=0)


@torch.no_grad()
def accuracies(probes: BatchedProbes, features: Tensor, labels: Tensor, batch_size: int = 4096) -> list[float]:
    """Each head's accuracy on features (N, D) and labels (N,), in eval mode on the probes' device."""
    was_training = probes.training
    probes.eval()
    device = probes.w1.device
    correct = torch.zeros(probes.num_heads, dtype=torch.long, device=device)
    for rows in torch.arange(len(labels)).split(batch_size):
        logits = probes(features[rows].to(device).float())
        correct += (logits.argmax(dim=-1) == labels[rows].to(device)[:, None]).sum(dim=0)
    probes.train(was_training)
    return (correct.double() / max(len(labels), 1)).tolist()


def fit(module: NeuronProbes, datamodule: L.LightningDataModule, epochs: int, device: torch.device) -> None:
    """Fit the probes for at most `epochs` on one `device`, with a progress bar and a log line per epoch (the
    analysis logs its results itself)."""
    trainer = L.Trainer(max_epochs=epochs, accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=True,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=datamodule)
