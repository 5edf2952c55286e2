"""The scores of the structural probes (Hewitt & Manning 2019 §3), computed exactly as the reference's reporter.py
(john-hewitt/structural-probes) computes them: per-sentence functions in numpy/scipy, and `TreeMetrics`, a
torchmetrics Metric that streams them over a split (fixed-size states summed across processes under DDP).

See docs/structural.md, 'Metrics'.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor
from torchmetrics import Metric

from probing.data.settings import choose
from probing.errors import ConfigError
from probing.probes.trees.structural import KINDS
from probing.vocabulary import SPEARMAN_LENGTHS

LOW, HIGH = SPEARMAN_LENGTHS  # the sentence lengths DSpr. and NSpr. average over
PUNCTUATION_DEPTH = 9000.0  # what the reference's argmin writes over a punctuation word's predicted depth


def spanning_tree_edges(distances: np.ndarray, keep: np.ndarray) -> set[tuple[int, int]]:
    """The reference's minimum spanning tree over the words where `keep` is True, as sorted (i < j) pairs of
    sentence positions (see the module docstring for its tie order)."""
    words = np.flatnonzero(keep)
    pairs = np.asarray(distances)[np.ix_(words, words)]
    parents = list(range(len(words)))
    edges: set[tuple[int, int]] = set()
    for flat in np.argsort(pairs, axis=None, kind="stable"):  # row-major order within equal distances
        if len(edges) == len(words) - 1:
            break
        a, b = divmod(int(flat), len(words))
        root_a, root_b = _root(parents, a), _root(parents, b)
        if root_a != root_b:
            parents[root_a] = root_b
            edges.add((int(words[min(a, b)]), int(words[max(a, b)])))
    return edges


def _root(parents: list[int], node: int) -> int:
    while parents[node] != node:
        node = parents[node]
    return node


def uuas_counts(predicted: np.ndarray, gold: np.ndarray, punctuation: np.ndarray) -> tuple[int, int]:
    """(edges of the gold spanning tree that the predicted one has, edges of the gold one) of one sentence."""
    keep = ~np.asarray(punctuation, dtype=bool)
    gold_edges = spanning_tree_edges(gold, keep)
    return len(gold_edges & spanning_tree_edges(predicted, keep)), len(gold_edges)


def distance_spearmans(predicted: np.ndarray, gold: np.ndarray) -> list[float]:
    """One Spearman correlation per word: its row of predicted distances against its row of gold distances (NaN
    where a row is constant)."""
    return _row_spearmans(np.asarray(predicted), np.asarray(gold)).tolist()


def depth_spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    """The Spearman correlation of a sentence's predicted and gold depths (NaN where either is constant)."""
    return float(_row_spearmans(np.asarray(predicted)[None], np.asarray(gold)[None])[0])


