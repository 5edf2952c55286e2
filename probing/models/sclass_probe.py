"""The s-class probe of Zhao et al. 2020 as a LightningModule: C binary MLPs trained together on frozen features."""

from __future__ import annotations

import lightning
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from probing.metrics import SClassMetrics
from probing.models.components.binary_mlps import BatchedBinaryMLPs

EVAL_SPLITS = ("dev", "test")


class SClassProbe(lightning.LightningModule):
    """One binary probe per s-class on frozen word-in-context features (Zhao et al. 2020 §3.2, §4.1, A.2/A.5).

    Batches are dicts {"features": (B, D) float, "label": (B,) long, "combination": (B,) long}.

    Training: every probe k sees every training context, positive iff label == k. The loss is the sum over
    probes of each probe's mean cross-entropy; as the probes share no parameters, each probe's gradient
    is exactly what it would get trained alone on the same batches. Optimizer: Adam (lr 1e-3 as in A.5).

    Evaluation: the validation loop is the "dev" split, the test loop the "test" split, each scored with
    its own `SClassMetrics`. At epoch end `dev/micro_f1`, `dev/context_accuracy` (or `test/...`) are
    logged and the full metrics dict is kept in `self.split_metrics["dev" | "test"]` as plain Python values.
    """

    def __init__(
        self,
        input_dim: int,
        class_names: list[str],
        hidden_dim: int = 1024,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.class_names = list(class_names)
        self.probes = BatchedBinaryMLPs(len(self.class_names), input_dim, hidden_dim, dropout)
        self.metrics = nn.ModuleDict({split: SClassMetrics(len(self.class_names)) for split in EVAL_SPLITS})
        self.split_metrics: dict[str, dict] = {}

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def forward(self, features: Tensor) -> Tensor:
        """features (B, D) -> logits (B, C, 2)."""
        return self.probes(features)

    @torch.no_grad()
    def predict_positive_prob(self, features: Tensor) -> Tensor:
        """features (B, D) -> (B, C) softmax probability of each probe's positive class."""
        return self(features).softmax(dim=-1)[..., 1]

    def probe_loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """Sum over the C probes of each probe's mean binary cross-entropy on the batch."""
        targets = (labels[:, None] == torch.arange(self.num_classes, device=labels.device)).long()
        per_context = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        return per_context.view_as(targets).mean(dim=0).sum()

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = self.probe_loss(self(batch["features"]), batch["label"])
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=batch["label"].shape[0])
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._update_metrics("dev", batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._update_metrics("test", batch)

    def on_validation_epoch_end(self) -> None:
        self._log_split("dev")

    def on_test_epoch_end(self) -> None:
        self._log_split("test")

    def _update_metrics(self, split: str, batch: dict) -> None:
        self.metrics[split].update(self.predict_positive_prob(batch["features"]), batch["label"], batch["combination"])

    def _log_split(self, split: str) -> None:
        """Compute (synced across processes) and log; the values are already global, so no extra sync."""
        metrics = self.metrics[split].compute()
        self.metrics[split].reset()
        self.split_metrics[split] = metrics
        self.log(f"{split}/micro_f1", metrics["micro_f1"], prog_bar=split == "dev")
        self.log(f"{split}/context_accuracy", metrics["context_accuracy"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
