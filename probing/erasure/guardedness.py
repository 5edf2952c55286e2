"""How much of the concept an eraser leaves on a split's features, and what the edit costs (the guardedness report
of probe.py's erasure runs; its fresh probes of the concept are probing.probes.erased_features's)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from probing.data.splits import EVAL_SPLITS
from probing.erasure.eraser import checked_data, one_hot
from probing.erasure.fitted import FittedEraser
from probing.erasure.inlp import softmax_regression


def guardedness(fitted: FittedEraser, features: Tensor, labels: Tensor, num_classes: int) -> dict[str, float]:
    """How much of the concept an eraser leaves on a split's (N, D) features, and what it costs:
    edit_norm_ratio (mean ||x' - x|| over mean ||x - mean||), cross_covariance (Frobenius norm of Cov(x', onehot)
    relative to that of Cov(x, onehot); 0 when both are 0), class_mean_spread_before / _after (mean distance of the
    class means to the overall mean, over the classes present) and rank."""
    x, labels = checked_data(features, labels, num_classes)
    erased = fitted(x)
    concept = one_hot(labels, num_classes)
    before, after = (cross_covariance(values, concept).norm() for values in (x, erased))
    return {"edit_norm_ratio": float((erased - x).norm(dim=1).mean() / (x - fitted.mean).norm(dim=1).mean()),
            "cross_covariance": float(after / before) if before > 0 else 0.0,
            "class_mean_spread_before": class_mean_spread(x, labels, num_classes),
            "class_mean_spread_after": class_mean_spread(erased, labels, num_classes),
            "rank": fitted.rank}


def cross_covariance(x: Tensor, concept: Tensor) -> Tensor:
    return (x - x.mean(dim=0)).T @ (concept - concept.mean(dim=0)) / max(len(x) - 1, 1)


def class_mean_spread(x: Tensor, labels: Tensor, num_classes: int) -> float:
    counts = torch.bincount(labels, minlength=num_classes)
    sums = x.new_zeros(num_classes, x.shape[1]).index_add_(0, labels, x)
    class_means = sums[counts > 0] / counts[counts > 0, None]
    return float((class_means - x.mean(dim=0)).norm(dim=1).mean())


def converged_linear_accuracy(splits: Mapping[str, tuple[Tensor, Tensor]], num_classes: int) -> dict[str, float]:
    """Dev and test accuracy of a multinomial logistic regression of the concept fitted to convergence on
    `splits["train"]` (L-BFGS in float64 from zero, INLP's classifier): what a linear probe can read, not how far an
    optimiser got (an Adam-trained probe that has not converged can score below the majority rate after erasure)."""
    train_x, train_y = splits["train"]
    weights, bias = softmax_regression(train_x.double(), train_y, num_classes)
    return {split: float(((x.double() @ weights.T + bias).argmax(dim=1) == y).float().mean())
            for split, (x, y) in splits.items() if split in EVAL_SPLITS}