def _row_spearmans(predicted: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of `predicted` (n, m) with the same row of `gold`, as scipy.stats.spearmanr."""
    ranked = [rankdata(values, axis=1) for values in (predicted, gold)]
    a, b = (ranks - ranks.mean(axis=1, keepdims=True) for ranks in ranked)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.clip(rho, -1.0, 1.0)


def root_correct(predicted: np.ndarray, gold_depths: np.ndarray, punctuation: np.ndarray) -> bool:
    """Whether the gold root is the word of least predicted depth among the words that are not punctuation."""
    return gold_root(gold_depths) == least_deep_word(predicted, punctuation)


def gold_root(gold_depths: np.ndarray) -> int:
    """The first word of depth 0."""
    roots = np.flatnonzero(np.asarray(gold_depths) == 0)
    if not len(roots):
        raise ValueError(f"gold depths {np.asarray(gold_depths).tolist()} have no word of depth 0 (no root)")
    return int(roots[0])


def least_deep_word(predicted: np.ndarray, punctuation: np.ndarray) -> int:
    """The reference's argmin of the predicted depths that skips punctuation, quirks included (module docstring)."""
    depths = np.array(predicted, dtype=np.float64)  # a copy: the search overwrites punctuation words' depths
    for _ in range(len(depths)):
        word = int(np.argmin(depths))
        if not punctuation[word]:
            return word
        depths[word] = PUNCTUATION_DEPTH
    return int(np.argmin(predicted))


def mean_over_lengths(sums: Mapping[int, float], counts: Mapping[int, int], low: int = LOW,
                      high: int = HIGH) -> float | None:
    """The mean over the lengths low..high that have a count of each length's mean sums[n] / counts[n]; None (undefined)
    if none has."""
    means = [sums[n] / counts[n] for n in range(low, high + 1) if counts.get(n, 0) > 0]
    return float(np.mean(means)) if means else None


def share(hits: int, scored: int) -> float | None:
    """hits / scored; None (undefined) when nothing was scored."""
    return hits / scored if scored else None


def linear_baseline(length: int, kind: str) -> np.ndarray:
    """The paper's LINEAR baseline for a sentence of `length` words: the distance of two words is |i - j| (each word
    attached to the next), the depth of a word its position i."""
    positions = np.arange(length, dtype=np.float64)
    if choose("kind", kind, KINDS) == "distance":
        return np.abs(positions[:, None] - positions[None, :])
    return positions


class TreeMetrics(Metric):
    """The scores of one split of a structural probe: `kind` "distance" (UUAS, DSpr.) or "depth" (Root %, NSpr.).

    `update(predictions, gold, lengths, punctuation)` scores a batch of padded sentences on the CPU: predictions and
    gold (B, T, T) distances or (B, T) depths, lengths (B,), punctuation (B, T) bool; positions beyond a sentence's
    length are ignored. The states are counts and per-length sums of Spearman correlations in tensors of
    max_length + 1 entries, so memory does not grow with the split, and DDP sums them.

    `compute()`: distance {"uuas", "dspr", "uuas_edges" (gold edges scored), "sentences"}; depth {"root_acc", "nspr",
    "root_sentences" (the sentences Root % scored: those with a word that is not punctuation), "sentences"}; a score
    with nothing to average is None (see the module docstring).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, kind: str, max_length: int = 512, **kwargs):
        super().__init__(**kwargs)
        self.kind = choose("kind", kind, KINDS)
        if max_length < HIGH:
            raise ConfigError(f"TreeMetrics: max_length={max_length} is below the longest length scored ({HIGH}). "
                              f"Fix: max_length >= {HIGH}")
        self.max_length = max_length
        self.add_state("sentences", default=torch.tensor(0), dist_reduce_fx="sum")
        # distance: correct and gold edges; depth: correct roots and sentences with a word that is not punctuation
        self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("spearman_sums", default=torch.zeros(max_length + 1, dtype=torch.float64),
                       dist_reduce_fx="sum")
        self.add_state("spearman_counts", default=torch.zeros(max_length + 1, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, predictions: Tensor, gold: Tensor, lengths: Tensor, punctuation: Tensor) -> None:
        self._check_shapes(predictions, gold, lengths, punctuation)
        predicted, gold_values = (values.detach().float().cpu().numpy() for values in (predictions, gold))
        masks, sizes = punctuation.detach().bool().cpu().numpy(), lengths.detach().cpu().tolist()
        correct = total = 0
        sums, counts = np.zeros(self.max_length + 1), np.zeros(self.max_length + 1, dtype=np.int64)
        for sentence_predicted, sentence_gold, length, mask in zip(predicted, gold_values, sizes, masks):
            hits, scored, correlations = self._score_sentence(sentence_predicted, sentence_gold, length, mask)
            correct, total = correct + hits, total + scored
            defined = [rho for rho in correlations if not math.isnan(rho)]
            sums[length] += sum(defined)
            counts[length] += len(defined)
        # not in place: a state reset under Lightning's inference mode cannot be updated in place outside it
        self.sentences = self.sentences + len(sizes)
        self.correct = self.correct + correct
        self.total = self.total + total
        self.spearman_sums = self.spearman_sums + torch.from_numpy(sums).to(self.spearman_sums.device)
        self.spearman_counts = self.spearman_counts + torch.from_numpy(counts).to(self.spearman_counts.device)

    def _score_sentence(self, predicted: np.ndarray, gold: np.ndarray, length: int,
                        punctuation: np.ndarray) -> tuple[int, int, Iterable[float]]:
        """(hits, scored, Spearman correlations) of one sentence, its padding cut off."""
        if self.kind == "distance":
            predicted, gold = predicted[:length, :length], gold[:length, :length]
            return *uuas_counts(predicted, gold, punctuation[:length]), distance_spearmans(predicted, gold)
        predicted, gold, punctuation = predicted[:length], gold[:length], punctuation[:length]
        correlations = [depth_spearman(predicted, gold)]
        if punctuation.all():  # no word can be the root: left out of Root %
            return 0, 0, correlations
        return int(root_correct(predicted, gold, punctuation)), 1, correlations

    def _check_shapes(self, predictions: Tensor, gold: Tensor, lengths: Tensor, punctuation: Tensor) -> None:
        batch, padded = punctuation.shape if punctuation.dim() == 2 else (len(lengths), -1)
        expected = (batch, padded, padded) if self.kind == "distance" else (batch, padded)
        if predictions.shape != expected or gold.shape != expected or lengths.shape != (batch,):
            raise ValueError(f"{self.kind} predictions and gold must be {expected}, lengths ({batch},) and "
                             f"punctuation (B, T), got {tuple(predictions.shape)}, {tuple(gold.shape)}, "
                             f"{tuple(lengths.shape)} and {tuple(punctuation.shape)}")
        if len(lengths) and int(lengths.max()) > min(padded, self.max_length):
            raise ValueError(f"a sentence of {int(lengths.max())} words does not fit the padded length {padded} or "
                             f"TreeMetrics(max_length={self.max_length}); raise max_length for longer sentences")

    def compute(self) -> dict[str, float]:
        if self.sentences == 0:
            raise ValueError("TreeMetrics.compute() called before any update(): the split has no sentences")
        sums = dict(enumerate(self.spearman_sums.tolist()))
        counts = dict(enumerate(self.spearman_counts.tolist()))
        spearman = mean_over_lengths(sums, counts)
        correct, total, sentences = int(self.correct), int(self.total), int(self.sentences)
        if self.kind == "distance":
            return {"uuas": share(correct, total), "dspr": spearman, "uuas_edges": total, "sentences": sentences}
        return {"root_acc": share(correct, total), "nspr": spearman, "root_sentences": total, "sentences": sentences}
