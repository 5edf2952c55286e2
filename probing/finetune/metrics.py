"""Dev metrics of fine-tuning: accuracy (every task), F1 of the positive class (MRPC, as GLUE reports it) and
seqeval's entity-level F1 (NER), each a torchmetrics Metric so that Lightning syncs them across processes."""

from __future__ import annotations

import torch
from seqeval.metrics import f1_score
from seqeval.scheme import IOB2
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.classification import BinaryF1Score, MulticlassAccuracy
from torchmetrics.utilities import dim_zero_cat

IGNORE = -100  # label of a position that is not scored (padding, a word cut off by max_length)
METRICS = ("accuracy", "accuracy_f1", "entity_f1")


class EntityF1(Metric):
    """seqeval's micro F1 over entities (strict IOB2 matching: an entity counts when its type and span both match).

    `update(predictions, labels)`, both (B, W) label ids with IGNORE where no word is; `tags` maps ids to IOB2 tags."""

    full_state_update = False

    def __init__(self, tags: list[str], **kwargs):
        super().__init__(**kwargs)
        self.tags = list(tags)
        self.add_state("predicted", default=[], dist_reduce_fx="cat")
        self.add_state("gold", default=[], dist_reduce_fx="cat")
        self.add_state("lengths", default=[], dist_reduce_fx="cat")

    def update(self, predictions: Tensor, labels: Tensor) -> None:
        scored = labels != IGNORE
        self.predicted.append(predictions[scored])
        self.gold.append(labels[scored])
        self.lengths.append(scored.sum(dim=1))

    def compute(self) -> Tensor:
        predicted, gold = dim_zero_cat(self.predicted).tolist(), dim_zero_cat(self.gold).tolist()
        lengths = dim_zero_cat(self.lengths).tolist()
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        as_tags = [[self.tags[i] for i in ids] for ids in (predicted, gold)]
        sentences = [[tags[start:start + length] for start, length in zip(starts, lengths)] for tags in as_tags]
        return torch.tensor(f1_score(sentences[1], sentences[0], mode="strict", scheme=IOB2, zero_division=0))


def dev_metrics(metric: str, labels: list[str]) -> dict[str, Metric]:
    """The metrics of a task by name: "accuracy"; "accuracy_f1" (MRPC: also the F1 of label "1"); "entity_f1" (NER:
    token accuracy and seqeval's entity F1)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}: {', '.join(METRICS)}")
    metrics: dict[str, Metric] = {"accuracy": MulticlassAccuracy(len(labels), average="micro", ignore_index=IGNORE)}
    if metric == "accuracy_f1":
        metrics["f1"] = BinaryF1Score()
    elif metric == "entity_f1":
        metrics["f1"] = EntityF1(labels)
    return metrics
