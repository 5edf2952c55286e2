"""The multi-class word and word-pair probe (Hewitt & Liang 2019 §3-4) as a LightningModule, with its control task
and the prefix probes of the MDL online code (Voita & Titov 2020 §2.2) trained beside it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import lightning
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassStatScores

from probing.data.splits import EVAL_SPLITS, TEST_SPLITS
from probing.errors import ProbingError
from probing.probes import mdl
from probing.probes.components.word_probes import WordProbeHead, check_word_probe_settings
from probing.probes.sclass_probe import warn_if_bf16_is_emulated

CONTROL = "control"
# fused: one pass over parameters, gradients and moments (as SClassProbe)
DEFAULT_OPTIMIZER = partial(torch.optim.Adam, lr=1e-3, fused=True)


class WordProbe(lightning.LightningModule):
    """One multi-class probe on frozen word (or word-pair) vectors, its control task, and the MDL prefix probes.

    Batches: `features` (B, D) or (B, num_layers, D) float32, `label` (B,) int64; with `control=True` also
    `control_label` (B,) (Hewitt & Liang's control task: a label per word type); with `mdl_block_ends` the training
    batches also carry `order` (B,) int64, the example's position in the seeded MDL order (`probing.probes.mdl`).

    Submodules: `probes` (the task's probe, a `WordProbeHead` with one head), `control_probes` (the same, for the
    control task, with control=True) and `mdl_probes` (with MDL): ONE `WordProbeHead` of S-1 prefix probes for the
    task, followed by S-1 for the control task when it is on (S = len(mdl_block_ends)). Prefix probe i (i = 0..S-2)
    trains on the examples whose position is < block_ends[i] and encodes block i+1, positions
    [block_ends[i], block_ends[i+1]). Family, size and dropout are those of the task probe.

    Training: every batch is drawn from the whole training set, and all probes train in the same steps. The loss is
    the task's mean cross-entropy + the control task's + the sum over prefix probes of each one's mean cross-entropy
    over the batch rows of its prefix (0 when the batch has none). The probes share no parameter, so each gets the
    gradient it would get alone on those rows. Voita & Titov train each prefix's probe on its own; here a prefix's
    batches are the rows of the shared batches that fall in it, so they are smaller (B * t_i / n rows on average) and
    more frequent than batches of B drawn from the prefix alone, while an epoch still shows each probe each of its
    examples once. The price: every step runs every prefix probe on every batch row (the rows outside its prefix
    masked), about S-1 times the arithmetic of training the prefixes alone (whose sizes sum to about n at the paper's
    shares); what it buys is one fit for all probes (bench/mdl.py). Adam also moves a prefix probe on a batch with
    none of its rows (a zero gradient, but its moments and the weight decay still step). `optimizer` builds the
    optimizer from parameter groups; Adam, lr 1e-3 by default (fused). A non-finite training loss stops the run with
    a ProbingError.

    Prefix probes' weights: V&T train each block's probe to convergence with early stopping; here each prefix probe
    keeps, in memory, the weights of its epoch with the lowest dev cross-entropy (the dev split is not part of the
    transmitted data), restored when fitting ends. `codelength(train_batches)` then gives the online code.

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
        self.num_prefixes = len(ends) - 1 if ends else 0
        self.mdl_probes = (WordProbeHead(self.num_prefixes * (2 if control else 1), **head)
                           if self.num_prefixes else None)
        self.register_buffer("block_ends", torch.tensor(ends or [], dtype=torch.long), persistent=False)
        names = [*EVAL_SPLITS, *(f"{split}_{CONTROL}" for split in EVAL_SPLITS if control)]
        self.metrics = nn.ModuleDict({name: split_metrics(len(self.label_names)) for name in names})
        self.mdl_dev_loss = HeadLoss(self.mdl_probes.num_heads) if self.mdl_probes is not None else None
        self.split_metrics: dict[str, dict] = {}
        self.mdl_best: dict[str, Any] | None = None  # {"state", "loss" (heads,), "epoch" (heads,)}

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
        warn_if_bf16_is_emulated(str(self.trainer.precision), self.device)

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        features, label = batch["features"], batch["label"]
        loss = F.cross_entropy(self.probes(features)[:, 0], label) + self.probes.penalty()
        if self.control_probes is not None:
            loss = loss + F.cross_entropy(self.control_probes(features)[:, 0], batch["control_label"])
            loss = loss + self.control_probes.penalty()
        if self.mdl_probes is not None:
            loss = loss + self.prefix_losses(batch).sum() + self.mdl_probes.penalty()
        if not torch.isfinite(loss):
            raise ProbingError(f"the training loss became {float(loss.detach())} at epoch {self.current_epoch}, step "
                               f"{batch_idx}: the features or the learning rate are broken. Fix: check the feature "
                               "store (delete it to rebuild it) or lower probe.module.optimizer.lr")
        self.log("train/loss", loss, on_step=False, on_epoch=True, batch_size=features.shape[0])
        return loss

    def mdl_targets(self, batch: dict) -> Tensor:
        """(B, heads): each prefix probe's target, the label (task probes) or the control label (control probes)."""
        labels = [batch["label"]] + ([batch["control_label"]] if self.has_control else [])
        return torch.cat([label[:, None].expand(-1, self.num_prefixes) for label in labels], dim=1)

    def prefix_losses(self, batch: dict) -> Tensor:
        """(heads,): each prefix probe's mean cross-entropy over the batch rows of its prefix (0 without any)."""
        order = batch.get("order")
        if order is None:
            raise ProbingError("MDL probing needs each training example's position in the MDL order (the batch key "
                               "`order`), but the training batches have none. Fix: build the datamodule with the MDL "
                               "seed (probe.mdl=true)")
        logits = self.mdl_probes(batch["features"])  # (B, heads, K)
        targets = self.mdl_targets(batch)
        in_prefix = order[:, None] < self.block_ends[None, :-1]  # (B, prefixes)
        in_prefix = in_prefix.repeat(1, 2) if self.has_control else in_prefix
        per_row = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
        per_row = torch.where(in_prefix, per_row, 0.0)  # no gradient from rows outside the prefix
        return per_row.sum(dim=0) / in_prefix.sum(dim=0).clamp(min=1)

    def on_train_epoch_end(self) -> None:
        if self.probes.mixes is not None:
            mix = self.probes.mixes[0]
            for j, weight in enumerate(mix.normalized_weights().tolist()):
                self.log(f"mix/weight_{j}", weight)
            self.log("mix/gamma", float(mix.gamma.detach()))

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._update_metrics("dev", batch)
        if self.mdl_probes is not None:
            logits = self.mdl_probes(batch["features"])
            targets = self.mdl_targets(batch)
            per_row = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
            self.mdl_dev_loss.update(per_row.view_as(targets))

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._update_metrics(TEST_SPLITS[dataloader_idx], batch)

    def on_validation_epoch_end(self) -> None:
        self._log_split("dev")
        if self.mdl_probes is not None and self.mdl_dev_loss.update_called:
            loss = self.mdl_dev_loss.compute()
            self.mdl_dev_loss.reset()
            if not self.trainer.sanity_checking and self.trainer.state.fn == TrainerFn.FITTING:
                self._keep_best_prefixes(loss)

    def on_test_epoch_end(self) -> None:
        for split in TEST_SPLITS:
            if self.metrics[split]["accuracy"].update_called:
                self._log_split(split)

    def _keep_best_prefixes(self, loss: Tensor) -> None:
        """Keep, per prefix probe, the weights of the epoch with the lowest dev cross-entropy so far."""
        loss = loss.detach().cpu()
        if self.mdl_best is None:
            improved = torch.isfinite(loss)
            self.mdl_best = {"state": self.mdl_probes.state_of_heads(), "loss": torch.full_like(loss, math.inf),
                             "epoch": torch.full(loss.shape, -1, dtype=torch.long)}
        else:
            improved = loss < self.mdl_best["loss"]
            current = self.mdl_probes.state_of_heads()
            for name, value in self.mdl_best["state"].items():
                value[improved.to(value.device)] = current[name][improved.to(value.device)]
        self.mdl_best["loss"][improved] = loss[improved]
        self.mdl_best["epoch"][improved] = self.current_epoch

    def on_fit_end(self) -> None:
        if self.mdl_best is not None:
            kept = self.mdl_best["epoch"] >= 0
            self.mdl_probes.copy_heads_(self.mdl_best["state"], kept.to(self.block_ends.device))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.mdl_best is not None:
            checkpoint["mdl_best"] = self.mdl_best

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.mdl_best = checkpoint.get("mdl_best")

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

    @torch.no_grad()
    def codelength(self, train_batches: Iterable[dict]) -> dict[str, Any]:
        """The online codelength of the training labels (Voita & Titov §2.2), `mdl.summary`'s results block plus
        `prefix_best_epochs` (the epoch whose weights each prefix probe kept; -1: the last epoch, no dev split).

        `train_batches`: every training example exactly once (any order, any batch size), with `order`; run after
        fitting, so that each prefix probe has its best-dev weights. In eval mode, on the module's device: block
        i+1 costs sum -log2 p_i(y | x) over its examples under prefix probe i (the control task's probes: of the
        control labels). The first block is sent with the uniform code.
        """
        if self.mdl_block_ends is None:
            raise ProbingError("codelength needs the MDL prefix probes. Fix: probe.mdl=true")
        was_training = self.training
        self.eval()
        try:
            heads = self.mdl_probes.num_heads if self.mdl_probes is not None else 0
            bits = torch.zeros(heads, dtype=torch.float64, device=self.device)
            counts = torch.zeros(len(self.mdl_block_ends) + 1, dtype=torch.long, device=self.device)
            ends = self.block_ends
            for batch in train_batches:
                order = batch["order"].to(self.device)
                counts += torch.bucketize(order, ends, right=True).bincount(minlength=len(ends) + 1)
                if self.mdl_probes is None:
                    continue
                batch = {key: value.to(self.device) for key, value in batch.items() if isinstance(value, Tensor)}
                logits = self.mdl_probes(batch["features"].float())
                nll = -logits.double().log_softmax(dim=-1).gather(-1, self.mdl_targets(batch)[..., None])[..., 0]
                in_block = (order[:, None] >= ends[None, :-1]) & (order[:, None] < ends[None, 1:])
                in_block = in_block.repeat(1, 2) if self.has_control else in_block
                bits += torch.where(in_block, nll, 0.0).sum(dim=0) / math.log(2)
        finally:
            self.train(was_training)
        # the examples of each block, and none past the last one
        expected = torch.cat([torch.diff(ends, prepend=ends.new_zeros(1)), ends.new_zeros(1)])
        if not torch.equal(counts, expected):
            raise ProbingError(f"codelength got {counts.tolist()} training examples per MDL block, expected "
                               f"{expected.tolist()}: the batches must hold every training example exactly once. Fix: "
                               "pass the whole training split, unshuffled, not dropping the last batch")
        bits = bits.tolist()
        prefixes = self.num_prefixes
        result = mdl.summary(self.num_labels, self.mdl_block_ends, bits[:prefixes],
                             bits[prefixes:] if self.has_control else None)
        epochs = self.mdl_best["epoch"].tolist() if self.mdl_best is not None else [-1] * heads
        result["prefix_best_epochs"] = epochs[:prefixes]
        if self.has_control:
            result["control_prefix_best_epochs"] = epochs[prefixes:]
        return result


def check_block_ends(ends: Iterable[int] | None) -> list[int] | None:
    """The MDL block ends (`mdl.block_ends`): at least one, increasing, the first >= 1."""
    if ends is None:
        return None
    ends = [int(end) for end in ends]
    if not ends or ends[0] < 1 or any(b <= a for a, b in zip(ends, ends[1:])):
        raise ProbingError(f"mdl_block_ends={ends} must be increasing positive example counts (mdl.block_ends gives "
                           "them)")
    return ends


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


class HeadLoss(Metric):
    """The mean cross-entropy of each of `num_heads` probes over all rows seen (synced across processes)."""

    full_state_update = False

    def __init__(self, num_heads: int):
        super().__init__()
        self.add_state("total", default=torch.zeros(num_heads, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("rows", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, per_row: Tensor) -> None:
        """per_row (B, heads) losses."""
        self.total += per_row.double().sum(dim=0)
        self.rows += per_row.shape[0]

    def compute(self) -> Tensor:
        return self.total / self.rows.clamp(min=1)
