"""The probe modules that classify (SClassProbe, WordProbe): a `ProbeModule` whose heads give logits over labels,
with the parts only a classifier has, each attached when the run asks for it:

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.errors import ProbingError
from probing.probes.bits.information import (
    BASELINE_PROBES,
    CONTROL_PROBES,
    JOINT_PROBES,
    PROBES,
    SELECTED_BY,
    CrossEntropyBits,
    LeastDevCrossEntropy,
)
from probing.probes.bits.prefix_probes import PrefixProbes, check_block_ends
from probing.probes.components import families
from probing.probes.probe_module import ProbeModule


class ClassifierProbe(ProbeModule):
    """A probe module over labels (see the module docstring): the `ProbeModule` contract plus `labels`,
    `mdl_block_ends` and `conditioning_dim`."""

    MEASURES_BITS = True  # a classifier: its cross-entropy is bits

    def __init__(self, *, labels: Sequence[str], mdl_block_ends: Sequence[int] | None = None,
                 conditioning_dim: int | None = None, **contract: Any):
        self.labels = list(labels)  # before the heads: their shape reads it
        super().__init__(**contract)
        ends = check_block_ends(mdl_block_ends)
        self.mdl_probes = self.build_prefix_probes(ends) if ends else None
        self.conditioning_dim = conditioning_dim
        if conditioning_dim is not None:
            # drawn aside from the global random stream: the other heads and the batch order stay those of a run
            # without conditioning
            with torch.random.fork_rng(devices=[]):
                self.baseline_probes = self.build_head(conditioning_dim)
                self.joint_probes = self.build_head(conditioning_dim + self.input_dim)
        self.build_bits()
        self.record_settings()

    @classmethod
    def from_settings(cls, **settings: Any) -> ClassifierProbe:
        """The module of the flat keyword settings that saved probes record (`settings()`: family, hidden_dim, rank,
        dropout, l1, l2 beside the contract; those missing take the defaults of Zhao et al.'s probe, MLP-1 with 1024
        hidden units) and an `optimizer`."""
        return cls(family=families.pop_family(settings, hidden_dim=1024), **settings)

    # --- what a subclass provides ---------------------------------------------------------------------------------

    def mdl_targets(self, batch: dict) -> Tensor:
        """(B, T) int64: the label target columns (the prefix probes' targets, and the heads' in bits)."""
        raise NotImplementedError

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """(K, the task's target columns, the control task's or None)."""
        raise NotImplementedError

    # --- the parts --------------------------------------------------------------------------------------------------

    def build_prefix_probes(self, ends: list[int]) -> PrefixProbes:
        """The MDL prefix probes: each prefix's probes of `probe_shape` for the task (and for the control task)."""
        num_probes, num_outputs = self.probe_shape()
        return PrefixProbes(ends, num_probes * (2 if self.has_control else 1), self.input_dim, num_outputs,
                            self.family, self.num_layers, self.mix_options)

    def settings(self) -> dict[str, Any]:
        return {"labels": self.labels, **super().settings(), "conditioning_dim": self.conditioning_dim}

    def probed(self, features: Tensor) -> Tensor:
        """The representation R the task's probes read: all of `features`, or R of [X; R] with conditioning."""
        return features if self.conditioning_dim is None else features[..., self.conditioning_dim:]

    def head_input(self, name: str, features: Tensor) -> Tensor:
        """What head `name` reads: X (baseline_probes), [X; R] (joint_probes), R (the others)."""
        if name == BASELINE_PROBES:
            return features[..., :self.conditioning_dim]
        return features if name == JOINT_PROBES else self.probed(features)

    def head_targets(self, name: str, batch: dict) -> Tensor:
        """(B, P) int64: the targets of head `name` (the control task's for control_probes)."""
        _, task, control = self.mdl_columns()
        return self.mdl_targets(batch)[:, control if name == CONTROL_PROBES else task]

    def extra_loss(self, loss: Tensor, features: Tensor, batch: dict) -> Tensor:
        """+ the conditioning heads' losses and penalties, + the MDL prefix probes' (each over its prefix's rows)."""
        for name in (BASELINE_PROBES, JOINT_PROBES) if self.conditioning_dim is not None else ():
            head = getattr(self, name)
            loss = loss + self.task_loss(head(self.head_input(name, batch["features"])), batch, control=False)
            loss = loss + head.penalty()
        if self.mdl_probes is not None:
            prefix_losses = self.mdl_probes.losses(features, self.mdl_targets(batch), batch.get("order"))
            loss = loss + prefix_losses.sum() + self.mdl_probes.penalty()
        return loss

    def trained_heads(self) -> list[nn.Module]:
        heads = [getattr(self, name) for name in self.bit_heads()]
        return heads + ([self.mdl_probes] if self.mdl_probes is not None else [])

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        self.update_bits("dev", batch)
        if self.mdl_probes is not None:
            self.mdl_probes.update_dev(self.probed(batch["features"]), self.mdl_targets(batch))

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        super().test_step(batch, batch_idx, dataloader_idx)
        self.update_bits(TEST_SPLITS[dataloader_idx], batch)

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        self.end_bits("dev", keep=self.fitting)
        if self.mdl_probes is not None:
            self.mdl_probes.end_dev_epoch(self.current_epoch, keep=self.fitting)

    def on_test_epoch_end(self) -> None:
        for split in TEST_SPLITS:
            self.end_bits(split)

    def on_fit_end(self) -> None:
        if self.mdl_probes is not None:
            self.mdl_probes.restore_best()
        self.selected = {name: self.selection.selected(name, getattr(self, name)) for name in self.bit_heads()}

    # --- bits (probing.probes.bits.information) -----------------------------------------------------------------

    def bit_heads(self) -> list[str]:
        """The heads trained on the task's or the control task's labels, by attribute name."""
        names = [PROBES] + ([CONTROL_PROBES] if self.control_probes is not None else [])
        return names + ([BASELINE_PROBES, JOINT_PROBES] if self.conditioning_dim is not None else [])

    def build_bits(self) -> None:
        """The cross-entropy metrics of every head on every split scored; the least-dev-cross-entropy weights."""
        self.split_bits: dict[str, dict[str, float]] = {}
        self.selection = LeastDevCrossEntropy()
        self.selected: dict[str, nn.Module] = {}  # after fitting: each head at its least-dev-cross-entropy epoch
        self.bits_selection = SELECTED_BY
        num_probes = self.probe_shape()[0]
        self.bits = nn.ModuleDict({f"{split}_{name}": CrossEntropyBits(num_probes)
                                   for split in EVAL_SPLITS for name in self.bit_heads()})

    @property
    def weight_decay(self) -> float | None:
        """The optimizer's weight decay (part of the probe family V), when the optimizer is a partial."""
        return self.family.weight_decay

    def update_bits(self, split: str, batch: dict) -> None:
        """Add the batch's cross-entropy of every head: while fitting, the live heads (to select their epochs);
        afterwards, each head at its selected epoch (the live heads of saved probes, which are not fitted)."""
        features = batch["features"]
        for name in self.bit_heads():
            # the selected copies are no submodules: Lightning moves the module to the CPU after fitting and back to
            # the accelerator for validating, and they follow here
            head = self.selected[name].to(features.device) if name in self.selected else getattr(self, name)
            logits = head(self.head_input(name, features))
            self.bits[f"{split}_{name}"].update(logits, self.head_targets(name, batch))

    def end_bits(self, split: str, keep: bool = False) -> None:
        """The split's bits per example of every head into `split_bits[split]` (summed over a head's probes), logged
        as <split>/bits_<head>; with `keep`, offered to the least-dev-cross-entropy selection."""
        if not self.bits[f"{split}_{PROBES}"].update_called:
            return
        bits = {}
        for name in self.bit_heads():
            metric = self.bits[f"{split}_{name}"]
            bits[name] = float(metric.compute().sum())
            metric.reset()
            self.log(f"{split}/bits_{name}", bits[name])
            if keep:
                self.selection.offer(name, getattr(self, name), bits[name], self.current_epoch)
        self.split_bits[split] = bits

    # --- the online code (probing.probes.bits.mdl) --------------------------------------------------------------

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
        batches = ((self.probed(batch["features"]), self.mdl_targets(batch), batch["order"])
                   for batch in train_batches)
        return self.mdl_probes.online_code(batches, num_labels, task, control)
