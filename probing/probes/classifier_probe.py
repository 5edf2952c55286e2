"""The probe modules that classify (SClassProbe, WordProbe): a `ProbeModule` whose heads give logits over labels,
with the parts only a classifier has (`probing.probes.bits.parts`), each built and attached when the run asks for it.

See docs/development.md, 'Inside a probe run'.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from torch import Tensor, nn

from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.errors import ProbingError
from probing.probes.bits.information import (
    CONTROL_PROBES,
    PROBES,
    SELECTED_BY,
    CrossEntropyBits,
    LeastDevCrossEntropy,
)
from probing.probes.bits.parts import OnlineCodePart, conditioning_part, online_code_part
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
        self.conditioning_dim = conditioning_dim
        # the online code's prefix probes draw their weights from the global random stream after the task's heads;
        # the conditioning heads aside from it
        self.attach([*online_code_part(mdl_block_ends, self), *conditioning_part(conditioning_dim, self)])
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

    def settings(self) -> dict[str, Any]:
        return {"labels": self.labels, **super().settings(), "conditioning_dim": self.conditioning_dim}

    def head_input(self, name: str, features: Tensor) -> Tensor:
        """What head `name` reads: what its part gives it (the conditioning's X or [X; R]), else what the task's
        probes read."""
        for part in self.parts.values():
            given = part.head_input(name, features)
            if given is not None:
                return given
        return self.probed(features)

    def head_targets(self, name: str, batch: dict) -> Tensor:
        """(B, P) int64: the targets of head `name` (the control task's for control_probes)."""
        _, task, control = self.mdl_columns()
        return self.mdl_targets(batch)[:, control if name == CONTROL_PROBES else task]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        self.update_bits("dev", batch)

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        super().test_step(batch, batch_idx, dataloader_idx)
        self.update_bits(TEST_SPLITS[dataloader_idx], batch)

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        self.end_bits("dev", keep=self.fitting)

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        for split in TEST_SPLITS:
            self.end_bits(split)

    def on_fit_end(self) -> None:
        super().on_fit_end()
        self.selected = {name: self.selection.selected(name, head) for name, head in self.bit_heads().items()}

    # --- bits (probing.probes.bits.information) -----------------------------------------------------------------

    def bit_heads(self) -> dict[str, nn.Module]:
        """The heads trained on the task's or the control task's labels, by name: the task's, then those of the parts
        (the control task's first)."""
        heads = {PROBES: self.probes}
        for part in self.joined_parts():
            heads.update(part.bit_heads())
        return heads

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
        for name, live in self.bit_heads().items():
            # the selected copies are no submodules: Lightning moves the module to the CPU after fitting and back to
            # the accelerator for validating, and they follow here
            head = self.selected[name].to(features.device) if name in self.selected else live
            logits = head(self.head_input(name, features))
            self.bits[f"{split}_{name}"].update(logits, self.head_targets(name, batch))

    def end_bits(self, split: str, keep: bool = False) -> None:
        """The split's bits per example of every head into `split_bits[split]` (summed over a head's probes), logged
        as <split>/bits_<head>; with `keep`, offered to the least-dev-cross-entropy selection."""
        if not self.bits[f"{split}_{PROBES}"].update_called:
            return
        bits = {}
        for name, head in self.bit_heads().items():
            metric = self.bits[f"{split}_{name}"]
            bits[name] = float(metric.compute().sum())
            metric.reset()
            self.log(f"{split}/bits_{name}", bits[name])
            if keep:
                self.selection.offer(name, head, bits[name], self.current_epoch)
        self.split_bits[split] = bits

    # --- the online code (probing.probes.bits.mdl) --------------------------------------------------------------

    def codelength(self, train_batches: Iterable[dict]) -> dict[str, Any]:
        """The online codelength of the training labels (`PrefixProbes.online_code`: the `mdl` block of
        results.json). `train_batches`: every training example exactly once (any order, any batch size), with
        `order`; run after fitting, so that each prefix probe has its best-dev weights. The first block is sent with
        the uniform code, block i+1 with prefix probe i (the control task's probes: the control labels)."""
        if OnlineCodePart.NAME not in self.parts:
            raise ProbingError("codelength needs the MDL prefix probes. Fix: build the module with the online code's "
                               "blocks (its argument mdl_block_ends)")
        return self.parts[OnlineCodePart.NAME].codelength(self, train_batches)
