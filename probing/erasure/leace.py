"""LEACE (Belrose et al. 2023), least-squares concept erasure in closed form, through the `concept-erasure` package's
LeaceFitter (method "leace", affine), the concept as one-hot labels: afterwards no linear classifier does better
than a constant one, and the edit is the smallest that achieves it."""

from __future__ import annotations

from typing import Any

import torch
from concept_erasure import LeaceFitter
from torch import Tensor

from probing.erasure.eraser import CentredRows, ConceptEraser, one_hot
from probing.errors import ConfigError, setting


class LeaceEraser(ConceptEraser):
    """LEACE through the package's LeaceFitter (method "leace", affine), the concept as one-hot labels (N, K): the
    fitter is given the statistics of the centred rows (`set_statistics`) and its eraser taken.

    The package's defaults are kept, each for a reason:
    - shrinkage=True: the covariance that whitens the features is the optimal linear shrinkage estimate, not the
      sample covariance (noisy with a few thousand rows of 384 or 768 dimensions). The erasure stays exact with any
      invertible whitening; shrinkage only makes the least-squares choice among exact erasures stable.
    - svd_tol=0.01: directions of the whitened cross-covariance with a singular value below it are not erased
      (at most K - 1 directions exist); higher values damage less but may leave a trace of the concept, which
      `guardedness` reports as residual cross-covariance.
    - constrain_cov_trace=True: when the edit would increase the features' total variance, it is mixed toward the
      orthogonal projection so that it does not (erased hidden states fed back into a model keep their scale); the
      mixed edit may then leave some cross-covariance, which `guardedness` shows.
    """

    method = "leace"

    def __init__(self, shrinkage: bool = True, svd_tol: float = 0.01, constrain_cov_trace: bool = True):
        for key, value in (("shrinkage", shrinkage), ("constrain_cov_trace", constrain_cov_trace)):
            if not isinstance(value, bool):
                raise ConfigError(f"{setting(key)}={value}: not a boolean. Fix: set {setting(key)}=true or false")
        if isinstance(svd_tol, bool) or not isinstance(svd_tol, (int, float)) or not svd_tol > 0:
            raise ConfigError(f"{setting('svd_tol')}={svd_tol}: LEACE needs a positive tolerance. Fix: set "
                              f"{setting('svd_tol')} above 0 (the package's default is 0.01)")
        self.shrinkage, self.svd_tol, self.constrain_cov_trace = shrinkage, float(svd_tol), constrain_cov_trace

    def settings(self) -> dict[str, Any]:
        return {"shrinkage": self.shrinkage, "svd_tol": self.svd_tol, "constrain_cov_trace": self.constrain_cov_trace}

    def directions(self, centred, labels, num_classes, held_out):
        fitter = LeaceFitter(centred.shape[1], num_classes, method="leace", affine=True, dtype=torch.float64,
                             device=centred.device, shrinkage=self.shrinkage, svd_tol=self.svd_tol,
                             constrain_cov_trace=self.constrain_cov_trace)
        set_statistics(fitter, centred, one_hot(labels, num_classes))
        eraser = fitter.eraser
        return eraser.proj_left, eraser.proj_right, {}


def covariance_dtype(features_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The type LEACE's X^T X is computed in: float32 for features of float32 or less on the CPU, float64 otherwise
    (docs/erasure.md, "Numerical care"; on a GPU float32 products may run as TF32, and float64 costs little there)."""
    narrow = torch.promote_types(features_dtype, torch.float32) == torch.float32
    return torch.float32 if narrow and device.type == "cpu" else torch.float64


def set_statistics(fitter: LeaceFitter, centred: CentredRows, concept: Tensor) -> None:
    """Give the package's fresh float64 `fitter` the statistics that its `update` accumulates, from the centred rows
    X (N, d) and the one-hot concept Z (N, K), a chunk of rows at a time: the row count, the means, X^T (Z - mean)
    and X^T X (`update`'s X^T (X - mean), the rows being centred), this one in `covariance_dtype`. `update` computes
    them all in one type from whole (N, d) copies; LEACE's closed form (`fitter.eraser`) is the package's either
    way."""
    dim, covariance = centred.shape[1], covariance_dtype(centred.dtype, centred.device)
    fitter.n += len(concept)
    fitter.mean_z = concept.mean(dim=0)
    sums = torch.zeros(dim, dtype=torch.float64, device=centred.device)
    cross = torch.zeros(concept.shape[1], dim, dtype=torch.float64, device=centred.device)  # (Z - mean)^T X
    products = torch.zeros(dim, dim, dtype=covariance, device=centred.device)
    for chunk, concept_chunk in centred.chunks(concept - fitter.mean_z):
        sums += chunk.sum(dim=0)
        cross.addmm_(concept_chunk.T, chunk)
        rounded = chunk.to(covariance)
        products.addmm_(rounded.T, rounded)
    fitter.mean_x, fitter.sigma_xz_, fitter.sigma_xx_ = sums / len(concept), cross.T, products.double()
