"""Zhao's combination-level micro F1, checked against values computed by hand."""

from __future__ import annotations

import pytest
import torch
from torchmetrics.functional.classification import multilabel_f1_score, multilabel_precision, multilabel_recall

from probing.probes.metrics import (
    SClassMetrics,
    TypeLevelMetrics,
    combination_decisions,
    decision_scores,
)

ORG, FOOD, LOC, ART = range(4)  # ART never occurs as a gold class below

# combination id -> (word/s-class, label); the ids are arbitrary integers on purpose
APPLE_ORG, APPLE_FOOD, PARIS_LOC, BANANA_FOOD = 7, -3, 1000, 42

# (combination, label, positive probability of the probes org, food, loc, art)
CONTEXTS = [
    (APPLE_ORG, ORG, [0.9, 0.6, 0.1, 0.1]),
    (APPLE_ORG, ORG, [0.8, 0.2, 0.1, 0.1]),
    (APPLE_ORG, ORG, [0.3, 0.7, 0.1, 0.1]),
    (APPLE_ORG, ORG, [0.2, 0.1, 0.1, 0.1]),
    (APPLE_FOOD, FOOD, [0.6, 0.4, 0.0, 0.0]),
    (APPLE_FOOD, FOOD, [0.1, 0.5, 0.0, 0.0]),
    (APPLE_FOOD, FOOD, [0.1, 0.2, 0.0, 0.0]),
    (PARIS_LOC, LOC, [0.5, 0.0, 0.9, 0.0]),
    (PARIS_LOC, LOC, [0.0, 0.0, 0.4, 0.0]),
    (BANANA_FOOD, FOOD, [0.0, 0.95, 0.0, 0.0]),
]
# By hand (positive iff prob >= 0.5; decision iff positives >= half of the contexts):
#   apple/org   (4 ctx): org 2/4 -> 1 (tie) TP;  food 2/4 -> 1 FP;  loc 0, art 0
#   apple/food  (3 ctx): food 1/3 -> 0 FN;        org 1/3 -> 0
#   paris/loc   (2 ctx): loc 1/2 -> 1 (tie) TP;   org 1/2 -> 1 FP
#   banana/food (1 ctx): food 1/1 -> 1 TP
# TP = 3, FP = 2, FN = 1: P = 3/5, R = 3/4, F1 = 2*3 / (2*3 + 2 + 1) = 6/9
# per class: org 2*1/(2+1+0) = 2/3, food 2*1/(2+1+1) = 1/2, loc 1.0, art undefined (None)
# context argmax == gold: apple/org 3/4 (3rd is food), apple/food 2/3 (1st is org), paris 2/2, banana 1/1 -> 8/10


def tensors(contexts=CONTEXTS):
    combination = torch.tensor([c for c, _, _ in contexts])
    labels = torch.tensor([label for _, label, _ in contexts])
    prob = torch.tensor([p for _, _, p in contexts])
    return prob, labels, combination


def compute(contexts=CONTEXTS, *, chunks=1):
    metric = SClassMetrics(num_classes=4)
    prob, labels, combination = tensors(contexts)
    for part in zip(prob.chunk(chunks), labels.chunk(chunks), combination.chunk(chunks)):
        metric.update(*part)
    return metric.compute()


def test_combination_decisions_by_hand():
    prob, labels, combination = tensors()
    decisions, gold, contexts = combination_decisions(prob >= 0.5, labels, combination, num_classes=4)
    # rows in ascending id order: apple/food (-3), apple/org (7), banana/food (42), paris/loc (1000)
    assert contexts.tolist() == [3, 4, 1, 2]
    assert decisions.int().tolist() == [
        [0, 0, 0, 0],  # apple/food: food 1 of 3 -> 0
        [1, 1, 0, 0],  # apple/org: org and food 2 of 4 -> 1 (tie)
        [0, 1, 0, 0],
        [1, 0, 1, 0],  # paris/loc: loc and org 1 of 2 -> 1 (tie)
    ]
    assert gold.int().tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]


def test_micro_f1_and_per_class_f1_by_hand():
    result = compute()
    assert result["true_positives"] == 3 and result["false_positives"] == 2 and result["false_negatives"] == 1
    assert result["micro_f1"] == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))  # = 0.6667
    assert result["micro_precision"] == pytest.approx(0.6)
    assert result["micro_recall"] == pytest.approx(0.75)
    assert result["per_class_f1"][:3] == pytest.approx([2 / 3, 0.5, 1.0])
    assert result["per_class_f1"][ART] is None
    assert result["n_combinations"] == 4 and result["n_contexts"] == 10
    assert result["context_accuracy"] == pytest.approx(0.8)


