"""What the probe LightningModules share (SClassProbe, WordProbe): the dev and test steps around their own metrics, the
guarded training loss, the scalar mix's logging, and the Lightning side of the MDL online code (Voita & Titov 2020
§2.2) for the `PrefixProbes` they train beside their probes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import lightning
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from probing.data.splits import TEST_SPLITS
from probing.errors import ProbingError
from probing.probes.components.prefix_probes import PrefixProbes
from probing.probes.components.scalar_mix import ScalarMix


class ProbeModule(lightning.LightningModule):
    """A probe module: subclasses score a batch into a split's metrics (`_update_metrics`), log a split's scores
    (`_log_split`), and with MDL have `mdl_probes` (PrefixProbes, else None), `mdl_targets(batch)` (B, T) and
    `mdl_columns()`. Here: the dev pass also scores the prefix probes, each keeping its best-dev weights while fitting
    (restored when fitting ends, carried by checkpoints), and `codelength` after fitting."""

    mdl_probes: PrefixProbes | None  # set by the subclass (None without MDL)

    def _update_metrics(self, split: str, batch: dict) -> None:
        raise NotImplementedError

    def _log_split(self, split: str) -> None:
        raise NotImplementedError

    def mdl_targets(self, batch: dict) -> Tensor:
        raise NotImplementedError

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """(K, the task's target columns, the control task's or None)."""
        raise NotImplementedError

    def checked_loss(self, loss: Tensor, batch_idx: int, batch_size: int) -> Tensor:
        """The training loss, logged per epoch; a non-finite one stops the run (it would train on and score garbage)."""
        if not loss.isfinite():
            raise ProbingError(f"the training loss became {float(loss.detach())} at epoch {self.current_epoch}, step "
                               f"{batch_idx}: the features or the learning rate are broken. Fix: check the feature "
                               "store (delete it to rebuild it) or lower probe.module.optimizer.lr")
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    def log_mix(self, mix: ScalarMix | None) -> None:
        """The task probes' scalar mix, every epoch: mix/weight_<j>, mix/gamma."""
        if mix is not None:
            for j, weight in enumerate(mix.normalized_weights().tolist()):
                self.log(f"mix/weight_{j}", weight)
            self.log("mix/gamma", float(mix.gamma.detach()))

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._update_metrics("dev", batch)
        if self.mdl_probes is not None:
            self.mdl_probes.update_dev(batch["features"], self.mdl_targets(batch))

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._update_metrics(TEST_SPLITS[dataloader_idx], batch)

    def on_validation_epoch_end(self) -> None:
        self._log_split("dev")
        if self.mdl_probes is not None:
            fitting = not self.trainer.sanity_checking and self.trainer.state.fn == TrainerFn.FITTING
            self.mdl_probes.end_dev_epoch(self.current_epoch, keep=fitting)

    def on_fit_end(self) -> None:
        if self.mdl_probes is not None:
            self.mdl_probes.restore_best()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.mdl_probes is not None and self.mdl_probes.best is not None:
            checkpoint["mdl_best"] = self.mdl_probes.best

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.mdl_probes is not None:
            self.mdl_probes.best = checkpoint.get("mdl_best")

    def codelength(self, train_batches: Iterable[dict]) -> dict[str, Any]:
        """The online codelength of the training labels (`PrefixProbes.online_code`: the `mdl` block of
        results.json). `train_batches`: every training example exactly once (any order, any batch size), with
        `order`; run after fitting, so that each prefix probe has its best-dev weights. The first block is sent with
        the uniform code, block i+1 with prefix probe i (the control task's probes: the control labels)."""
        if self.mdl_probes is None:
            raise ProbingError("codelength needs the MDL prefix probes. Fix: probe.mdl=true")
        num_labels, task, control = self.mdl_columns()
        batches = ((batch["features"], self.mdl_targets(batch), batch["order"]) for batch in train_batches)
        return self.mdl_probes.online_code(batches, num_labels, task, control)
