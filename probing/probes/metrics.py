"""Zhao et al. 2020's s-class probing evaluation (§3.2.2), as a pure function and a torchmetrics Metric.

See docs/probing.md, 'Probes and metric'.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

POSITIVE_THRESHOLD = 0.5
# columns of SClassMetrics' combination table; column POSITIVES + k counts the contexts probe k predicts positive
ID, LABEL, CONTEXTS, POSITIVES = range(4)
NO_LABEL = -1


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
    ones = torch.ones_like(combination_ids, dtype=torch.long)
    return merge_combinations(combination_ids, labels, ones, positive.long(), num_classes)


def merge_combinations(
    ids: Tensor, labels: Tensor, contexts: Tensor, positives: Tensor, num_classes: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Rows of counts (contexts (N,), positives (N, C)) summed per id into combination_decisions' result."""
    unique, row = torch.unique(ids, return_inverse=True)
    n_rows = unique.numel()
    contexts = torch.zeros(n_rows, dtype=torch.long, device=ids.device).index_add_(0, row, contexts)
    positives = torch.zeros(n_rows, num_classes, dtype=torch.long, device=ids.device).index_add_(0, row, positives)
    decisions = 2 * positives >= contexts[:, None]
    combination_label = torch.empty(n_rows, dtype=labels.dtype, device=labels.device).scatter_(0, row, labels)
    _check_one_label_per_combination(labels, ids, combination_label[row])
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
        _raise_two_labels(combination_ids[n], combination_label[n], labels[n])


def _raise_two_labels(combination_id: Tensor, label: Tensor, other: Tensor) -> None:
    raise ValueError(
        f"combination id {int(combination_id)} carries two labels ({int(label)} and {int(other)}); a combination "
        "is one (word, s-class) pair, so give each pair its own id"
    )


