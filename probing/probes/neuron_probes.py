"""The probes that the neuron analysis trains (probing.probes.neuron_analysis), as one small LightningModule fitted by
Lightning's Trainer: named groups of `BatchedProbes` (the elastic-net linear probe on every neuron; one masked head
per (ranking, k) for the probes retrained on k neurons, linear and MLP-1) trained together on the same batches.

The loss is the sum over heads of each head's mean cross-entropy and its elastic-net term: the heads share no
parameter, so each gets the gradient it would get alone, and a masked head is the probe trained alone on its
neurons (`BatchedProbes`' input mask). Each head keeps the weights of its own best dev epoch (the highest dev
accuracy, the first such epoch), as the MDL prefix probes keep theirs (`PrefixProbes`), restored when fitting ends.
"""

from __future__ import annotations

from collections.abc import Mapping

import lightning as L
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from probing.errors import ProbingError
from probing.probes.components.batched_probes import BatchedProbes


class NeuronProbes(L.LightningModule):
    """`groups` {name: BatchedProbes} trained with Adam at `lr` on batches of `features` (B, D) and `label` (B,).
    `best_epochs[name]` (heads,): the epoch whose weights each head kept (-1 before any dev pass)."""

    def __init__(self, groups: Mapping[str, BatchedProbes], lr: float = 1e-3):
        super().__init__()
        self.groups = nn.ModuleDict(dict(groups))
        self.lr = lr
        self.dev_correct: dict[str, Tensor] = {}
        self.dev_rows = 0
        self.best_states = {name: probes.state_of_heads() for name, probes in self.groups.items()}
        self.best_accuracy = {name: torch.full((probes.num_heads,), -1.0) for name, probes in self.groups.items()}
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

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking and self.dev_rows:
            for name, probes in self.groups.items():
                self.keep_best(name, probes, (self.dev_correct[name].double() / self.dev_rows).cpu())
        self.dev_correct, self.dev_rows = {}, 0

    def keep_best(self, name: str, probes: BatchedProbes, accuracy: Tensor) -> None:
        """Keep the weights of the heads whose dev accuracy beats their best so far."""
        improved = accuracy > self.best_accuracy[name]
        if improved.any():
            current = probes.state_of_heads()
            for key, value in self.best_states[name].items():  # kept on the CPU
                value[improved] = current[key].cpu()[improved]
            self.best_accuracy[name][improved] = accuracy[improved].float()
            self.best_epochs[name][improved] = self.current_epoch

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
    """Fit the probes for `epochs` on one `device`, quietly (the analysis logs its results itself)."""
    trainer = L.Trainer(max_epochs=epochs, accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module, datamodule=datamodule)
