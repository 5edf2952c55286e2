"""INLP (Ravfogel et al. 2020), iterated nullspace projection: train a softmax classifier, project out the row space
of its weights, repeat; stopped as amnesic probing (Elazar et al. 2021) stops it, when a fresh classifier's held-out
accuracy is within `tolerance` of the majority rate."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from probing.erasure.eraser import ConceptEraser, is_integer, orthonormal_basis
from probing.errors import ConfigError, setting

HELD_OUT_SHARE = 0.2  # INLP's held-out rows when none are given
INLP_WEIGHT_DECAY = 1e-4  # of the softmax classifier: small, keeps its weights finite on separable data
INLP_MAX_STEPS = 200  # L-BFGS iterations per classifier


class InlpEraser(ConceptEraser):
    """INLP with amnesic probing's stopping rule.

    Each iteration trains a multinomial logistic regression (bias, weight decay INLP_WEIGHT_DECAY, L-BFGS from
    zero weights: deterministic) on the training rows with the directions found so far projected out, and scores it
    on the held-out rows. If its accuracy is within `tolerance` of the held-out majority rate (the share of the
    held-out set's most frequent label), the concept is no longer linearly readable and fitting stops; otherwise
    the row space of its weights is removed. Softmax is unchanged by subtracting the mean weight row (which weight
    decay drives to zero anyway), so the rows are centred first: at most K - 1 directions per iteration, one for a
    binary concept as in the original. Without `held_out`, a seeded HELD_OUT_SHARE of the training rows is held out.

    `about`: iterations (classifiers trained; when stopped by the rule, the last one is the one that found nothing,
    so a rank-1 concept takes 2), held_out_accuracies (one per iteration), majority_rate, directions_per_iteration
    (summing to removed_rank), stopped_by ("majority_rate", "max_iterations" or "no_direction_left").
    """

    method = "inlp"

    def __init__(self, max_iterations: int = 20, tolerance: float = 0.01, seed: int = 0):
        if not is_integer(max_iterations) or max_iterations < 1:
            raise ConfigError(f"{setting('max_iterations')}={max_iterations}: INLP needs at least one iteration. "
                              f"Fix: set {setting('max_iterations')} to 1 or more (20 by default)")
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
            raise ConfigError(f"{setting('tolerance')}={tolerance}: not an accuracy margin in [0, 1). Fix: set "
                              f"{setting('tolerance')} to e.g. 0.01 (1 point over the majority rate)")
        if not is_integer(seed):
            raise ConfigError(f"{setting('seed')}={seed}: not an integer. Fix: set {setting('seed')} to an integer")
        self.max_iterations, self.tolerance, self.seed = max_iterations, float(tolerance), seed

    def settings(self) -> dict[str, Any]:
        return {"max_iterations": self.max_iterations, "tolerance": self.tolerance, "seed": self.seed}

    def directions(self, centred, labels, num_classes, held_out):
        (train, train_labels), (held, held_labels), source = self.split(centred.whole(), labels, held_out)
        majority = float(torch.bincount(held_labels, minlength=num_classes).max()) / len(held_labels)
        basis = train.new_zeros(centred.shape[1], 0)
        accuracies: list[float] = []
        found: list[int] = []
        stopped_by = "max_iterations"
        for _ in range(self.max_iterations):
            weights, bias = softmax_regression(project_out(train, basis), train_labels, num_classes)
            predicted = (project_out(held, basis) @ weights.T + bias).argmax(dim=1)
            accuracies.append(float((predicted == held_labels).double().mean()))
            if accuracies[-1] <= majority + self.tolerance:
                stopped_by = "majority_rate"
                break
            new = orthonormal_basis(project_out(weights - weights.mean(dim=0), basis).T)
            if new.shape[1] == 0:
                stopped_by = "no_direction_left"
                break
            basis = orthonormal_basis(torch.cat([basis, new], dim=1))
            found.append(new.shape[1])
        return basis, basis.T, {"iterations": len(accuracies), "held_out_accuracies": accuracies,
                                "majority_rate": majority, "directions_per_iteration": found,
                                "stopped_by": stopped_by, "held_out": source, "held_out_rows": len(held_labels)}

    def split(self, centred: Tensor, labels: Tensor, held_out: tuple[Tensor, Tensor] | None):
        """(train, held-out) rows and where the held-out ones came from ("given" or "carved")."""
        if held_out is not None:
            if len(held_out[1]) == 0:
                raise ConfigError("erase (inlp): the held-out split is empty. Fix: give held-out rows or none (then "
                                  f"{HELD_OUT_SHARE:.0%} of the training rows are held out)")
            return (centred, labels), held_out, "given"
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.seed)).to(labels.device)
        size = round(HELD_OUT_SHARE * len(labels))
        if size < 1 or len(labels) - size < 2:
            raise ConfigError(f"erase (inlp): {len(labels)} training rows are too few to hold out "
                              f"{HELD_OUT_SHARE:.0%} for the stopping rule. Fix: fit on more rows or give held-out "
                              "rows")
        held, train = order[:size], order[size:]
        return (centred[train], labels[train]), (centred[held], labels[held]), "carved"


def project_out(x: Tensor, basis: Tensor) -> Tensor:
    """`x` with the span of `basis`'s orthonormal columns removed (each row, or each column of a matrix of rows)."""
    return x - (x @ basis) @ basis.T


def softmax_regression(features: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Weights (K, d) and bias (K,) of a multinomial logistic regression fitted by L-BFGS (float64, from zero,
    weight decay INLP_WEIGHT_DECAY on the weights)."""
    weights = features.new_zeros(num_classes, features.shape[1], requires_grad=True)
    bias = features.new_zeros(num_classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights, bias], max_iter=INLP_MAX_STEPS, history_size=20,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-9, tolerance_change=1e-12)

    def closure() -> Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(features @ weights.T + bias, labels)
        loss = loss + INLP_WEIGHT_DECAY * weights.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return weights.detach(), bias.detach()