class CountMetric(Metric):
    """Counts summed over batches (and across processes under DDP), scored in compute()."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.add_state("n_contexts", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("n_correct", default=torch.tensor(0), dist_reduce_fx="sum")

    def _count_contexts(self, n: int, correct: Tensor) -> None:
        # not in place: a state reset under Lightning's inference mode cannot be updated in place outside it
        self.n_contexts = self.n_contexts + n
        self.n_correct = self.n_correct + correct.sum()

    def _context_accuracy(self) -> float:
        # the float32 mean of the per-context hits, as the score has always been computed
        return float(self.n_correct.float() / self.n_contexts.float())


class SClassMetrics(CountMetric):
    """Micro F1 over Zhao's (probe, combination) decisions, accumulated over batches and synced under DDP.

    `update(positive_prob (N, C), labels (N,), combination_ids (N,))` counts, per combination, its contexts and
    how many of them each probe predicts positive (positive_prob[:, k] >= 0.5), in a table with one row per
    combination id from the smallest to the largest id seen, so ids should be dense (the store's combination ids
    and word ids are). The table grows geometrically and reset() zeroes it rather than freeing it, so the passes
    after a split's first allocate nothing. Tables are concatenated across processes and merged by id, so a
    combination split over batches or devices is aggregated whole.

    `compute()` returns plain Python values:
      micro_f1, micro_precision, micro_recall: floats;
      per_class_f1: list of C floats, None where class k has no gold combination and no positive
        decision (F1 undefined; 0.0 where it only has false positives);
      true_positives, false_positives, false_negatives: ints over all decisions;
      n_combinations, n_contexts: ints;
      context_accuracy: fraction of contexts whose argmax_k positive_prob is the gold class, i.e. the
        C probes read as one one-vs-rest classifier (a per-context view, not part of Zhao's measure).
    """

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(num_classes, **kwargs)
        self.add_state("table", default=[], dist_reduce_fx="cat")  # one (rows, POSITIVES + C) tensor per process
        self._capacity = 0

    def update(self, positive_prob: Tensor, labels: Tensor, combination_ids: Tensor) -> None:
        _check_shapes(positive_prob, labels, combination_ids, self.num_classes)
        if labels.numel() == 0:
            return
        positive_prob, labels, ids = positive_prob.detach(), labels.detach().long(), combination_ids.detach().long()
        table = self._table_covering(ids)
        rows = ids - table[0, ID]
        _record_labels(table, rows, labels, ids)
        counts = torch.cat([torch.ones_like(labels)[:, None], (positive_prob >= POSITIVE_THRESHOLD).long()], dim=1)
        table[:, CONTEXTS:].index_add_(0, rows, counts)
        self._count_contexts(labels.numel(), positive_prob.argmax(dim=1) == labels)

    def reset(self) -> None:
        """Clear the counts; the table is kept, zeroed, so later passes over a split allocate nothing."""
        table = self.table[0] if self.table else None
        super().reset()
        if table is not None and (torch.is_inference_mode_enabled() or not table.is_inference()):
            table[:, CONTEXTS:] = 0
            table[:, LABEL] = NO_LABEL
            self.table.append(table)

    def _table_covering(self, ids: Tensor) -> Tensor:
        """The table, reallocated (geometrically larger) when `ids` fall outside its rows."""
        low, high = int(ids.min()), int(ids.max())
        if not self.table:
            return self._new_table(None, low, max(high - low + 1, self._capacity), ids.device)
        old = self.table[0]
        base = int(old[0, ID])
        # a table made under Lightning's inference mode cannot be updated in place outside it: it is copied
        usable = torch.is_inference_mode_enabled() or not old.is_inference()
        if base <= low and high < base + len(old) and usable:
            return old
        low, high = min(low, base), max(high, base + len(old) - 1)
        return self._new_table(old, low, max(high - low + 1, 2 * len(old)), ids.device)

    def _new_table(self, old: Tensor | None, first_id: int, rows: int, device: torch.device) -> Tensor:
        """A table of `rows` ids from `first_id` holding `old`'s counts, in place of `old`."""
        table = torch.zeros(rows, POSITIVES + self.num_classes, dtype=torch.long, device=device)
        table[:, ID] = torch.arange(first_id, first_id + rows, device=device)
        table[:, LABEL] = NO_LABEL
        if old is None:
            self.table.append(table)
        else:
            offset = int(old[0, ID]) - first_id
            table[offset:offset + len(old)] = old
            self.table[0] = table
        self._capacity = rows
        return table

    def compute(self) -> dict:
        if self.n_contexts == 0:  # (after a DDP sync, `table` is one tensor of every process's rows)
            raise ValueError("SClassMetrics.compute() called before any update(): the split has no contexts")
        table = dim_zero_cat(self.table)
        table = table[table[:, CONTEXTS] > 0]
        decisions, gold, _ = merge_combinations(
            table[:, ID], table[:, LABEL], table[:, CONTEXTS], table[:, POSITIVES:], self.num_classes
        )
        return {
            **decision_scores(decisions, gold),
            "n_combinations": int(gold.shape[0]),
            "n_contexts": int(self.n_contexts),
            "context_accuracy": self._context_accuracy(),
        }


def _record_labels(table: Tensor, rows: Tensor, labels: Tensor, ids: Tensor) -> None:
    """Store each combination's label, refusing a combination with two (earlier or within this batch)."""
    known = table[rows, LABEL]
    table[rows, LABEL] = labels
    earlier = (known != NO_LABEL) & (known != labels)
    clash = (earlier | (table[rows, LABEL] != labels)).nonzero()
    if clash.numel():
        n = clash[0, 0]
        _raise_two_labels(ids[n], known[n] if earlier[n] else table[rows[n], LABEL], labels[n])


class TypeLevelMetrics(CountMetric):
    """Micro F1 over all word x class decisions of type-level probing (Zhao et al. 2020 Fig. 1, §3.2.1).

    One vector per word, so there is nothing to aggregate: probe k's decision on word w is
    positive_prob[w, k] >= 0.5, gold is "k is one of w's s-classes" (a word may have several).
    `update(positive_prob (N, C), targets (N, C) bool)` adds per-class true/false positive and false negative counts;
    `compute()` returns the keys of SClassMetrics, with n_combinations = the number of gold (word, class) pairs,
    n_contexts = the number of words, and context_accuracy = the share of words whose highest-scoring probe is one
    of their classes.
    """

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(num_classes, **kwargs)
        for name in ("true_positives", "false_positives", "false_negatives"):
            self.add_state(name, default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, positive_prob: Tensor, targets: Tensor) -> None:
        if (positive_prob.dim() != 2 or positive_prob.shape != targets.shape
                or positive_prob.shape[1] != self.num_classes):
            raise ValueError(f"expected predictions and targets of shape (N, {self.num_classes}), "
                             f"got {tuple(positive_prob.shape)} and {tuple(targets.shape)}")
        positive_prob, gold = positive_prob.detach(), targets.detach().bool()
        tp, fp, fn = stat_counts(positive_prob >= POSITIVE_THRESHOLD, gold)
        self.true_positives = self.true_positives + tp
        self.false_positives = self.false_positives + fp
        self.false_negatives = self.false_negatives + fn
        best = positive_prob.argmax(dim=1)
        self._count_contexts(len(gold), gold[torch.arange(len(gold), device=gold.device), best])

    def compute(self) -> dict:
        if self.n_contexts == 0:
            raise ValueError("TypeLevelMetrics.compute() called before any update(): the split has no words")
        return {
            **scores_from_counts(self.true_positives, self.false_positives, self.false_negatives),
            "n_combinations": int(self.true_positives.sum() + self.false_negatives.sum()),
            "n_contexts": int(self.n_contexts),
            "context_accuracy": self._context_accuracy(),
        }


def stat_counts(decisions: Tensor, gold: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-class (C,) true positives, false positives and false negatives of (M, C) boolean decisions."""
    return (decisions & gold).sum(dim=0), (decisions & ~gold).sum(dim=0), (~decisions & gold).sum(dim=0)


def decision_scores(decisions: Tensor, gold: Tensor) -> dict:
    """Micro precision/recall/F1, per-class F1 and TP/FP/FN of (M, C) boolean decisions against (M, C) gold."""
    return scores_from_counts(*stat_counts(decisions, gold))


def scores_from_counts(tp: Tensor, fp: Tensor, fn: Tensor) -> dict:
    """decision_scores from per-class (C,) counts, in float32 with torchmetrics' operations (its
    multilabel_f1_score, _precision and _recall, zero_division=0), so the scores match it bit for bit.

    Per-class F1 is None where class k has no gold pair and no positive decision (F1 undefined)."""
    per_class_f1 = _divide(2.0 * tp, 2.0 * tp + 1.0 * fn + fp)
    defined = (tp + fp + fn) > 0
    tp_all, fp_all, fn_all = tp.sum(), fp.sum(), fn.sum()
    return {
        "micro_f1": float(_divide(2.0 * tp_all, 2.0 * tp_all + 1.0 * fn_all + fp_all)),
        "micro_precision": float(_divide(tp_all, tp_all + fp_all)),
        "micro_recall": float(_divide(tp_all, tp_all + fn_all)),
        "per_class_f1": [float(f1) if ok else None for f1, ok in zip(per_class_f1, defined)],
        "true_positives": int(tp_all),
        "false_positives": int(fp_all),
        "false_negatives": int(fn_all),
    }


def _divide(num: Tensor, denom: Tensor) -> Tensor:
    num, denom = num.float(), denom.float()
    return torch.where(denom != 0, num / denom, torch.zeros((), dtype=num.dtype, device=num.device))