def test_absent_class_with_false_positives_scores_zero():
    contexts = CONTEXTS[:-1] + [(BANANA_FOOD, FOOD, [0.0, 0.95, 0.0, 0.7])]  # art probe fires on banana/food
    result = compute(contexts)
    assert result["per_class_f1"][ART] == 0.0
    assert result["false_positives"] == 3
    assert result["micro_f1"] == pytest.approx(6 / (6 + 3 + 1))  # = 0.6


def test_tie_rule_at_exactly_half_and_below_half():
    two_of_four = [(1, FOOD, [0.0, p, 0.0, 0.0]) for p in (0.9, 0.5, 0.1, 0.2)]
    one_of_three = [(2, FOOD, [0.0, p, 0.0, 0.0]) for p in (0.9, 0.1, 0.2)]
    prob, labels, combination = tensors(two_of_four + one_of_three)
    decisions, _, _ = combination_decisions(prob >= 0.5, labels, combination, num_classes=4)
    assert decisions[:, FOOD].tolist() == [True, False]


def test_updates_in_shuffled_batches_give_the_same_result():
    generator = torch.Generator().manual_seed(0)
    shuffled = [CONTEXTS[i] for i in torch.randperm(len(CONTEXTS), generator=generator)]
    assert shuffled != CONTEXTS
    assert compute(shuffled, chunks=3) == compute()


def test_combination_with_two_labels_is_rejected():
    prob, labels, combination = tensors()
    labels[0] = FOOD  # first apple/org context now claims food under the same id
    with pytest.raises(ValueError, match="combination id 7 carries two labels"):
        combination_decisions(prob >= 0.5, labels, combination, num_classes=4)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_compute_without_contexts_is_an_error():
    with pytest.raises(ValueError, match="before any update"):
        SClassMetrics(num_classes=4).compute()


# Type-level probing: 4 words x 3 classes; a word may have several classes; class 2 is never gold nor predicted
TYPE_PROB = [
    [0.9, 0.6, 0.1],   # gold {0}:    TP 0, FP 1;        argmax 0, a gold class
    [0.2, 0.4, 0.3],   # gold {0, 1}: FN 0, FN 1;        argmax 1, a gold class
    [0.5, 0.7, 0.49],  # gold {1}:    FP 0 (0.5 counts), TP 1; argmax 1, a gold class
    [0.3, 0.1, 0.45],  # gold {0}:    FN 0;              argmax 2, not gold
]
TYPE_GOLD = [[1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 0, 0]]
# TP = 2, FP = 2, FN = 3: P = 1/2, R = 2/5, F1 = 4 / (4 + 2 + 3) = 4/9
# per class: 0: 2 / (2 + 1 + 2) = 2/5; 1: 2 / (2 + 1 + 1) = 1/2; 2: undefined (None)


def type_level(chunks=1):
    metric = TypeLevelMetrics(num_classes=3)
    for prob, gold in zip(torch.tensor(TYPE_PROB).chunk(chunks), torch.tensor(TYPE_GOLD).bool().chunk(chunks)):
        metric.update(prob, gold)
    return metric.compute()


def test_type_level_metrics_by_hand():
    result = type_level()
    assert (result["true_positives"], result["false_positives"], result["false_negatives"]) == (2, 2, 3)
    assert result["micro_precision"] == pytest.approx(0.5)
    assert result["micro_recall"] == pytest.approx(0.4)
    assert result["micro_f1"] == pytest.approx(4 / 9)
    assert result["per_class_f1"][:2] == pytest.approx([2 / 5, 1 / 2]) and result["per_class_f1"][2] is None
    assert result["n_combinations"] == 5 and result["n_contexts"] == 4
    assert result["context_accuracy"] == pytest.approx(3 / 4)
    assert type_level(chunks=3) == result


