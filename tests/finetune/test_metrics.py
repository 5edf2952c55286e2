"""Fine-tuning dev metrics against hand-counted cases: seqeval's entity F1 through the torchmetrics wrapper."""

from __future__ import annotations

import pytest
import torch

from probing.finetune.metrics import IGNORE, EntityF1, dev_metrics

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def test_entity_f1_counts_whole_entities_over_padded_sentences():
    # gold: [B-PER I-PER O] [B-LOC] ; predicted: [B-PER O O] [B-LOC] -> 1 of 2 predicted right, 1 of 2 gold found.
    gold = torch.tensor([[1, 2, 0], [3, IGNORE, IGNORE]])
    predicted = torch.tensor([[1, 0, 0], [3, 4, 4]])  # predictions past the sentence are ignored
    metric = EntityF1(TAGS)
    metric.update(predicted, gold)
    assert float(metric.compute()) == pytest.approx(0.5)


def test_entity_f1_over_several_batches_equals_one_batch():
    gold = [torch.tensor([[1, 2, 0, 3]]), torch.tensor([[3, 4, IGNORE, IGNORE]])]
    predicted = [torch.tensor([[1, 2, 0, 0]]), torch.tensor([[3, 4, 0, 0]])]
    metric = EntityF1(TAGS)
    for p, g in zip(predicted, gold):
        metric.update(p, g)
    # gold entities: PER, LOC, LOC (3); predicted: PER, LOC (2), both right: P = 1, R = 2/3, F1 = 0.8
    assert float(metric.compute()) == pytest.approx(0.8)


def test_task_metrics_by_name():
    assert set(dev_metrics("accuracy", ["a", "b"])) == {"accuracy"}
    assert set(dev_metrics("accuracy_f1", ["0", "1"])) == {"accuracy", "f1"}
    accuracy = dev_metrics("accuracy", ["a", "b", "c"])["accuracy"]
    accuracy.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 1, IGNORE]))
    assert float(accuracy.compute()) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="unknown metric"):
        dev_metrics("bleu", ["a"])
