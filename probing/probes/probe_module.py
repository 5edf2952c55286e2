"""The base of every probe LightningModule (the classifiers: SClassProbe, WordProbe; the structural TreeProbe), and
the keyword contract all of them take: probe.py builds the module that the task's probing names (`module`,
conf/probings/) with it.

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import lightning
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn

from probing.data.settings import choose
from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.errors import ProbingError
from probing.probes.controls import ControlPart, control_part
from probing.probes.parts import ProbePart
from probing.probes.saved import current_names
from probing.vocabulary import LEVELS


class ProbeModule(lightning.LightningModule):
    """A probe module (see the module docstring for the contract and what a subclass provides).

    `split_metrics[split]` holds the latest metrics of each split scored ("dev", "test", "seen"), as plain values;
    `SCORES` names the headline scores among them (W&B's summary of the run); `score_warnings` what a reader of them
    must know (a score undefined on a split), recorded in results.json's warnings. A concrete module records its
    settings as its hyperparameters once built (`record_settings`)."""

    SCORES: tuple[str, ...] = ()
    MEASURES_BITS = False  # a classifier's cross-entropy is bits (a structural probe's distances are not)

    def __init__(self, *, family: Any, input_dim: int, num_layers: int | None = None,
                 mix: Mapping[str, Any] | None = None, level: str = "context", control: bool = False):
        super().__init__()
        choose("probe.level", level, LEVELS)
        self.family, self.level = family, level
        self.input_dim, self.num_layers, self.mix_settings = input_dim, num_layers, dict(mix or {})
        self.mix_options = {key: value for key, value in self.mix_settings.items() if key != "lr"}
        self.mix_lr = self.mix_settings.get("lr")
        self.probes = self.build_head(input_dim)
        # the probes' metrics of each split scored (`new_scores`)
        self.metrics = nn.ModuleDict({split: self.new_scores() for split in EVAL_SPLITS})
        # the attached parts (`probing.probes.parts`), in the order they are built (the order their heads draw their
        # weights in): the control task's here, right after the task's probes; a subclass attaches its own
        self.parts = nn.ModuleDict()
        self.attach(control_part(control, self))
        self.split_metrics: dict[str, dict] = {}
        self.score_warnings: list[str] = []

    # --- what a subclass provides ---------------------------------------------------------------------------------

    def probe_shape(self) -> tuple[int, int]:
        """(probes per task, outputs per probe) of the heads."""
        raise NotImplementedError

    def task_loss(self, logits: Tensor, batch: dict, control: bool) -> Tensor:
        """The loss of one head's output on the batch's targets (the control task's with `control`)."""
        raise NotImplementedError

    def new_scores(self) -> nn.Module:
        """The metrics of one head on one split (the task's probes' or a part's head's)."""
        raise NotImplementedError

    def update_scores(self, metrics: nn.Module, head: nn.Module, batch: dict, control: bool, split: str) -> None:
        """`metrics` take in `head`'s outputs on a batch of `split` and its targets (the control task's with
        `control`)."""
        raise NotImplementedError

    def scored(self, metrics: nn.Module) -> bool:
        """Whether `metrics` took in a batch since they were last computed."""
        raise NotImplementedError

    def computed(self, metrics: nn.Module) -> dict[str, Any]:
        """The scores of `metrics` (computed, synced across processes) as plain values; the metrics reset."""
        raise NotImplementedError

    def log_scores(self, split: str, scores: dict[str, Any]) -> None:
        """Log the probes' scores of `split` (`scores` also holds those the parts added)."""
        raise NotImplementedError

    def selectivity(self, scores: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
        """What a split's scores gain from the control task's (`control`, its head's scores): the control scores and
        the selectivities (real - control) that this kind of probe reports."""
        raise NotImplementedError

    def control_logs(self, scores: dict[str, Any]) -> dict[str, Any]:
        """The control task's scores of a split logged, by logged name (a None value is not logged)."""
        raise NotImplementedError

    # --- shared -----------------------------------------------------------------------------------------------------

    def build_head(self, input_dim: int) -> nn.Module:
        """One task's probes (the real task's, then the control task's), as the family builds them: a head has `mix`
        (or None), `penalty()` and `parameter_groups(mix_lr)`."""
        num_probes, num_outputs = self.probe_shape()
        return self.family.head(num_probes, input_dim, num_outputs, num_layers=self.num_layers, mix=self.mix_options)

    @property
    def has_control(self) -> bool:
        """Whether the control task's part is attached (its targets are columns of the online code's)."""
        return ControlPart.NAME in self.parts

    @property
    def optimizer(self) -> Any:
        return self.family.optimizer

    def settings(self) -> dict[str, Any]:
        """The probes' settings as built: what saved probes record and what rebuilds them (`probing.probes.saved`)."""
        return {"input_dim": self.input_dim, "num_layers": self.num_layers, "level": self.level,
                "control": self.has_control, **self.family.record(), "mix": self.mix_settings}

    def record_settings(self) -> None:
        """Record `settings()` as the module's hyperparameters (what Lightning's loggers receive)."""
        self.save_hyperparameters(self.settings())

    def forward(self, features: Tensor) -> Tensor:
        """features (B, D) or (B, num_layers, D) -> the task probes' logits (B, probes, outputs)."""
        return self.probes(self.probed(features))

    def probed(self, features: Tensor) -> Tensor:
        """What the task's probes read of a batch's features: all of them, or what the parts leave them."""
        for part in self.parts.values():
            features = part.probed(features)
        return features

    def attach(self, parts: Iterable[ProbePart]) -> None:
        """Attach built parts, under their names."""
        for part in parts:
            self.parts[part.NAME] = part

    def joined_parts(self) -> list[ProbePart]:
        """The parts in the order their losses and parameter groups join the module's (`ProbePart.ORDER`)."""
        return sorted(self.parts.values(), key=lambda part: part.ORDER)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        """The task's loss + the probes' penalty + the losses of the parts (the control task's first). The heads share
        no parameter, so each gets the gradient it would get alone."""
        features = self.probed(batch["features"])
        loss = self.task_loss(self.probes(features), batch, control=False) + self.probes.penalty()
        for part in self.joined_parts():
            loss = part.add_loss(loss, self, features, batch)
        return self.checked_loss(loss, batch_idx, features.shape[0])

    def checked_loss(self, loss: Tensor, batch_idx: int, batch_size: int) -> Tensor:
        """The training loss, logged per epoch; a non-finite one stops the run (it would train on and score garbage)."""
        if not loss.isfinite():
            raise ProbingError(f"the training loss became {float(loss.detach())} at epoch {self.current_epoch}, step "
                               f"{batch_idx}: the features or the learning rate are broken. Fix: check the feature "
                               "store (delete it to rebuild it) or lower probe.module.optimizer.lr")
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    def on_train_epoch_end(self) -> None:
        """The task probes' scalar mix, every epoch: mix/weight_<j>, mix/gamma."""
        mix = self.probes.mix
        if mix is not None:
            for j, weight in enumerate(mix.normalized_weights().tolist()):
                self.log(f"mix/weight_{j}", weight)
            self.log("mix/gamma", float(mix.gamma.detach()))

    def trained_heads(self) -> list[nn.Module]:
        """Every head the optimizer steps, in the order of its parameter groups."""
        return [self.probes] + [head for part in self.joined_parts() for head in part.trained_heads()]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer([group for head in self.trained_heads() for group in head.parameter_groups(self.mix_lr)])

    def mix_summary(self) -> dict[str, Any]:
        """The task probes' mix (ScalarMix.summary: weights, gamma, center of gravity); {} without one."""
        return {} if self.probes.mix is None else self.probes.mix.summary()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.score_batch("dev", batch)
        for part in self.parts.values():
            part.validation_batch(self, batch)

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.score_batch(TEST_SPLITS[dataloader_idx], batch)

    def on_test_epoch_end(self) -> None:
        for split in TEST_SPLITS:
            self.log_split(split)

    def score_batch(self, split: str, batch: dict) -> None:
        """The probes' metrics of `split` take in a batch, then the parts' heads'."""
        self.update_scores(self.metrics[split], self.probes, batch, control=False, split=split)
        for part in self.parts.values():
            part.score_batch(self, split, batch)

    def log_split(self, split: str) -> None:
        """A scored split's scores, with those the parts add (the control task's), into `split_metrics[split]`, and
        logged (<split>/<score>)."""
        if not self.scored(self.metrics[split]):
            return
        scores = self.computed(self.metrics[split])
        for part in self.parts.values():
            scores |= part.split_scores(self, split, scores)
        self.split_metrics[split] = scores
        self.log_scores(split, scores)
        for part in self.parts.values():
            part.log_scores(self, split, scores)

    def on_validation_epoch_end(self) -> None:
        self.log_split("dev")
        for part in self.parts.values():
            part.end_validation(self.current_epoch, keep=self.fitting)

    def on_fit_end(self) -> None:
        for part in self.parts.values():
            part.end_fit()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        for part in self.parts.values():
            part.save_state(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Read a checkpoint (before Lightning loads its weights: those of older versions are renamed first)."""
        if "state_dict" in checkpoint:
            checkpoint["state_dict"] = current_names(checkpoint["state_dict"])
        for part in self.parts.values():
            part.load_state(checkpoint)

    @property
    def fitting(self) -> bool:
        """A fitting epoch's dev pass (not the sanity check, nor a validation after fitting)."""
        return not self.trainer.sanity_checking and self.trainer.state.fn == TrainerFn.FITTING

