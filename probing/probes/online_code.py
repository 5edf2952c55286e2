"""The Lightning side of the MDL online code (Voita & Titov 2020 §2.2), shared by the probe modules that train
`PrefixProbes` beside their probes (WordProbe, SClassProbe)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

from probing.errors import ProbingError
from probing.probes.components.prefix_probes import PrefixProbes


class OnlineCodeHooks:
    """Mixed into a LightningModule (before it in the bases) that has `mdl_probes` (PrefixProbes, or None without
    MDL), `mdl_targets(batch)` (B, T) and `mdl_columns()`: the prefix probes' dev cross-entropy in every dev pass
    (`update_mdl_dev`, `end_mdl_dev_epoch`), each probe's best-dev weights kept while fitting, restored when it ends
    and carried by checkpoints, and `codelength` after fitting."""

    mdl_probes: PrefixProbes | None

    def mdl_targets(self, batch: dict) -> Tensor:
        raise NotImplementedError

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """(K, the task's target columns, the control task's or None)."""
        raise NotImplementedError

    def update_mdl_dev(self, batch: dict) -> None:
        if self.mdl_probes is not None:
            self.mdl_probes.update_dev(batch["features"], self.mdl_targets(batch))

    def end_mdl_dev_epoch(self) -> None:
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
