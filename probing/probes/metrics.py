"""Zhao et al. 2020's s-class probing evaluation (§3.2.2), as a pure function and a torchmetrics Metric.

Contexts are grouped into word-s-class combinations c = (w, s). For every combination and every class k,
probe k's decision is 1 iff at least half of the contexts of c are predicted positive by probe k (a tie at
exactly half counts as 1: "at least half ... correctly classified"). The gold decision is k == s.
The score is micro F1 over all (k, c) decisions: a TP/FN comes from k == s, an FP from k != s; true
negatives do not enter F1.

Where the paper is vague: it reports "15,437 decisions" on dev, which equals the number of dev
combinations, i.e. the number of gold (k == s) decisions (TP + FN). The decisions of the other probes on
a combination are counted here as possible false positives, which is what makes precision meaningful.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.functional.classification import (
    multilabel_f1_score,
    multilabel_precision,
    multilabel_recall,
    multilabel_stat_scores,
)
from torchmetrics.utilities import dim_zero_cat

POSITIVE_THRESHOLD = 0.5


def combination_decisions(
    positive: Tensor, labels: Tensor, combination_ids: Tensor, num_classes: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Aggregate per-context probe decisions into per-combination decisions.

    positive:         BoolTensor (N, C), probe k predicts context n positive.
    labels:           (N,) gold class of each context.
    combination_ids:  (N,) any integers; contexts with the same id form one word-s-class combination.

    Returns (decisions (M, C) bool, gold (M, C) bool, contexts_per_combination (M,) long), one row per
    distinct combination id in ascending id order. Raises ValueError if a combination id carries two labels.
    """
    _check_shapes(positive, labels, combination_ids, num_classes)
    ids, row = torch.unique(combination_ids, return_inverse=True)
    n_rows = ids.numel()
    contexts = torch.bincount(row, minlength=n_rows)
    positives = torch.zeros(n_rows, num_classes, dtype=torch.long, device=positive.device)
    positives.index_add_(0, row, positive.long())
    decisions = 2 * positives >= contexts[:, None]
    combination_label = torch.empty(n_rows, dtype=labels.dtype, device=labels.device).scatter_(0, row, labels)
    _check_one_label_per_combination(labels, combination_ids, combination_label[row])
    gold = torch.nn.functional.one_hot(combination_label.long(), num_classes).bool()
    return decisions, gold, contexts


def _check_shapes(positive: Tensor, labels: Tensor, combination_ids: Tensor, num_classes: int) -> None:
    if positive.dim() != 2 or positive.shape[1] != num_classes:
        raise ValueError(f"expected predictions of shape (N, {num_classes}), got {tuple(positive.shape)}")
    if labels.shape != (positive.shape[0],) or combination_ids.shape != (positive.shape[0],):
        raise ValueError(
            f"labels {tuple(labels.shape)} and combination ids {tuple(combination_ids.shape)} must both be "
            f"({positive.shape[0]},) to match the predictions"
        )
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{labels.min()}, {labels.max()}]")


def _check_one_label_per_combination(labels: Tensor, combination_ids: Tensor, combination_label: Tensor) -> None:
    clash = (labels != combination_label).nonzero()
    if clash.numel():
        n = clash[0, 0]
        raise ValueError(
            f"combination id {int(combination_ids[n])} carries two labels ({int(combination_label[n])} and "
            f"{int(labels[n])}); a combination is one (word, s-class) pair, so give each pair its own id"
        )


