"""Lightning callbacks of the probing runs."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import lightning as L

from probing.errors import ConfigError
from probing.probes.controls import ControlPart


class KeepBestWeights(L.Callback):
    """Keep, in memory, the weights of the epoch with the best value of `monitor`; load them back when fitting ends.

    The test split is then evaluated with the best-dev weights without writing checkpoints to disk (a probe is small;
    a checkpoint per layer and seed would only fill the run folders). With `submodule` (a path: `probes`,
    `parts.control.probes`), only that submodule of the LightningModule is kept and restored, so that two heads
    trained side by side (the real and the control task) each get the weights of their own best epoch.
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
        return pl_module.get_submodule(self.submodule) if self.submodule else pl_module


def best_weights_keeper(callbacks: Iterable[L.Callback]) -> KeepBestWeights:
    """The callback that keeps the probes' best-dev weights (`callbacks.keep_best`): the test split is always scored
    with them."""
    for callback in callbacks:
        if isinstance(callback, KeepBestWeights) and callback.submodule == "probes":
            return callback
    raise ConfigError("callbacks.keep_best is missing: the test split is scored with the probes' best-dev weights. "
                      "Fix: keep callbacks=default (or a callbacks config that includes keep_best)")


def training_warnings(best_dev: float | None, epochs: int) -> list[str]:
    """What a reader of the results must know: a dev micro-F1 of 0 in every epoch usually means "trained too
    briefly" (e.g. P-BERT stopped early), not "no information in the representation"."""
    if best_dev:
        return []
    return [f"dev micro-F1 stayed 0 in all {epochs} epochs: the probes never predicted a class; this usually means "
            "too few epochs (raise trainer.max_epochs or the early-stopping patience), not that the representation "
            "holds no information"]


def control_keeper(seen_split: bool) -> KeepBestWeights:
    """The control head's best-weights keeper. Dev words are unseen, so the control task's dev score is a prior-level
    floor and its best epoch is noise: scoring memorisation on seen words needs both heads trained alike, so with a
    seen split the control head keeps the weights of the real head's best epoch."""
    return KeepBestWeights(monitor="dev/micro_f1" if seen_split else "dev/control_micro_f1",
                           submodule=ControlPart.HEAD)


def best_epochs(callbacks: Iterable[L.Callback]) -> dict[str, int | None]:
    """The epoch whose weights each head kept: `best_epoch` (the probes) and, with the control task,
    `control_best_epoch`."""
    callbacks = list(callbacks)
    epochs = {"best_epoch": best_weights_keeper(callbacks).best_epoch}
    for callback in callbacks:
        if isinstance(callback, KeepBestWeights) and callback.submodule == ControlPart.HEAD:
            epochs["control_best_epoch"] = callback.best_epoch
    return epochs
