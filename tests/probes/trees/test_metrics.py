"""The structural probes' scores (UUAS, DSpr., Root %, NSpr.), checked against trees, distances and correlations
written out by hand, with the reference's tie order and punctuation rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from probing.errors import ConfigError
from probing.probes.trees.metrics import (
    TreeMetrics,
    depth_spearman,
    distance_spearmans,
    gold_root,
    least_deep_word,
    linear_baseline,
    mean_over_lengths,
    root_correct,
    spanning_tree_edges,
    uuas_counts,
)

# "The cat sat .": The -> cat -> sat (root) <- .   ('.' is punctuation)
GOLD_CAT = np.array([[0, 1, 2, 3],
                     [1, 0, 1, 2],
                     [2, 1, 0, 1],
                     [3, 2, 1, 0]], dtype=np.float32)
DEPTHS_CAT = np.array([2, 1, 0, 1], dtype=np.float32)
PUNCT_CAT = np.array([False, False, False, True])
# Over The, cat, sat: The-sat 1.5 then The-cat 2.0 (cat-sat 3.0 would close a cycle); '.' is closest to every word
# and would join the tree if it were not punctuation.
PRED_CAT = np.array([[0.0, 2.0, 1.5, 0.1],
                     [2.0, 0.0, 3.0, 0.1],
                     [1.5, 3.0, 0.0, 0.1],
                     [0.1, 0.1, 0.1, 0.0]], dtype=np.float32)

# "red apples : pears figs": red -> apples -> ':' (root) <- pears, figs; the punctuation word is the hub, so apples,
# pears and figs are all at distance 2 of each other and the gold spanning tree depends on the tie order.
GOLD_TIE = np.array([[0, 1, 2, 3, 3],
                     [1, 0, 1, 2, 2],
                     [2, 1, 0, 1, 1],
                     [3, 2, 1, 0, 2],
                     [3, 2, 1, 2, 0]], dtype=np.float32)
PUNCT_TIE = np.array([False, False, True, False, False])
# The reference's rule: red-apples (1), then the ties at 2 in row-major order: apples-pears, apples-figs, and
# pears-figs closes a cycle. {(0,1), (1,3), (3,4)} and {(0,1), (1,4), (3,4)} are as short, but not its choice.
GOLD_TIE_EDGES = {(0, 1), (1, 3), (1, 4)}
# The gold distances, but pears-figs a little shorter: red-apples (1), pears-figs (1.9), apples-pears (2).
PRED_TIE = GOLD_TIE.copy()
PRED_TIE[3, 4] = PRED_TIE[4, 3] = 1.9

# Five words, no punctuation: a chain (each word attached to the next) and a star (every word attached to word 0).
GOLD_CHAIN = np.array([[0, 1, 2, 3, 4],
                       [1, 0, 1, 2, 3],
                       [2, 1, 0, 1, 2],
                       [3, 2, 1, 0, 1],
                       [4, 3, 2, 1, 0]], dtype=np.float32)
GOLD_STAR = np.array([[0, 1, 1, 1, 1],
                      [1, 0, 2, 2, 2],
                      [1, 2, 0, 2, 2],
                      [1, 2, 2, 0, 2],
                      [1, 2, 2, 2, 0]], dtype=np.float32)
NO_PUNCT = np.zeros(5, dtype=bool)


def test_spanning_tree_leaves_punctuation_out():
    assert spanning_tree_edges(GOLD_CAT, ~PUNCT_CAT) == {(0, 1), (1, 2)}
    assert spanning_tree_edges(PRED_CAT, ~PUNCT_CAT) == {(0, 1), (0, 2)}
    assert spanning_tree_edges(PRED_CAT, np.ones(4, dtype=bool)) == {(0, 3), (1, 3), (2, 3)}


def test_uuas_counts_shared_undirected_edges():
    assert uuas_counts(PRED_CAT, GOLD_CAT, PUNCT_CAT) == (1, 2)  # The-cat is shared, cat-sat missed


def test_gold_tree_ties_follow_the_row_major_order():
    assert spanning_tree_edges(GOLD_TIE, ~PUNCT_TIE) == GOLD_TIE_EDGES
    assert spanning_tree_edges(PRED_TIE, ~PUNCT_TIE) == {(0, 1), (1, 3), (3, 4)}
    assert uuas_counts(PRED_TIE, GOLD_TIE, PUNCT_TIE) == (2, 3)  # pears-figs is as short in gold, but not chosen


def test_a_zero_distance_is_the_shortest_edge():
    # scipy's minimum_spanning_tree reads a 0 as "no edge" and would give {(0, 2), (1, 2)}
    predicted = np.array([[0, 0, 5], [0, 0, 1], [5, 1, 0]], dtype=np.float32)
    assert spanning_tree_edges(predicted, np.ones(3, dtype=bool)) == {(0, 1), (1, 2)}


def test_a_sentence_of_punctuation_has_no_edges():
    assert uuas_counts(PRED_CAT, GOLD_CAT, np.ones(4, dtype=bool)) == (0, 0)


def test_distance_spearmans_one_per_word_by_hand():
    gold = np.array([[0, 1, 2], [1, 0, 1], [2, 1, 0]], dtype=np.float32)  # a chain of three words
    predicted = np.array([[0, 2, 1], [2, 0, 3], [1, 3, 0]], dtype=np.float32)
    # row 0: ranks (1 3 2) vs (1 2 3): 1 - 6*2 / (3*8) = 0.5
    # row 1: ranks (2 1 3) vs (2.5 1 2.5), centred (0 -1 1) and (.5 -1 .5): 1.5 / sqrt(2 * 1.5) = sqrt(3)/2
    # row 2: ranks (2 3 1) vs (3 2 1), centred (0 1 -1) and (1 0 -1): 1 / sqrt(2 * 2) = 0.5
    assert distance_spearmans(predicted, gold) == pytest.approx([0.5, math.sqrt(3) / 2, 0.5])


def test_distance_spearmans_equal_scipy_row_by_row():
    rng = np.random.default_rng(0)
    predicted = rng.integers(0, 4, (9, 9)).astype(np.float32)  # many ties
    gold = rng.integers(0, 5, (9, 9)).astype(np.float32)
    expected = [spearmanr(p, g).statistic for p, g in zip(predicted, gold)]
    assert distance_spearmans(predicted, gold) == pytest.approx(expected, abs=1e-12)


def test_a_constant_row_has_no_correlation():
    rhos = distance_spearmans(np.ones((2, 2)), np.array([[0, 1], [1, 0]]))
    assert math.isnan(rhos[0]) and math.isnan(rhos[1])


def test_depth_spearman_by_hand():
    # ranks (3 2 1 4) vs (4 2.5 1 2.5), centred (.5 -.5 -1.5 1.5) and (1.5 0 -1.5 0): 3 / sqrt(5 * 4.5) = 2/sqrt(10)
    assert depth_spearman(np.array([1.5, 0.8, 0.2, 2.0]), DEPTHS_CAT) == pytest.approx(2 / math.sqrt(10))


@pytest.mark.parametrize(("predicted", "correct"), [
    ([1.5, 0.8, 0.2, 2.0], True),   # sat is the least deep
    ([1.5, 0.8, 0.5, 0.1], True),   # '.' is least deep but punctuation: skipped, then sat
    ([1.5, 0.3, 0.5, 0.1], False),  # '.' skipped, then cat
])
def test_root_argmin_skips_punctuation(predicted, correct):
    assert root_correct(np.array(predicted), DEPTHS_CAT, PUNCT_CAT) is correct


def test_root_argmin_of_all_punctuation_is_the_overall_argmin():
    assert least_deep_word(np.array([1.5, 0.8, 0.2, 2.0]), np.ones(4, dtype=bool)) == 2


def test_root_argmin_falls_back_when_real_words_are_deeper_than_9000():
    # the reference writes 9000 over the depth of '.', which is still below every real word: after one look per word
    # it returns the overall argmin, '.'
    predicted = np.array([9600.0, 9500.0, 9100.0, 50.0])
    assert least_deep_word(predicted, PUNCT_CAT) == 3
    assert not root_correct(predicted, DEPTHS_CAT, PUNCT_CAT)
    assert predicted[3] == 50.0  # the caller's predictions are left alone


def test_gold_root_is_the_first_word_of_depth_zero():
    assert gold_root(np.array([1, 0, 0])) == 1
    with pytest.raises(ValueError, match="no root"):
        gold_root(np.array([1, 2]))


def test_mean_over_lengths_five_to_fifty_present_only():
    sums = {4: 3.0, 5: 1.5, 7: 0.0, 10: 2.7, 50: 0.9, 51: 5.0}
    counts = {4: 3, 5: 2, 7: 0, 10: 3, 50: 1, 51: 5}
    assert mean_over_lengths(sums, counts) == pytest.approx((0.75 + 0.9 + 0.9) / 3)  # lengths 5, 10, 50
    assert mean_over_lengths({4: 1.0}, {4: 1}) is None  # no length of 5 to 50: undefined


def test_linear_baseline():
    np.testing.assert_array_equal(linear_baseline(3, "distance"), [[0, 1, 2], [1, 0, 1], [2, 1, 0]])
    np.testing.assert_array_equal(linear_baseline(3, "depth"), [0, 1, 2])
    with pytest.raises(ConfigError):
        linear_baseline(3, "heads")


def _batch(sentences: list[tuple], padded: int, distance: bool = True):
    """(predictions, gold, lengths, punctuation) of sentences (predicted, gold, punctuation), padded with junk."""
    shape = (len(sentences), padded, padded) if distance else (len(sentences), padded)
    predictions, gold = torch.full(shape, 100.0), torch.full(shape, -3.0)
    punctuation = torch.ones(len(sentences), padded, dtype=torch.bool)
    for row, (pred, gold_values, punct) in enumerate(sentences):
        n = len(punct)
        where = (row, slice(0, n), slice(0, n)) if distance else (row, slice(0, n))
        predictions[where], gold[where] = torch.as_tensor(pred), torch.as_tensor(gold_values)
        punctuation[row, :n] = torch.as_tensor(punct)
    return predictions, gold, torch.tensor([len(s[2]) for s in sentences]), punctuation


def test_linear_baseline_uuas_on_a_chain_and_a_star():
    chain = (linear_baseline(5, "distance"), GOLD_CHAIN, NO_PUNCT)
    star = (linear_baseline(5, "distance"), GOLD_STAR, NO_PUNCT)
    metrics = TreeMetrics("distance")
    metrics.update(*_batch([chain], 5))
    assert metrics.compute()["uuas"] == 1.0  # the chain's edges are the baseline's
    metrics.update(*_batch([star], 5))
    # the star's gold edges 0-1 0-2 0-3 0-4; the baseline's 0-1 1-2 2-3 3-4: 1 of 4, so (4 + 1) / (4 + 4)
    assert metrics.compute()["uuas"] == 5 / 8
    assert metrics.compute()["uuas_edges"] == 8


def test_distance_metrics_sum_the_sentences_of_two_padded_batches():
    tie, cat = (PRED_TIE, GOLD_TIE, PUNCT_TIE), (PRED_CAT, GOLD_CAT, PUNCT_CAT)
    star = (linear_baseline(5, "distance"), GOLD_STAR, NO_PUNCT)
    metrics = TreeMetrics("distance")
    metrics.update(*_batch([tie, cat], 5))
    metrics.update(*_batch([star], 7))
    scores = metrics.compute()
    assert scores["uuas"] == pytest.approx((2 + 1 + 1) / (3 + 2 + 4))
    assert scores["uuas_edges"] == 9 and scores["sentences"] == 3
    # only length 5 is in 5..50 (the 4-word sentence is left out): the mean of its ten rows
    rows = distance_spearmans(PRED_TIE, GOLD_TIE) + distance_spearmans(star[0], GOLD_STAR)
    assert scores["dspr"] == pytest.approx(np.mean(rows))

    at_once = TreeMetrics("distance")
    at_once.update(*_batch([tie, cat, star], 7))
    assert at_once.compute() == scores


def test_depth_metrics_by_hand():
    chain = ([0.1, 0.5, 0.4, 2.0, 3.0], [0, 1, 2, 3, 4], NO_PUNCT)  # ranks (1 3 2 4 5): 1 - 6*2 / (5*24) = 0.9
    constant = ([1.0] * 5, [0, 1, 1, 1, 1], NO_PUNCT)  # no correlation: left out; argmin word 0, the root
    short = ([0.5, 0.7, 0.2], [1, 0, 1], [False, False, True])  # length 3: not in NSpr.; '.' skipped, word 0 wrong
    metrics = TreeMetrics("depth")
    metrics.update(*_batch([chain, constant], 5, distance=False))
    metrics.update(*_batch([short], 4, distance=False))
    assert metrics.compute() == {"root_acc": pytest.approx(2 / 3), "nspr": pytest.approx(0.9), "root_sentences": 3,
                                 "sentences": 3}


def test_lengths_outside_five_to_fifty_are_left_out():
    metrics = TreeMetrics("distance")
    metrics.update(*_batch([(PRED_CAT, GOLD_CAT, PUNCT_CAT)], 4))
    scores = metrics.compute()
    assert scores["uuas"] == 0.5 and scores["dspr"] is None


def test_a_sentence_of_punctuation_alone_is_left_out_of_root_accuracy():
    # LINEAR (depth = position) puts the root of "." first, where the reference counts it right; nothing is scored
    cat = (linear_baseline(4, "depth"), DEPTHS_CAT, PUNCT_CAT)  # least deep: The, not the root sat
    full_stop = (linear_baseline(1, "depth"), [0.0], [True])
    metrics = TreeMetrics("depth")
    metrics.update(*_batch([cat, full_stop], 4, distance=False))
    scores = metrics.compute()
    assert (scores["root_acc"], scores["root_sentences"], scores["sentences"]) == (0.0, 1, 2)


@pytest.mark.parametrize("kind", ["distance", "depth"])
def test_scores_with_nothing_to_average_are_undefined_not_nan(kind):
    # one-word sentences and a sentence of punctuation: no gold edge, no length of 5 to 50, no word that can be root
    distance = kind == "distance"
    word = (np.zeros((1, 1)) if distance else [0.3], np.zeros((1, 1)) if distance else [0.0], [False])
    marks = (linear_baseline(2, kind), linear_baseline(2, kind), [True, True])
    metrics = TreeMetrics(kind)
    metrics.update(*_batch([word, word, marks], 2, distance=distance))
    expected = ({"uuas": None, "dspr": None, "uuas_edges": 0, "sentences": 3} if distance else
                {"root_acc": 1.0, "nspr": None, "root_sentences": 2, "sentences": 3})
    assert metrics.compute() == expected
    only_marks = TreeMetrics(kind)
    only_marks.update(*_batch([marks], 2, distance=distance))
    assert only_marks.compute()["uuas" if distance else "root_acc"] is None


def test_states_do_not_grow_with_the_split():
    metrics = TreeMetrics("distance", max_length=60)
    for _ in range(3):
        metrics.update(*_batch([(PRED_TIE, GOLD_TIE, PUNCT_TIE)], 5))
    assert metrics.spearman_sums.shape == metrics.spearman_counts.shape == (61,)
    assert int(metrics.spearman_counts[5]) == 15


@pytest.mark.filterwarnings("ignore:The ``compute`` method")  # torchmetrics warns before the refusal
def test_refusals():
    with pytest.raises(ConfigError, match="kind"):
        TreeMetrics("heads")
    with pytest.raises(ConfigError, match="max_length"):
        TreeMetrics("depth", max_length=20)
    with pytest.raises(ValueError, match="before any update"):
        TreeMetrics("depth").compute()
    predictions, gold, lengths, punctuation = _batch([(PRED_TIE, GOLD_TIE, PUNCT_TIE)], 5)
    with pytest.raises(ValueError, match="must be"):
        TreeMetrics("depth").update(predictions, gold, lengths, punctuation)
    with pytest.raises(ValueError, match="does not fit"):
        TreeMetrics("distance").update(predictions, gold, lengths + 1, punctuation)
