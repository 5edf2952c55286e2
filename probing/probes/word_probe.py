"""The multi-class word and word-pair probe (Hewitt & Liang 2019 §3-4) as a LightningModule, with its control task
and the prefix probes of the MDL online code (Voita & Titov 2020 §2.2) trained beside it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassStatScores

from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.errors import ConfigError
from probing.probes.components.prefix_probes import PrefixProbes, check_block_ends
from probing.probes.components.word_probes import WordProbeHead, check_word_probe_settings
from probing.probes.probe_module import ProbeModule
from probing.probes.sclass_probe import note_precision

CONTROL = "control"
# fused: one pass over parameters, gradients and moments (as SClassProbe)
DEFAULT_OPTIMIZER = partial(torch.optim.Adam, lr=1e-3, fused=True)


class WordProbe(ProbeModule):
    """One multi-class probe on frozen word (or word-pair) vectors, its control task, and the MDL prefix probes.

    Batches: `features` (B, D) or (B, num_layers, D) float32, `label` (B,) int64; with `control=True` also
    `control_label` (B,) (Hewitt & Liang's control task: a label per word type); with `mdl_block_ends` the training
    batches also carry `order` (B,) int64, the example's position in the seeded MDL order (`probing.probes.mdl`).

    Submodules: `probes` (the task's probe, a `WordProbeHead` with one head), `control_probes` (the same, for the
    control task, with control=True) and `mdl_probes` (with MDL): the `PrefixProbes` of the online code, one target
    column for the task's labels and, with the control task, one for the control labels (S = len(mdl_block_ends)
    blocks, S-1 prefix probes per column). Family, size and dropout are those of the task probe.

    Training: every batch is drawn from the whole training set, and all probes train in the same steps. The loss is
    the task's mean cross-entropy + the control task's + the sum over prefix probes of each one's mean cross-entropy
    over the batch rows of its prefix (0 when the batch has none). The probes share no parameter, so each gets the
    gradient it would get alone on those rows. Voita & Titov train each prefix's probe on its own; here a prefix's
    batches are the rows of the shared batches that fall in it, so they are smaller (B * t_i / n rows on average) and
    more frequent than batches of B drawn from the prefix alone, while an epoch still shows each probe each of its
    examples once; what it buys is one fit, one pass over the data and one optimizer for all probes (bench/mdl.py).
    A prefix probe without rows in a batch does not run and the optimizer skips it. `optimizer` builds the optimizer
    from parameter groups; Adam, lr 1e-3 by default (fused). A non-finite training loss stops the run with a
    ProbingError.

    Prefix probes' weights: each keeps the weights of its epoch with the lowest dev cross-entropy (`PrefixProbes`),
    restored when fitting ends. `codelength(train_batches)` then gives the online code.

    Metrics, for each split scored (and for the control task): accuracy, macro-F1 (over the labels that occur in
    the split's gold labels or predictions; torchmetrics leaves out labels with neither) and per-label F1 (None for
    such a label). Logged: dev/micro_f1 (= accuracy: with one label per example, micro-F1 equals accuracy; the name
    lets the KeepBestWeights callbacks of the s-class probes, monitor dev/micro_f1 and dev/control_micro_f1, work
    unchanged), dev/accuracy, dev/macro_f1, and with the control task dev/control_micro_f1, dev/control_accuracy,
    dev/selectivity (accuracy - control accuracy, Hewitt & Liang). `split_metrics[split]` holds the latest metrics of
    each split as plain Python values: accuracy, macro_f1, per_label_f1 {label: f1}, n_examples, and with the control
    task control_accuracy, control_macro_f1, selectivity.

    `num_layers`: features are (B, num_layers, D) and each probe has its own ELMo scalar mix (options in `mix`:
    layer_norm, dropout, l2_lambda, lr), its L2 penalty added to the loss; the task probe's mix is logged every epoch
    (mix/weight_<j>, mix/gamma).

    `rank` (linear family, Hewitt & Liang's rank-constrained probe D -> rank -> K) is at most `input_dim`, the
    feature dimension D (a word pair's 2D or 3D): a larger rank constrains nothing, so it would be recorded as a
    constraint that never applied. It is refused with a ConfigError when the module is built, before any training
    (probe.py builds it before the loggers start).
    """

    def __init__(
        self,
        input_dim: int,
        label_names: list[str],
        family: str = "linear",
        hidden_dim: int = 1000,
        rank: int | None = None,
        dropout: float = 0.0,
        optimizer: Callable[..., torch.optim.Optimizer] = DEFAULT_OPTIMIZER,
        num_layers: int | None = None,
        mix: Mapping[str, Any] | None = None,
        control: bool = False,
        mdl_block_ends: list[int] | None = None,
    ):
        super().__init__()
        check_word_probe_settings(family, hidden_dim, rank, dropout)
        check_rank_within(rank, input_dim)
        ends = check_block_ends(mdl_block_ends)
        self.save_hyperparameters(ignore=["optimizer"])
        self.label_names = list(label_names)
        self.optimizer = optimizer
        mix_options = {key: value for key, value in dict(mix or {}).items() if key != "lr"}
        self.mix_lr = dict(mix or {}).get("lr")
        head = dict(input_dim=input_dim, num_labels=len(self.label_names), family=family, hidden_dim=hidden_dim,
                    rank=rank, dropout=dropout, num_layers=num_layers, mix=mix_options)
        self.probes = WordProbeHead(1, **head)
        self.control_probes = WordProbeHead(1, **head) if control else None
        self.mdl_block_ends = ends
        self.mdl_probes = PrefixProbes(ends, 2 if control else 1, **head) if ends else None
        names = [*EVAL_SPLITS, *(f"{split}_{CONTROL}" for split in EVAL_SPLITS if control)]
        self.metrics = nn.ModuleDict({name: split_metrics(len(self.label_names)) for name in names})
        self.split_metrics: dict[str, dict] = {}

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def has_control(self) -> bool:
        return self.control_probes is not None

    def forward(self, features: Tensor) -> Tensor:
        """features (B, D) or (B, num_layers, D) -> logits (B, K)."""
        return self.probes(features)[:, 0]

    def on_fit_start(self) -> None:
        note_precision(str(self.trainer.precision), self.device)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        features, label = batch["features"], batch["label"]
        loss = F.cross_entropy(self.probes(features)[:, 0], label) + self.probes.penalty()
        if self.control_probes is not None:
            loss = loss + F.cross_entropy(self.control_probes(features)[:, 0], batch["control_label"])
            loss = loss + self.control_probes.penalty()
        if self.mdl_probes is not None:
            loss = loss + self.prefix_losses(batch).sum() + self.mdl_probes.penalty()
        return self.checked_loss(loss, batch_idx, features.shape[0])

    def mdl_targets(self, batch: dict) -> Tensor:
        """(B, T): the prefix probes' target columns, the label and, with the control task, the control label."""
        labels = [batch["label"]] + ([batch["control_label"]] if self.has_control else [])
        return torch.stack(labels, dim=1)

    def prefix_losses(self, batch: dict) -> Tensor:
        """(prefixes, T): each prefix probe's mean cross-entropy over the batch rows of its prefix (0 without any)."""
        return self.mdl_probes.losses(batch["features"], self.mdl_targets(batch), batch.get("order"))

    def on_train_epoch_end(self) -> None:
        self.log_mix(self.probes.mixes[0] if self.probes.mixes is not None else None)

    def on_test_epoch_end(self) -> None:
        for split in TEST_SPLITS:
            if self.metrics[split]["accuracy"].update_called:
                self._log_split(split)

    def _update_metrics(self, split: str, batch: dict) -> None:
        features = batch["features"]
        update(self.metrics[split], self.probes(features)[:, 0], batch["label"])
        if self.control_probes is not None:
            update(self.metrics[f"{split}_{CONTROL}"], self.control_probes(features)[:, 0], batch["control_label"])

    def _compute(self, name: str) -> dict:
        """Compute (synced across processes) and reset one split's metrics, as plain Python values."""
        metrics = self.metrics[name]
        accuracy, macro_f1 = float(metrics["accuracy"].compute()), float(metrics["macro_f1"].compute())
        stats = metrics["stats"].compute()  # (K, 5): tp, fp, tn, fn, support
        for metric in metrics.values():
            metric.reset()
        tp, fp, fn, support = stats[:, 0], stats[:, 1], stats[:, 3], stats[:, 4]
        denominator = (2 * tp + fp + fn).tolist()
        per_label = {label: (2 * t / d if d else None)
                     for label, t, d in zip(self.label_names, tp.tolist(), denominator)}
        return {"accuracy": accuracy, "macro_f1": macro_f1, "per_label_f1": per_label,
                "n_examples": int(support.sum())}

    def _log_split(self, split: str) -> None:
        if not self.metrics[split]["accuracy"].update_called:
            return
        metrics = self._compute(split)
        if self.control_probes is not None:
            control = self._compute(f"{split}_{CONTROL}")
            metrics |= {"control_accuracy": control["accuracy"], "control_macro_f1": control["macro_f1"],
                        "selectivity": metrics["accuracy"] - control["accuracy"]}
        self.split_metrics[split] = metrics
        self.log(f"{split}/micro_f1", metrics["accuracy"], prog_bar=split == "dev")
        self.log(f"{split}/accuracy", metrics["accuracy"])
        self.log(f"{split}/macro_f1", metrics["macro_f1"])
        if self.control_probes is not None:
            self.log(f"{split}/control_micro_f1", metrics["control_accuracy"])
            self.log(f"{split}/control_accuracy", metrics["control_accuracy"])
            self.log(f"{split}/selectivity", metrics["selectivity"], prog_bar=split == "dev")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        heads = [head for head in (self.probes, self.control_probes, self.mdl_probes) if head is not None]
        return self.optimizer([group for head in heads for group in head.parameter_groups(self.mix_lr)])

    def mix_summary(self) -> dict[str, Any]:
        """The task probe's mix (ScalarMix.summary: weights, gamma, center of gravity); {} without one."""
        return {} if self.probes.mixes is None else self.probes.mixes[0].summary()

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """K labels; the task's target column, then the control task's."""
        return self.num_labels, slice(0, 1), slice(1, 2) if self.has_control else None


def check_rank_within(rank: int | None, input_dim: int) -> None:
    """probe.rank at most the feature dimension: a rank of D or more leaves a D-dimensional linear map unconstrained."""
    if rank is not None and rank > input_dim:
        raise ConfigError(f"probe.rank={rank} exceeds the feature dimension {input_dim} of this representation; a "
                          f"rank of {input_dim} or more constrains nothing. Fix: probe.rank<={input_dim}, or "
                          "probe.rank=null")


def split_metrics(num_labels: int) -> nn.ModuleDict:
    """One split's metrics: accuracy (= micro-F1), macro-F1 and per-label counts (for the per-label F1)."""
    return nn.ModuleDict({
        "accuracy": MulticlassAccuracy(num_labels, average="micro"),
        "macro_f1": MulticlassF1Score(num_labels, average="macro"),
        "stats": MulticlassStatScores(num_labels, average=None),
    })


def update(metrics: nn.ModuleDict, logits: Tensor, target: Tensor) -> None:
    predictions = logits.argmax(dim=-1)
    for metric in metrics.values():
        metric.update(predictions, target)
