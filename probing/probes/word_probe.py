"""The multi-class word and word-pair probe (Hewitt & Liang 2019 §3-4) as a LightningModule, with its control task
and the prefix probes of the MDL online code (Voita & Titov 2020 §2.2) trained beside it."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassStatScores

from probing.probes.classifier_probe import ClassifierProbe


class WordProbe(ClassifierProbe):
    """One multi-class probe on frozen word (or word-pair) vectors, its control task, and the MDL prefix probes, built
    with the keyword contract of `ClassifierProbe` (a family of Hewitt & Liang: probe=linear, mlp1, mlp2).

    Batches: `features` (B, D) or (B, num_layers, D) float32, `label` (B,) int64; with `control=True` also
    `control_label` (B,) (Hewitt & Liang's control task: a label per word type); with `mdl_block_ends` the training
    batches also carry `order` (B,) int64, the example's position in the seeded MDL order (`probing.probes.bits.mdl`).

    Heads: `probes` (the task's probe, a `ProbeHead` of one K-way probe), the control task's part's (`ControlPart`:
    the same, for the control task) and, with MDL, the online code's part (`OnlineCodePart`) and its `PrefixProbes`:
    one target column for the task's labels and, with the control task, one for the control labels
    (S = len(mdl_block_ends) blocks, S-1 prefix probes per column). Family, size and dropout are those of the task
    probe.

    Training: every batch is drawn from the whole training set, and all probes train in the same steps. The loss is
    the task's mean cross-entropy + the control task's + the sum over prefix probes of each one's mean cross-entropy
    over the batch rows of its prefix (0 when the batch has none). The probes share no parameter, so each gets the
    gradient it would get alone on those rows. Voita & Titov train each prefix's probe on its own; here a prefix's
    batches are the rows of the shared batches that fall in it, so they are smaller (B * t_i / n rows on average) and
    more frequent than batches of B drawn from the prefix alone, while an epoch still shows each probe each of its
    examples once; what it buys is one fit, one pass over the data and one optimizer for all probes (bench/mdl.py).
    A prefix probe without rows in a batch does not run and the optimizer skips it. Adam, lr 1e-3 by default (fused).
    A non-finite training loss stops the run with a ProbingError.

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

    `num_layers`: features are (B, num_layers, D) and the probe has an ELMo scalar mix (options in `mix`: layer_norm,
    dropout, l2_lambda, lr), its L2 penalty added to the loss and its weights logged every epoch (mix/weight_<j>,
    mix/gamma); each prefix probe has its own.
    """

    SCORES = ("accuracy", "macro_f1", "selectivity", "control_accuracy")  # a run's headline scores

    def probe_shape(self) -> tuple[int, int]:
        """One K-way probe."""
        return 1, len(self.labels)

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def task_loss(self, logits: Tensor, batch: dict, control: bool) -> Tensor:
        return F.cross_entropy(logits[:, 0], batch["control_label" if control else "label"])

    def mdl_targets(self, batch: dict) -> Tensor:
        """(B, T): the prefix probes' target columns, the label and, with the control task, the control label."""
        labels = [batch["label"]] + ([batch["control_label"]] if self.has_control else [])
        return torch.stack(labels, dim=1)

    def new_scores(self) -> nn.ModuleDict:
        return split_metrics(self.num_labels)

    def update_scores(self, metrics: nn.Module, head: nn.Module, batch: dict, control: bool, split: str) -> None:
        update(metrics, head(self.probed(batch["features"]))[:, 0], batch["control_label" if control else "label"])

    def scored(self, metrics: nn.Module) -> bool:
        return metrics["accuracy"].update_called

    def computed(self, metrics: nn.Module) -> dict:
        """accuracy, macro_f1, per_label_f1, n_examples."""
        return computed(metrics, self.labels)

    def log_scores(self, split: str, scores: dict) -> None:
        self.log(f"{split}/micro_f1", scores["accuracy"], prog_bar=split == "dev")
        self.log(f"{split}/accuracy", scores["accuracy"])
        self.log(f"{split}/macro_f1", scores["macro_f1"])

    def selectivity(self, scores: dict, control: dict) -> dict:
        return selectivity(scores, control)

    def control_logs(self, scores: dict) -> dict:
        """dev/control_micro_f1 (the control head's keeper monitors it), control_accuracy, selectivity."""
        return {"control_micro_f1": scores["control_accuracy"], "control_accuracy": scores["control_accuracy"],
                "selectivity": scores["selectivity"]}

    def mdl_columns(self) -> tuple[int, slice, slice | None]:
        """K labels; the task's target column, then the control task's."""
        return self.num_labels, slice(0, 1), slice(1, 2) if self.has_control else None


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


def computed(metrics: nn.ModuleDict, labels: list[str]) -> dict:
    """The scores of one split's metrics (`split_metrics`), which are then reset: accuracy, macro_f1, per_label_f1
    {label: F1, None for a label neither in the gold labels nor predicted}, n_examples."""
    accuracy, macro_f1 = float(metrics["accuracy"].compute()), float(metrics["macro_f1"].compute())
    stats = metrics["stats"].compute()  # (K, 5): tp, fp, tn, fn, support
    for metric in metrics.values():
        metric.reset()
    tp, fp, fn, support = stats[:, 0], stats[:, 1], stats[:, 3], stats[:, 4]
    denominator = (2 * tp + fp + fn).tolist()
    per_label = {label: (2 * t / d if d else None) for label, t, d in zip(labels, tp.tolist(), denominator)}
    return {"accuracy": accuracy, "macro_f1": macro_f1, "per_label_f1": per_label, "n_examples": int(support.sum())}


def selectivity(scores: dict, control: dict) -> dict:
    """What a split's scores gain from the control task's (`control`, scored as `computed`): the control accuracy
    and macro-F1, and the selectivity, accuracy - control accuracy (Hewitt & Liang)."""
    return {"control_accuracy": control["accuracy"], "control_macro_f1": control["macro_f1"],
            "selectivity": scores["accuracy"] - control["accuracy"]}