def test_type_level_metrics_refuse_mismatched_shapes():
    metric = TypeLevelMetrics(num_classes=3)
    with pytest.raises(ValueError, match=r"shape \(N, 3\)"):
        metric.update(torch.zeros(4, 3), torch.zeros(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"shape \(N, 3\)"):
        metric.update(torch.zeros(4, 2), torch.zeros(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"shape \(N, 3\)"):
        metric.update(torch.zeros(3), torch.zeros(3, dtype=torch.bool))


def test_decision_scores_by_hand():
    decisions = torch.tensor([[1, 0, 0], [1, 1, 0]]).bool()
    gold = torch.tensor([[1, 0, 0], [0, 1, 0]]).bool()
    scores = decision_scores(decisions, gold)  # TP 2 (0, 1), FP 1 (class 0 on row 2), FN 0
    assert (scores["true_positives"], scores["false_positives"], scores["false_negatives"]) == (2, 1, 0)
    assert scores["micro_f1"] == pytest.approx(4 / 5)
    assert scores["per_class_f1"][:2] == pytest.approx([2 / 3, 1.0]) and scores["per_class_f1"][2] is None


def state_bytes(metric) -> int:
    """Bytes held by a metric's states (tensors, or lists of tensors)."""
    total = 0
    for name in metric._defaults:
        value = getattr(metric, name)
        total += sum(t.nbytes for t in value) if isinstance(value, list) else value.nbytes
    return total


def test_the_streamed_metric_matches_the_hand_computed_case_one_context_at_a_time():
    """Contexts arrive one per update, in an order whose ids reach below and above the table's first range, so the
    per-combination counts are carried across batches and table reallocations."""
    order = [4, 9, 0, 7, 5, 1, 8, 2, 6, 3]  # apple/food (-3), banana (42), apple/org (7), paris (1000), ...
    for contexts in ([CONTEXTS[i] for i in order], CONTEXTS[::-1]):
        result = compute(contexts, chunks=len(contexts))
        assert (result["true_positives"], result["false_positives"], result["false_negatives"]) == (3, 2, 1)
        assert result["micro_f1"] == pytest.approx(6 / 9) and result["per_class_f1"][ART] is None
        assert result["per_class_f1"][:3] == pytest.approx([2 / 3, 0.5, 1.0])
        assert (result["n_combinations"], result["n_contexts"]) == (4, 10)
        assert result["context_accuracy"] == pytest.approx(0.8)
        assert result == compute()


def test_metric_state_does_not_grow_with_the_number_of_updates():
    generator = torch.Generator().manual_seed(0)
    combination = torch.arange(64) % 16
    labels = combination % 4
    sizes = {}
    for metric, args in ((SClassMetrics(num_classes=4), (labels, combination)),
                         (TypeLevelMetrics(num_classes=4), (torch.rand(64, 4, generator=generator) < 0.3,))):
        for batches in range(1, 101):
            metric.update(torch.rand(64, 4, generator=generator), *args)
            if batches in (1, 100):
                sizes[type(metric).__name__, batches] = state_bytes(metric)
        assert metric.compute()["n_contexts"] == 6400
    assert sizes["SClassMetrics", 1] == sizes["SClassMetrics", 100] > 0
    assert sizes["TypeLevelMetrics", 1] == sizes["TypeLevelMetrics", 100] > 0


def test_a_second_pass_after_reset_scores_the_same_in_a_table_of_the_same_size():
    metric = SClassMetrics(num_classes=4)
    prob, labels, combination = tensors()
    sizes, results = [], []
    for _ in range(2):
        for part in zip(prob.chunk(5), labels.chunk(5), combination.chunk(5)):
            metric.update(*part)
        sizes.append(state_bytes(metric))
        results.append(metric.compute())
        metric.reset()
    assert sizes[0] == sizes[1] and results[0] == results[1] == compute()


def test_tables_of_two_processes_merge_by_combination():
    """What compute() sees after a DDP sync: the processes' tables concatenated, a combination split between them."""
    prob, labels, combination = tensors()
    halves = [SClassMetrics(num_classes=4), SClassMetrics(num_classes=4)]
    for n in range(len(CONTEXTS)):
        halves[n % 2].update(prob[n:n + 1], labels[n:n + 1], combination[n:n + 1])
    merged, other = halves
    merged.table.extend(other.table)
    merged.n_contexts, merged.n_correct = merged.n_contexts + other.n_contexts, merged.n_correct + other.n_correct
    assert merged.compute() == compute()


def test_a_combination_with_two_labels_is_rejected_across_and_within_updates():
    prob, labels, combination = tensors()
    metric = SClassMetrics(num_classes=4)
    metric.update(prob[:2], labels[:2], combination[:2])
    with pytest.raises(ValueError, match="combination id 7 carries two labels \\(0 and 1\\)"):
        metric.update(prob[2:3], torch.tensor([FOOD]), combination[2:3])
    with pytest.raises(ValueError, match="combination id 1000 carries two labels"):
        SClassMetrics(num_classes=4).update(prob[7:9], torch.tensor([LOC, ORG]), combination[7:9])


def test_scores_from_counts_equal_torchmetrics_multilabel_scores_bit_for_bit():
    generator = torch.Generator().manual_seed(0)
    for rows, classes, rate in ((50, 5, 0.3), (1000, 26, 0.05), (7, 3, 0.9)):
        decisions = torch.rand(rows, classes, generator=generator) < rate
        gold = torch.rand(rows, classes, generator=generator) < rate
        scores = decision_scores(decisions, gold)
        args = (decisions.long(), gold.long(), classes)
        assert scores["micro_f1"] == float(multilabel_f1_score(*args, average="micro"))
        assert scores["micro_precision"] == float(multilabel_precision(*args, average="micro"))
        assert scores["micro_recall"] == float(multilabel_recall(*args, average="micro"))
        per_class = multilabel_f1_score(*args, average="none").tolist()
        assert [f1 for f1 in scores["per_class_f1"] if f1 is not None] == [
            f1 for f1, score in zip(per_class, scores["per_class_f1"]) if score is not None]
