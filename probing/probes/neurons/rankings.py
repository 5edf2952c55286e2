"""Neuron-level analysis of one layer's word vectors: which dimensions ("neurons") carry a property, and what a probe
loses without them. Plain torch and numpy, on features already in memory; probing.probes.neurons.analysis runs it
on a task's words.

See docs/neurons.md, 'What a run computes' and 'Choices where the papers leave room'.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from probing.data.settings import choose, require_int
from probing.errors import setting

FILLS = ("mean", "zero")  # what replaces an ablated neuron


@dataclass(frozen=True)
class Evidence:
    """What the rankings read: the trained linear probe's weights (K, D) and the class means of the training split
    (K, D) float64, a row of NaN for a label without training examples."""

    probe_weights: np.ndarray
    class_means: np.ndarray

    @property
    def num_neurons(self) -> int:
        return self.probe_weights.shape[1]


class NeuronRanking(ABC):
    """One way to order the neurons of a layer; `name` is its key in `analysis.rankings`."""

    name = ""

    @abstractmethod
    def order(self, evidence: Evidence) -> np.ndarray:
        """(D,) int64: every neuron once, the most important first."""

    def label_scores(self, evidence: Evidence) -> np.ndarray | None:
        """(K, D): each label's importance of each neuron (higher = more), or None when the ranking has no per-label
        view; a label without training examples gets a row of NaN."""
        return None


class ProbeWeightRanking(NeuronRanking):
    """NeuroX's ordering by a linear probe's weight mass, `steps` shares (NeuroX's search_stride, 100)."""

    def __init__(self, steps: int = 100):
        self.steps = require_int("analysis.rankings.probe.steps", steps, minimum=1)

    def order(self, evidence: Evidence) -> np.ndarray:
        return weight_mass_order(np.abs(evidence.probe_weights), self.steps)

    def label_scores(self, evidence: Evidence) -> np.ndarray:
        return np.abs(evidence.probe_weights).astype(np.float64)


class ProbelessRanking(NeuronRanking):
    """Antverg & Belinkov's probeless ranking: pairwise class-mean differences."""

    def order(self, evidence: Evidence) -> np.ndarray:
        return descending(probeless_scores(evidence.class_means))

    def label_scores(self, evidence: Evidence) -> np.ndarray:
        return label_mean_differences(evidence.class_means)


class RandomRanking(NeuronRanking):
    """A random permutation of the neurons drawn from `seed`: the control every curve is read against."""

    def __init__(self, seed: int = 0):
        self.seed = require_int(setting("seed"), seed)

    def order(self, evidence: Evidence) -> np.ndarray:
        return np.random.default_rng(self.seed).permutation(evidence.num_neurons).astype(np.int64)


def descending(scores: np.ndarray) -> np.ndarray:
    """Indices by decreasing score; ties in index order (a stable sort), so an order is reproducible."""
    return np.argsort(-scores, kind="stable").astype(np.int64)


def label_top_neurons(abs_weights: np.ndarray, share: float) -> np.ndarray:
    """NeuroX's per-label rule: the neurons of one label's absolute weights (D,), largest first, up to and including
    the first whose cumulative sum reaches `share` of the label's total (all of them if none does)."""
    by_weight = descending(abs_weights)
    cumulative = np.cumsum(abs_weights[by_weight])
    reached = np.flatnonzero(cumulative >= share * cumulative[-1])
    return by_weight[: reached[0] + 1] if len(reached) else by_weight


def weight_mass_order(abs_weights: np.ndarray, steps: int) -> np.ndarray:
    """The global order of NeuroX's `get_neuron_ordering` from absolute weights (K, D) (see the module docstring)."""
    num_labels, num_neurons = abs_weights.shape
    totals = abs_weights.sum(axis=1, keepdims=True)
    largest_share = (abs_weights / np.where(totals > 0, totals, 1.0)).max(axis=0)
    tie_break = descending(largest_share)
    rank_of = np.empty(num_neurons, dtype=np.int64)
    rank_of[tie_break] = np.arange(num_neurons)
    taken = np.zeros(num_neurons, dtype=bool)
    order: list[int] = []
    weighted = [label for label in range(num_labels) if totals[label, 0] > 0]  # an all-zero row selects nothing
    for step in range(steps + 1):
        union = np.zeros(num_neurons, dtype=bool)
        for label in weighted:
            union[label_top_neurons(abs_weights[label], step / steps)] = True
        new = np.flatnonzero(union & ~taken)
        order += new[np.argsort(rank_of[new])].tolist()
        taken |= union
    order += [int(neuron) for neuron in tie_break if not taken[neuron]]
    return np.array(order, dtype=np.int64)


def class_means(features: Tensor, labels: Tensor, num_labels: int) -> np.ndarray:
    """(K, D) float64: the mean vector of each label's rows; NaN for a label without rows."""
    features = features.double()
    sums = torch.zeros(num_labels, features.shape[1], dtype=torch.float64).index_add_(0, labels, features)
    counts = torch.bincount(labels, minlength=num_labels).double()[:, None]
    return (sums / counts).numpy()  # 0/0 = NaN for an absent label


def probeless_scores(means: np.ndarray) -> np.ndarray:
    """(D,): sum over pairs c < c' of present labels of |mu_c - mu_c'|, computed from the sorted means: with m
    values sorted ascending, sum_{i<j} (v_j - v_i) = sum_i (2i - m + 1) v_i."""
    present = np.sort(means[~np.isnan(means).any(axis=1)], axis=0)
    m = len(present)
    return ((2 * np.arange(m) - m + 1)[:, None] * present).sum(axis=0)


def label_mean_differences(means: np.ndarray) -> np.ndarray:
    """(K, D): for each label, sum over the other present labels of |mu_c - mu_c'| (NaN rows for absent labels)."""
    present = ~np.isnan(means).any(axis=1)
    scores = np.abs(means[:, None, :] - means[None, present, :]).sum(axis=1)
    scores[~present] = np.nan
    return scores


def k_values(num_neurons: int) -> list[int]:
    """1, 2, 4, ... below D, then D itself."""
    values, k = [], 1
    while k < num_neurons:
        values.append(k)
        k *= 2
    return [*values, num_neurons]


def ablated(features: Tensor, neurons: Sequence[int] | np.ndarray, fill: str, means: Tensor) -> Tensor:
    """A copy of features (N, D) with the columns `neurons` replaced: by 0 (fill="zero") or by `means` (D,), the
    training means (fill="mean"); every other column unchanged."""
    choose("analysis.ablation", fill, FILLS)
    columns = torch.from_numpy(np.array(neurons, dtype=np.int64))
    out = features.clone()
    out[:, columns] = 0.0 if fill == "zero" else means.to(features)[columns]
    return out


def selection_masks(orders: Sequence[np.ndarray], ks: Sequence[int], num_neurons: int) -> Tensor:
    """(len(orders) * len(ks), D) bool: for each order, then each k, its first k neurons."""
    masks = torch.zeros(len(orders) * len(ks), num_neurons, dtype=torch.bool)
    for i, order in enumerate(orders):
        for j, k in enumerate(ks):
            masks[i * len(ks) + j, torch.as_tensor(order[:k])] = True
    return masks


# --- k-sparse probes (Gurnee et al. 2023) ---------------------------------------------------------------------------


def fit_logistic(features: Tensor, targets: Tensor, ridge: float = 1e-3, iterations: int = 50) -> Tensor:
    """Binary logistic regressions fitted by Newton's method, P problems at once: features (P, N, k) (standardised
    by the caller), targets (N,) bool, the same for every problem. Minimises the mean log-loss + ridge/2 * |w|^2
    (the intercept not penalised; the ridge keeps separable data finite). Returns (P, k + 1) float64: the weights,
    then the intercept."""
    x = torch.cat([features.double(), features.new_ones(*features.shape[:2], 1).double()], dim=2)
    y = targets.double()
    n, width = x.shape[1], x.shape[2]
    penalty = torch.full((width,), ridge, dtype=torch.float64)
    penalty[-1] = 0.0
    w = x.new_zeros(x.shape[0], width)
    xt = x.transpose(1, 2)  # (P, k + 1, N)
    for _ in range(iterations):
        p = torch.sigmoid((x @ w[:, :, None])[:, :, 0])
        gradient = (xt @ (p - y)[:, :, None])[:, :, 0] / n + penalty * w
        hessian = (xt * (p * (1 - p))[:, None, :]) @ x / n + torch.diag(penalty + 1e-9)
        step = torch.linalg.solve(hessian, gradient)
        w = w - step
        if step.abs().max() < 1e-8:
            break
    return w


def logistic_scores(features: Tensor, w: Tensor) -> Tensor:
    """(P, N) logits of fitted regressions `w` (P, k + 1) on features (P, N, k)."""
    return (features.double() @ w[:, :-1, None])[:, :, 0] + w[:, -1:]


def log_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """(P,): the mean binary log-loss of each problem's logits (P, N)."""
    return torch.nn.functional.binary_cross_entropy_with_logits(
        logits, targets.double().expand_as(logits), reduction="none").mean(dim=1)


def f1_score(predicted: Tensor, gold: Tensor) -> float:
    """The F1 of the positive class (0.0 when there is nothing to find and nothing found)."""
    true_positives = float((predicted & gold).sum())
    denominator = float(predicted.sum() + gold.sum())
    return 2 * true_positives / denominator if denominator else 0.0


@dataclass(frozen=True)
class SparseData:
    """The train, dev and test features (float32, as read) and, for each label, its (train, dev, test) bool targets
    against the rest; `columns` standardises the few columns a fit reads by the training split's mean and std (a
    column of zero std is left unscaled), so that no standardised copy of the whole matrix is made."""

    features: dict[str, Tensor]
    targets: dict[str, tuple[Tensor, Tensor, Tensor]]

    def __post_init__(self) -> None:
        train = self.features["train"].double()
        std = train.std(dim=0)
        object.__setattr__(self, "scale", (train.mean(dim=0), torch.where(std > 0, std, torch.ones_like(std))))

    def columns(self, split: str, neurons: Sequence[int] | np.ndarray) -> Tensor:
        """(N, k) float64: the standardised columns `neurons` of `split`."""
        index = torch.from_numpy(np.array(neurons, dtype=np.int64))
        mean, std = self.scale
        return (self.features[split][:, index].double() - mean[index]) / std[index]


def sparse_probes(data: SparseData, label_orders: dict[str, np.ndarray], ks: Sequence[int],
                  candidates: int) -> dict[str, dict]:
    """Gurnee et al.'s k-sparse probes, one label against the rest, for each label of `SparseData.targets` whose
    training split has positives and negatives, with the label's neurons in the order of `label_orders` (the
    per-label probeless score: Gurnee's cheap heuristic, candidates by a mean-difference score, then logistic fits on
    them):

    - the best single neuron: a 1-D logistic regression on each of the label's first `candidates` neurons, the one
      with the least dev log-loss;
    - the k-neuron probe, for each k of `ks`: a logistic regression on the label's first k neurons (k = 1: the best
      single neuron).

    Returns {label: {"best_neuron", "neurons" (per k), "f1" (test F1 per k), "dev_f1" (per k)}}; a label that cannot
    be fitted is left out."""
    results = {}
    for label, (train_y, dev_y, test_y) in data.targets.items():
        if not 0 < int(train_y.sum()) < len(train_y):
            continue
        order = label_orders[label]
        best = best_single_neuron(data, train_y, dev_y, order[:candidates])
        chosen = [[best] if k == 1 else order[:k].tolist() for k in ks]
        fitted = [fitted_f1(data, (train_y, dev_y, test_y), neurons) for neurons in chosen]
        results[label] = {"best_neuron": best, "neurons": chosen, "f1": [test for _, test in fitted],
                          "dev_f1": [dev for dev, _ in fitted]}
    return results


def best_single_neuron(data: SparseData, train_y: Tensor, dev_y: Tensor, candidates: np.ndarray) -> int:
    """The candidate whose 1-D logistic regression has the least dev log-loss (all candidates fitted at once)."""
    w = fit_logistic(data.columns("train", candidates).T[:, :, None], train_y)  # (candidates, N, 1)
    losses = log_loss(logistic_scores(data.columns("dev", candidates).T[:, :, None], w), dev_y)
    return int(candidates[int(losses.argmin())])


def fitted_f1(data: SparseData, targets: tuple[Tensor, Tensor, Tensor], neurons: Sequence[int]) -> tuple[float, float]:
    """(dev F1, test F1) of a logistic regression on `neurons`, predicting the label where p >= 0.5."""
    train_y, dev_y, test_y = targets
    w = fit_logistic(data.columns("train", neurons)[None], train_y)
    predicted = [logistic_scores(data.columns(split, neurons)[None], w)[0] >= 0 for split in ("dev", "test")]
    return f1_score(predicted[0], dev_y), f1_score(predicted[1], test_y)
