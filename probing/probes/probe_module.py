"""The base of every probe LightningModule (SClassProbe, WordProbe, and the probes that come next), and the keyword
contract all of them take: probe.py builds the module that the task's probing names (`module`, conf/probings/) with it.

The contract (keyword arguments, the same for every probe module):

    labels          the task's labels (the s-classes, the tags, ...), in the order of the datamodule's label ids
    input_dim       D, the size of one example's features (a word's vector; a word pair's 2D or 3D)
    num_layers      the representation's layers when it is the scalar mix (features (B, num_layers, D)), else None
    level           the representation's level: "context" (an example per word in context) or "type" (one per word)
    control         train the control task's probes beside (batches carry its labels too)
    mdl_block_ends  the block ends of the MDL online code (`probing.probes.bits.mdl.OnlineCode.block_ends`), or None
    family, hidden_dim, rank, dropout
                    the probe family (`probing.probes.components.batched_probes`: linear, mlp1, mlp2), from
                    `probe=linear|mlp1|mlp2|sclass_mlp` (`probe.module`)
    l1, l2          the elastic-net penalty of every probe (Dalvi et al. 2019, NeuroX's form): l1 * sum |W| +
                    l2 * ||W||_F per probe over its weight matrices, biases not penalised (probe.module.l1 and
                    probe.module.l2; 0.0 = none). Saved probes of older files, without them, are rebuilt with 0.0
    optimizer       builds the optimizer from parameter groups (a `_partial_` config); fused Adam, lr 1e-3
    mix             the scalar mix's options (layer_norm, dropout, l2_lambda, lr) when num_layers is set
    conditioning_dim
                    with `probe.condition_on`: features are [X; R], the first conditioning_dim columns X (input_dim
                    is R's size); the task's, control and MDL probes read R, and two more heads of the same family
                    train beside them: `baseline_probes` on X and `joint_probes` on [X; R] (conditional
                    V-information, `probing.probes.bits.information`)

A subclass says how many probes its task has and how many outputs each (`probe_shape`: C binary probes for the
s-class task, one K-way probe for a word task), the training loss of a batch (`task_loss`), the target columns of the
MDL online code (`mdl_targets`, `mdl_columns`), and its metrics (`_update_metrics`, `_log_split`); everything else is
here: the heads (the task's `probes`, the control task's `control_probes`, the MDL `mdl_probes`, built in that order),
the guarded loss, the optimizer's parameter groups, the scalar mix's logging, the dev and test passes, the MDL
prefix probes' best-dev weights and codelength (Voita & Titov 2020 §2.2), and the heads' held-out cross-entropies in
bits, each head's at its own least-dev-cross-entropy epoch (`split_bits`, `probing.probes.bits.information`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import lightning
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn

from probing.data.settings import check_optimizer, choose
from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.devices import has_native_bf16
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
from probing.probes.components.probe_head import ProbeHead
from probing.vocabulary import LEVELS

log = logging.getLogger(__name__)

# fused: one pass over parameters, gradients and moments instead of ~10 (the Adam step of ~10M probe weights is
# memory-bound)
DEFAULT_OPTIMIZER = partial(torch.optim.Adam, lr=1e-3, fused=True)
CONTROL = "control"
# What `hparams` holds that is not a setting of the probes (saved probes record the rest, `probing.probes.saved`).
NOT_RECORDED = ("mdl_block_ends",)


class ProbeModule(lightning.LightningModule):
    """A probe module (see the module docstring for the contract and what a subclass provides).

    `split_metrics[split]` holds the latest metrics of each split scored ("dev", "test", "seen"), as plain values;
    `SCORES` names the headline scores among them (W&B's summary of the run); `score_warnings` what a reader of them
    must know (a score undefined on a split), recorded in results.json's warnings."""

    SCORES: tuple[str, ...] = ()
    MEASURES_BITS = True  # a classifier: its cross-entropy is bits (a structural probe's distances are not)

    def __init__(
        self,
        *,
        labels: Sequence[str],
        input_dim: int,
        num_layers: int | None = None,
        level: str = "context",
        control: bool = False,
        mdl_block_ends: Sequence[int] | None = None,
        family: str = "mlp1",
        hidden_dim: int = 1024,
        rank: int | None = None,
        dropout: float = 0.0,
        l1: float = 0.0,
        l2: float = 0.0,
        optimizer: Callable[..., torch.optim.Optimizer] = DEFAULT_OPTIMIZER,
        mix: Mapping[str, Any] | None = None,
        conditioning_dim: int | None = None,
    ):
        super().__init__()
        choose("probe.level", level, LEVELS)
        self.save_hyperparameters(ignore=["optimizer"])
        check_optimizer(optimizer, "probe.module.optimizer")
        self.labels, self.level, self.optimizer = list(labels), level, optimizer
        mix_options = {key: value for key, value in dict(mix or {}).items() if key != "lr"}
        self.mix_lr = dict(mix or {}).get("lr")
        family_settings = dict(family=family, hidden_dim=hidden_dim, rank=rank, dropout=dropout, l1=l1, l2=l2,
                               num_layers=num_layers, mix=mix_options)
        self.probes = self.build_head(input_dim, family_settings)
        self.control_probes = self.build_head(input_dim, family_settings) if control else None
        ends = check_block_ends(mdl_block_ends)
        self.mdl_probes = self.build_prefix_probes(ends, control, input_dim, family_settings) if ends else None
        self.conditioning_dim = conditioning_dim
        if conditioning_dim is not None:
            # drawn aside from the global random stream: the other heads and the batch order stay those of a run
            # without conditioning
            with torch.random.fork_rng(devices=[]):
                self.baseline_probes = self.build_head(conditioning_dim, family_settings)
                self.joint_probes = self.build_head(conditioning_dim + input_dim, family_settings)
        self.split_metrics: dict[str, dict] = {}
        self.score_warnings: list[str] = []
        self.build_bits()

    # --- what a subclass provides ---------------------------------------------------------------------------------

    def probe_shape(self) -> tuple[int, int]:
        """(probes per task, outputs per probe) of the default heads (`build_head`, `build_prefix_probes`)."""
        raise NotImplementedError

    def build_head(self, input_dim: int, settings: Mapping[str, Any]) -> nn.Module:
        """One task's probes (the real task's, then the control task's): a `ProbeHead` of `probe_shape` in the
        family's `settings`. A head has `mix` (or None), `penalty()` and `parameter_groups(mix_lr)`."""
        num_probes, num_outputs = self.probe_shape()
        return ProbeHead(num_probes, input_dim, num_outputs, **settings)

    def build_prefix_probes(self, ends: list[int], control: bool, input_dim: int,
                            settings: Mapping[str, Any]) -> PrefixProbes:
        """The MDL prefix probes: each prefix's probes of `probe_shape` for the task (and for the control task)."""
        num_probes, num_outputs = self.probe_shape()
        return PrefixProbes(ends, num_probes * (2 if control else 1), input_dim, num_outputs, **settings)

    def task_loss(self, logits: Tensor, batch: dict, control: bool) -> Tensor:
        """The loss of one head's logits (B, probes, outputs) on the batch's targets (the control task's with
        `control`)."""
        raise NotImplementedError

    def mdl_targets(self, batch: dict) -> Tensor:
        """(B, T) int64: the prefix probes' target columns."""
        raise NotImplementedError

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """(K, the task's target columns, the control task's or None)."""
        raise NotImplementedError

    def _update_metrics(self, split: str, batch: dict) -> None:
        raise NotImplementedError

    def _log_split(self, split: str) -> None:
        raise NotImplementedError

    # --- shared -----------------------------------------------------------------------------------------------------

    @property
    def has_control(self) -> bool:
        return self.control_probes is not None

    def settings(self) -> dict[str, Any]:
        """The probes' settings as built (the contract's values but the MDL block ends): what saved probes record and
        what rebuilds them."""
        return {key: value for key, value in self.hparams.items() if key not in NOT_RECORDED}

    def forward(self, features: Tensor) -> Tensor:
        """features (B, D) or (B, num_layers, D) -> the task probes' logits (B, probes, outputs)."""
        return self.probes(self.probed(features))

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

    def on_fit_start(self) -> None:
        note_precision(str(self.trainer.precision), self.device)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        """The task's loss + the control task's + the MDL prefix probes' (each over its prefix's rows) and the mixes'
        L2 penalties. The heads share no parameter, so each gets the gradient it would get alone."""
        features = self.probed(batch["features"])
        loss = self.task_loss(self.probes(features), batch, control=False) + self.probes.penalty()
        if self.control_probes is not None:
            loss = loss + self.task_loss(self.control_probes(features), batch, control=True)
            loss = loss + self.control_probes.penalty()
        for name in (BASELINE_PROBES, JOINT_PROBES) if self.conditioning_dim is not None else ():
            head = getattr(self, name)
            loss = loss + self.task_loss(head(self.head_input(name, batch["features"])), batch, control=False)
            loss = loss + head.penalty()
        if self.mdl_probes is not None:
            prefix_losses = self.mdl_probes.losses(features, self.mdl_targets(batch), batch.get("order"))
            loss = loss + prefix_losses.sum() + self.mdl_probes.penalty()
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

    def configure_optimizers(self) -> torch.optim.Optimizer:
        heads = [getattr(self, name) for name in self.bit_heads()] + [self.mdl_probes]
        return self.optimizer([group for head in heads if head is not None
                               for group in head.parameter_groups(self.mix_lr)])

    def mix_summary(self) -> dict[str, Any]:
        """The task probes' mix (ScalarMix.summary: weights, gamma, center of gravity); {} without one."""
        return {} if self.probes.mix is None else self.probes.mix.summary()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._update_metrics("dev", batch)
        self.update_bits("dev", batch)
        if self.mdl_probes is not None:
            self.mdl_probes.update_dev(self.probed(batch["features"]), self.mdl_targets(batch))

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._update_metrics(TEST_SPLITS[dataloader_idx], batch)
        self.update_bits(TEST_SPLITS[dataloader_idx], batch)

    def on_validation_epoch_end(self) -> None:
        self._log_split("dev")
        fitting = not self.trainer.sanity_checking and self.trainer.state.fn == TrainerFn.FITTING
        self.end_bits("dev", keep=fitting)
        if self.mdl_probes is not None:
            self.mdl_probes.end_dev_epoch(self.current_epoch, keep=fitting)

    def on_test_epoch_end(self) -> None:
        for split in TEST_SPLITS:
            self.end_bits(split)

    def on_fit_end(self) -> None:
        if self.mdl_probes is not None:
            self.mdl_probes.restore_best()
        if self.MEASURES_BITS:
            self.selected = {name: self.selection.selected(name, getattr(self, name)) for name in self.bit_heads()}

    # --- bits (probing.probes.bits.information) ----------------------------------------------------------------------

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
        if not self.MEASURES_BITS:
            self.bits = None
            return
        num_probes = self.probe_shape()[0]
        self.bits = nn.ModuleDict({f"{split}_{name}": CrossEntropyBits(num_probes)
                                   for split in EVAL_SPLITS for name in self.bit_heads()})

    @property
    def weight_decay(self) -> float | None:
        """The optimizer's weight decay (part of the probe family V), when the optimizer is a partial."""
        return getattr(self.optimizer, "keywords", {}).get("weight_decay")

    def update_bits(self, split: str, batch: dict) -> None:
        """Add the batch's cross-entropy of every head: while fitting, the live heads (to select their epochs);
        afterwards, each head at its selected epoch (the live heads of saved probes, which are not fitted)."""
        if self.bits is None:
            return
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
        if self.bits is None or not self.bits[f"{split}_{PROBES}"].update_called:
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


@functools.cache  # once per process: the fresh probes of an erasure and the run's probe share it
def note_precision(precision: str, device: torch.device) -> None:
    """bf16 training on a device without bf16 arithmetic units is correct but emulated, many times slower than
    float32 (on CPU: no AVX-512 BF16 or AMX): a warning. float32 on a CPU with them: a one-line hint, as bf16-mixed
    trains the default probe run 2.3 times as fast there at the same F1 within the seeds' spread (bench/probe_run.py).
    It stays opt-in so that a command gives the same numbers on every machine (a default that followed the hardware
    would make a laptop's table differ from a cluster's)."""
    if precision.startswith("bf16") and not has_native_bf16(device):
        log.warning("trainer.precision=%s: this %s has no bf16 arithmetic units, so bf16 is emulated and slower than "
                    "float32 here (the scores are unaffected). Fix: trainer.precision=32-true on this machine",
                    precision, device.type)
    elif precision.startswith("32") and device.type == "cpu" and has_native_bf16(device):
        log.info("this CPU has bf16 units: trainer.precision=bf16-mixed trains the probes about twice as fast")
