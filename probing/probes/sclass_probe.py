"""The s-class probe of Zhao et al. 2020 as a LightningModule: C binary MLPs trained together on frozen features."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from probing.data.settings import choose, require_int, require_number
from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.devices import has_native_bf16
from probing.errors import ConfigError
from probing.probes.components.prefix_probes import PrefixProbes
from probing.probes.components.probe_head import ProbeHead
from probing.probes.metrics import SClassMetrics, TypeLevelMetrics
from probing.probes.probe_module import ProbeModule

log = logging.getLogger(__name__)

LEVELS = ("context", "type")
CONTROL = "control"
# fused: one pass over parameters, gradients and moments instead of ~10 (the Adam step of ~10M probe weights is
# memory-bound)
DEFAULT_OPTIMIZER = partial(torch.optim.Adam, lr=1e-3, fused=True)


def check_settings(level: str, hidden_dim: int, dropout: float) -> None:
    """The probe's own settings, refused with the config key that sets them."""
    choose("probe.level", level, LEVELS)
    require_int("probe.module.hidden_dim", hidden_dim, minimum=1)
    require_number("probe.module.dropout", dropout, high=1.0, example="0.1")


class SClassProbe(ProbeModule):
    """One binary probe per s-class on frozen features (Zhao et al. 2020 §3.2, §4.1, A.2/A.5).

    level="context": batches {"features", "label", "combination"}; probe k's target is label == k, and each
    split is scored with Zhao's combination-level micro-F1 (SClassMetrics).
    level="type": batches {"features", "targets" (B, C) bool}, one row per word (Fig. 1); probe k's target is
    "k is one of the word's classes", scored by micro-F1 over all word x class decisions (TypeLevelMetrics).

    Training: every probe k sees every training example. The loss is the sum over probes of each probe's mean
    cross-entropy; as the probes share no parameters, each gets exactly the gradient it would get alone.
    `optimizer` builds the optimizer from parameter groups (Hydra: a `_partial_` config); Adam, lr 1e-3 (A.5) by
    default (fused). A non-finite training loss stops the run with a ProbingError (it would otherwise train on and score
    garbage).

    `num_layers`: features are (B, num_layers, D) and an ELMo scalar mix (its options in `mix`: layer_norm,
    dropout, l2_lambda, lr) learns which layers to use; its L2 penalty joins the loss and its weights are logged
    every epoch (mix/weight_<j>, mix/gamma).

    `control=True` trains a second, identical head on the control task (probing.probes.controls; batches then carry
    control_label/control_combination or control_targets) in the same steps. The heads share no parameter, so
    each gets the gradients it would get alone; they do share the random number stream (the control head's
    initialisation comes after the real one's and shifts the later batch shuffles), so a run with the control task
    on is reproducible for its seed but does not repeat the batches of the same run with it off. Each split's
    metrics then gain control_micro_f1, control_context_accuracy, selectivity (micro_f1 - control_micro_f1) and
    selectivity_context_accuracy.

    `mdl_block_ends` (context level, MDL probing, Voita & Titov 2020 §2.2): the online code of the training labels
    as the C binary decisions per context (K = 2, C labels per example, so the uniform code is n * C bits), and of
    the control task's decisions: `mdl_probes` (`PrefixProbes`) hold, for each prefix, C binary MLPs of the same
    size (2C with the control task), trained beside the probes on the `order` batch key (see WordProbe), each
    keeping its best-dev weights; `codelength(train_batches)` gives the `mdl` block of results.json.

    Testing scores "test", and "seen" too when the datamodule serves it as a second test dataloader
    (TEST_SPLITS order). `split_metrics["dev" | "test" | "seen"]` holds the latest full metrics of each split
    scored, as plain Python values.
    """

    def __init__(
        self,
        input_dim: int,
        class_names: list[str],
        hidden_dim: int = 1024,
        optimizer: Callable[..., torch.optim.Optimizer] = DEFAULT_OPTIMIZER,
        dropout: float = 0.0,
        level: str = "context",
        num_layers: int | None = None,
        mix: Mapping[str, Any] | None = None,
        control: bool = False,
        mdl_block_ends: list[int] | None = None,
    ):
        super().__init__()
        check_settings(level, hidden_dim, dropout)
        if mdl_block_ends is not None and level != "context":
            raise ConfigError("probe.mdl=true sends the labels of the training contexts; probe.level=type has one "
                              "example per word instead. Fix: probe.level=context or probe.mdl=false")
        self.save_hyperparameters(ignore=["optimizer"])
        self.class_names = list(class_names)
        self.optimizer = optimizer
        mix_options = {key: value for key, value in dict(mix or {}).items() if key != "lr"}
        self.mix_lr = dict(mix or {}).get("lr")
        head = dict(num_probes=len(self.class_names), input_dim=input_dim, hidden_dim=hidden_dim, dropout=dropout,
                    num_layers=num_layers, mix=mix_options)
        self.probes = ProbeHead(**head)
        self.control_probes = ProbeHead(**head) if control else None
        self.mdl_probes = (PrefixProbes(mdl_block_ends, len(self.class_names) * (2 if control else 1), input_dim, 2,
                                        "mlp1", hidden_dim, dropout=dropout, num_layers=num_layers, mix=mix_options)
                           if mdl_block_ends else None)
        metric = SClassMetrics if level == "context" else TypeLevelMetrics
        metric_names = [*EVAL_SPLITS, *(f"{split}_{CONTROL}" for split in EVAL_SPLITS if control)]
        self.metrics = nn.ModuleDict({name: metric(len(self.class_names)) for name in metric_names})
        self.split_metrics: dict[str, dict] = {}

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def forward(self, features: Tensor) -> Tensor:
        """features (B, D) or (B, num_layers, D) -> logits (B, C, 2)."""
        return self.probes(features)

    @torch.no_grad()
    def predict_positive_prob(self, features: Tensor, head: ProbeHead | None = None) -> Tensor:
        """features -> (B, C) softmax probability of each probe's positive class."""
        return (head or self.probes)(features).softmax(dim=-1)[..., 1]

    def one_hot(self, labels: Tensor) -> Tensor:
        return labels[:, None] == torch.arange(self.num_classes, device=labels.device)

    def probe_loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Sum over the C probes of each probe's mean binary cross-entropy; targets (B, C) bool."""
        targets = targets.long()
        per_example = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        return per_example.view_as(targets).mean(dim=0).sum()

    def targets(self, batch: dict, control: bool = False) -> Tensor:
        prefix = "control_" if control else ""
        if self.hparams.level == "type":
            return batch[f"{prefix}targets"]
        return self.one_hot(batch[f"{prefix}label"])

    def on_fit_start(self) -> None:
        note_precision(str(self.trainer.precision), self.device)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        features = batch["features"]
        loss = self.probe_loss(self.probes(features), self.targets(batch)) + self.probes.penalty()
        if self.control_probes is not None:
            control_loss = self.probe_loss(self.control_probes(features), self.targets(batch, control=True))
            loss = loss + control_loss + self.control_probes.penalty()
        if self.mdl_probes is not None:
            prefix_losses = self.mdl_probes.losses(features, self.mdl_targets(batch), batch.get("order"))
            loss = loss + prefix_losses.sum() + self.mdl_probes.penalty()
        return self.checked_loss(loss, batch_idx, features.shape[0])

    def on_train_epoch_end(self) -> None:
        self.log_mix(self.probes.mix)

    def mdl_targets(self, batch: dict) -> Tensor:
        """(B, C) or (B, 2C) int64: the C binary decisions of each context, then its control decisions."""
        targets = [self.targets(batch)] + ([self.targets(batch, control=True)] if self.control_probes else [])
        return torch.cat(targets, dim=1).long()

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """K = 2 (each s-class probe's decision); the C task columns, then the C control columns."""
        c = self.num_classes
        return 2, slice(0, c), slice(c, 2 * c) if self.control_probes is not None else None

    def on_test_epoch_end(self) -> None:
        for split in TEST_SPLITS:
            if self.metrics[split].update_called:
                self._log_split(split)

    def _update_metrics(self, split: str, batch: dict) -> None:
        features = batch["features"]
        self._update_one(self.metrics[split], self.predict_positive_prob(features), batch, "")
        if self.control_probes is not None:
            prob = self.predict_positive_prob(features, self.control_probes)
            self._update_one(self.metrics[f"{split}_{CONTROL}"], prob, batch, "control_")

    def _update_one(self, metric, prob: Tensor, batch: dict, prefix: str) -> None:
        if self.hparams.level == "type":
            metric.update(prob, batch[f"{prefix}targets"])
        else:
            metric.update(prob, batch[f"{prefix}label"], batch[f"{prefix}combination"])

    def _compute(self, name: str) -> dict:
        """Compute (synced across processes) and reset one metric."""
        metrics = self.metrics[name].compute()
        self.metrics[name].reset()
        return metrics

    def _log_split(self, split: str) -> None:
        metrics = self._compute(split)
        if self.control_probes is not None:
            metrics.update(with_selectivity(metrics, self._compute(f"{split}_{CONTROL}")))
        self.split_metrics[split] = metrics
        self.log(f"{split}/micro_f1", metrics["micro_f1"], prog_bar=split == "dev")
        self.log(f"{split}/context_accuracy", metrics["context_accuracy"])
        if self.control_probes is not None:
            self.log(f"{split}/control_micro_f1", metrics["control_micro_f1"])
            self.log(f"{split}/selectivity", metrics["selectivity"], prog_bar=split == "dev")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        heads = [head for head in (self.probes, self.control_probes, self.mdl_probes) if head is not None]
        return self.optimizer([group for head in heads for group in head.parameter_groups(self.mix_lr)])

    def mix_summary(self) -> dict[str, Any]:
        """The real task's mix (ScalarMix.summary: weights, gamma, center of gravity); {} without one."""
        return {} if self.probes.mix is None else self.probes.mix.summary()


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


def with_selectivity(real: dict, control: dict) -> dict:
    """The control scores and selectivity (Hewitt & Liang 2019: real score - control score) of one split."""
    return {
        "control_micro_f1": control["micro_f1"],
        "control_context_accuracy": control["context_accuracy"],
        "selectivity": real["micro_f1"] - control["micro_f1"],
        "selectivity_context_accuracy": real["context_accuracy"] - control["context_accuracy"],
    }