class DecisionMetric(Metric):
    """Probe outputs collected as list states (`STATES`), concatenated across processes, scored in compute()."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    STATES: tuple[str, ...] = ()

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        for name in self.STATES:
            self.add_state(name, default=[], dist_reduce_fx="cat")


class SClassMetrics(DecisionMetric):
    """Micro F1 over Zhao's (probe, combination) decisions, accumulated over batches and synced under DDP.

    `update(positive_prob (N, C), labels (N,), combination_ids (N,))` stores the contexts (states are
    concatenated across processes, so a combination split over batches or devices is aggregated whole).
    A context is predicted positive by probe k iff positive_prob[:, k] >= 0.5.

    torchmetrics fits at the level of the (M, C) decision matrix: once contexts are aggregated into
    combination decisions, the decisions vs gold are a multilabel problem, and micro/per-class
    precision, recall and F1 come from `torchmetrics.functional.classification.multilabel_*`.

    `compute()` returns plain Python values:
      micro_f1, micro_precision, micro_recall: floats;
      per_class_f1: list of C floats, None where class k has no gold combination and no positive
        decision (F1 undefined; 0.0 where it only has false positives);
      true_positives, false_positives, false_negatives: ints over all decisions;
      n_combinations, n_contexts: ints;
      context_accuracy: fraction of contexts whose argmax_k positive_prob is the gold class, i.e. the
        C probes read as one one-vs-rest classifier (a per-context view, not part of Zhao's measure).
    """

    STATES = ("positive_prob", "labels", "combination_ids")

    def update(self, positive_prob: Tensor, labels: Tensor, combination_ids: Tensor) -> None:
        _check_shapes(positive_prob, labels, combination_ids, self.num_classes)
        self.positive_prob.append(positive_prob.detach().float())
        self.labels.append(labels.detach().long())
        self.combination_ids.append(combination_ids.detach().long())

    def compute(self) -> dict:
        if len(self.labels) == 0:
            raise ValueError("SClassMetrics.compute() called before any update(): the split has no contexts")
        prob, labels = dim_zero_cat(self.positive_prob), dim_zero_cat(self.labels)
        decisions, gold, _ = combination_decisions(
            prob >= POSITIVE_THRESHOLD, labels, dim_zero_cat(self.combination_ids), self.num_classes
        )
        return {
            **decision_scores(decisions, gold),
            "n_combinations": int(gold.shape[0]),
            "n_contexts": int(labels.numel()),
            "context_accuracy": float((prob.argmax(dim=1) == labels).float().mean()),
        }


class TypeLevelMetrics(DecisionMetric):
    """Micro F1 over all word x class decisions of type-level probing (Zhao et al. 2020 Fig. 1, §3.2.1).

    One vector per word, so there is nothing to aggregate: probe k's decision on word w is
    positive_prob[w, k] >= 0.5, gold is "k is one of w's s-classes" (a word may have several).
    `update(positive_prob (N, C), targets (N, C) bool)`; `compute()` returns the keys of SClassMetrics, with
    n_combinations = the number of gold (word, class) pairs, n_contexts = the number of words, and
    context_accuracy = the share of words whose highest-scoring probe is one of their classes.
    """

    STATES = ("positive_prob", "targets")

    def update(self, positive_prob: Tensor, targets: Tensor) -> None:
        if (positive_prob.dim() != 2 or positive_prob.shape != targets.shape
                or positive_prob.shape[1] != self.num_classes):
            raise ValueError(f"expected predictions and targets of shape (N, {self.num_classes}), "
                             f"got {tuple(positive_prob.shape)} and {tuple(targets.shape)}")
        self.positive_prob.append(positive_prob.detach().float())
        self.targets.append(targets.detach().bool())

    def compute(self) -> dict:
        if len(self.targets) == 0:
            raise ValueError("TypeLevelMetrics.compute() called before any update(): the split has no words")
        prob, gold = dim_zero_cat(self.positive_prob), dim_zero_cat(self.targets)
        best = prob.argmax(dim=1)
        return {
            **decision_scores(prob >= POSITIVE_THRESHOLD, gold),
            "n_combinations": int(gold.sum()),
            "n_contexts": int(gold.shape[0]),
            "context_accuracy": float(gold[torch.arange(gold.shape[0], device=gold.device), best].float().mean()),
        }


def decision_scores(decisions: Tensor, gold: Tensor) -> dict:
    """Micro precision/recall/F1, per-class F1 and TP/FP/FN of (M, C) boolean decisions against (M, C) gold.

    Per-class F1 is None where class k has no gold pair and no positive decision (F1 undefined)."""
    args = (decisions.long(), gold.long(), gold.shape[1])
    tp, fp, _, fn, _ = multilabel_stat_scores(*args, average="none").T
    per_class_f1 = multilabel_f1_score(*args, average="none")
    defined = (tp + fp + fn) > 0
    return {
        "micro_f1": float(multilabel_f1_score(*args, average="micro")),
        "micro_precision": float(multilabel_precision(*args, average="micro")),
        "micro_recall": float(multilabel_recall(*args, average="micro")),
        "per_class_f1": [float(f1) if ok else None for f1, ok in zip(per_class_f1, defined)],
        "true_positives": int(tp.sum()),
        "false_positives": int(fp.sum()),
        "false_negatives": int(fn.sum()),
    }
