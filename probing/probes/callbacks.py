"""Lightning callbacks of the probing runs."""

from __future__ import annotations

import copy

import lightning as L


class KeepBestWeights(L.Callback):
    """Keep, in memory, the weights of the epoch with the best value of `monitor`; load them back when fitting ends.

    The test split is then evaluated with the best-dev weights without writing checkpoints to disk (a probe is small;
    a checkpoint per layer and seed would only fill the run folders). With `submodule`, only that attribute of the
    LightningModule is kept and restored, so that two heads trained side by side (the real and the control task)
    each get the weights of their own best epoch.
    """

    def __init__(self, monitor: str = "dev/micro_f1", mode: str = "max", submodule: str | None = None):
        self.monitor, self.mode, self.submodule = monitor, mode, submodule
        self.best_score: float | None = None
        self.best_epoch: int | None = None
        self._best_state: dict | None = None

    def _improved(self, score: float) -> bool:
        if self.best_score is None:
            return True
        return score > self.best_score if self.mode == "max" else score < self.best_score

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Not on_validation_epoch_end: Lightning runs callbacks' epoch-end hooks before the module's, which is
        # where the epoch's score is computed and logged (EarlyStopping waits for on_validation_end too).
        if trainer.sanity_checking or self.monitor not in trainer.callback_metrics:
            return
        score = float(trainer.callback_metrics[self.monitor])
        if self._improved(score):
            self.best_score, self.best_epoch = score, trainer.current_epoch
            self._best_state = copy.deepcopy(self._target(pl_module).state_dict())

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._best_state is not None:
            self._target(pl_module).load_state_dict(self._best_state)

    def _target(self, pl_module: L.LightningModule):
        return getattr(pl_module, self.submodule) if self.submodule else pl_module
