"""Concept erasers: remove what a linear classifier could read of a concept (a label of each row) from features.

A probe shows that a layer encodes a property; erasing the property and probing again (or running the rest of the
model on the erased states: amnesic probing) shows whether anything uses it. Probes and fine-tuning both apply
erasers, so they live here, below both. Every eraser is fitted on (N, D) features and labels in [0, K) and gives
a `FittedEraser`, one affine edit of rank r:

    x' = x - ((x - mean) @ proj_right.T) @ proj_left.T        proj_left (D, r), proj_right (r, D)

which leaves the training mean where it is (LEACE's own form; an orthogonal projection has proj_left = U and
proj_right = U.T for orthonormal U). The methods:

    leace            LEACE (Belrose et al. 2023), least-squares concept erasure in closed form, through the
                     `concept-erasure` package's LeaceFitter (method "leace", affine) with the concept as one-hot
                     labels: afterwards no linear classifier does better than a constant one (class means equal,
                     cross-covariance with the labels zero) and the edit is the smallest that achieves it.
    inlp             INLP (Ravfogel et al. 2020), iterated nullspace projection: train a softmax classifier,
                     project out the row space of its weights, repeat; stopped as amnesic probing (Elazar et al.
                     2021) stops it, when a fresh classifier's held-out accuracy is within `tolerance` of the
                     majority rate.
    mean_projection  project out the span of the class-mean differences mu_c - mu (rank <= K - 1): the class means
                     become equal, with the smallest orthogonal projection that does it.
    random           the control: project out `rank` random orthonormal directions (seeded), `rank` being that of
                     the eraser it controls for; what a fitted eraser removes beyond it is the concept.

Numerical care (tests/features/test_erasure.py shows each point):

- The edit is float64: a fitted eraser computes x' in float64 (on the input's device) and rounds it to the
  input's dtype once. Along the erased directions the erased rows have no variance in exact arithmetic, so
  round-off is all there is there; computed in float32, that round-off depends on the unerased values, hence on
  the concept, and a logistic regression trained to convergence reads it back (7 points over the majority rate on
  a planted concept). Rounded once from float64, it depends on the erased values only.
- Fitting is float64 but for LEACE's covariance X^T X, which float32 (or narrower) features on the CPU get in
  float32 (`covariance_dtype`): it is the fit's one cost that grows as N x D^2 (the rest grows as N x D x K or
  D^3), and LEACE's guarantee does not rest on it. The eraser removes the cross-covariance X^T Z exactly whatever
  invertible covariance whitens it (svd_tol's cut and the trace constraint aside), so the round-off of X^T X
  (about 1e-7 relative) moves the eraser by as much among exact ones and leaves the erasure exact. X^T Z and the
  eraser's algebra must stay float64: the package's LeaceFitter run wholly in float32 leaves a cross-covariance of
  about 5e-7 of before, which a converged logistic regression reads back on some planted concepts (46 points over
  the majority rate). float64 features, and a GPU (where float32 products may run as TF32, and float64 costs
  little), get float64 throughout.
- Near-constant dimensions are dropped. Some layers have dimensions with next to no variance: MiniLM's last layer
  has two whose standard deviation is about 4e-32, and one of 5e-9, where the largest is about 1.7. Their values
  are round-off, and any round-off an edit writes into them is many times their own scale. A dimension whose
  training standard deviation is at most LOW_VARIANCE_THRESHOLD times the largest one is left out of the fit and
  set to its training mean in every application (`dropped_dims`): it carries nothing a probe could use, and nothing
  can be written into it. (A probe that does not rescale its inputs reads nothing from such a dimension anyway:
  neither on synthetic data nor on MiniLM's last layer did LEACE without the drop leave anything a converged
  logistic regression found; the drop is kept because it costs nothing and makes that hold by construction.)

A fitted eraser is applied row by row: chunks give the same rows as the whole. On the CPU the passes over the rows
(the moments, LEACE's statistics, the edit) take CHUNK_VALUES values at a time and make no (N, D) temporary: a
fresh one costs more than the arithmetic done with it (filling new memory ran at a seventh of the speed of filling
memory in use: 20 ms against 3 for 25,000 x 384 float64 values on 2 AMD EPYC cores). INLP and mean projection work
on a whole float64 copy of the centred rows (`CentredRows.whole`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from concept_erasure import LeaceFitter
from torch import Tensor

from probing.errors import ConfigError, DataFormatError
from probing.features.tensor_files import (
    READ_ERRORS,
    hash_matches,
    hashed_metadata,
    read_tensor_file,
    write_tensor_file,
)
from probing.vocabulary import ERASURE_METHODS

# Relative to the largest training standard deviation: a dimension below it is dropped (see the module docstring).
# MiniLM's near-constant dimensions sit at 1e-32 to 1e-9 of the largest, its ordinary ones above 0.05.
LOW_VARIANCE_THRESHOLD = 1e-6
# Singular values below this fraction of the largest count as zero when a set of directions is orthonormalized.
DIRECTION_RTOL = 1e-8
# Values a pass over the rows takes at a time on the CPU: its temporaries (2 MB each in float64) stay in the cache
# (see the module docstring).
CHUNK_VALUES = 2**18
HELD_OUT_SHARE = 0.2  # INLP's held-out rows when none are given
INLP_WEIGHT_DECAY = 1e-4  # of the softmax classifier: small, keeps its weights finite on separable data
INLP_MAX_STEPS = 200  # L-BFGS iterations per classifier

ERASER_FILE_FORMAT = 1
ERASER_KEY = "eraser"  # the safetensors metadata key of an eraser file's description
ERASER_TENSORS = ("mean", "proj_left", "proj_right")  # those of every method: one affine edit
ERASER_RECORD = {"method": str, "dropped_dims": list, "fit": dict, "about": dict}  # the description's keys, types
REFIT_FIX = "refit the eraser (rerun the run that saved it)"


@dataclasses.dataclass(frozen=True, eq=False)
class FittedEraser:
    """A fitted affine edit (see the module docstring); `about` says how it was fitted (settings, fit rows, removed
    rank, INLP's iterations)."""

    method: str
    mean: Tensor
    proj_left: Tensor
    proj_right: Tensor
    dropped_dims: tuple[int, ...]
    about: dict[str, Any]

    @cached_property
    def rank(self) -> int:
        """The numerical rank of the edit proj_left @ proj_right (LEACE's factors can have more columns than the
        edit's rank)."""
        return edit_rank(self.proj_left, self.proj_right)

    @property
    def feature_dim(self) -> int:
        return self.mean.shape[0]

    def __call__(self, x: Tensor) -> Tensor:
        """The erased features of `x` (..., D), computed in float64 on its device and returned in its dtype (see
        the module docstring: computed in float32, the round-off would carry the erased concept)."""
        if x.shape[-1] != self.feature_dim:
            raise ConfigError(f"{self.method} eraser: it was fitted on {self.feature_dim}-dimensional features and is "
                              f"applied to {x.shape[-1]}-dimensional ones. Fix: apply it to the features of the "
                              "model and layer it was fitted on")
        mean, left, right = (tensor.to(device=x.device, dtype=torch.float64)
                             for tensor in (self.mean, self.proj_left, self.proj_right))
        dropped = torch.tensor(self.dropped_dims, dtype=torch.long, device=x.device)
        rows = x.reshape(-1, self.feature_dim)
        erased = torch.empty_like(rows)
        step = chunk_rows(rows)
        for chunk, erased_chunk in zip(rows.split(step), erased.split(step)):
            wide = chunk.double()
            edited = torch.addmm(wide, (wide - mean) @ right.T, left.T, alpha=-1)  # wide - (...) @ left.T
            edited[:, dropped] = mean[dropped]
            erased_chunk.copy_(edited)  # rounded to the input's dtype once
        return erased.reshape(x.shape)

    def to(self, device: torch.device | str) -> FittedEraser:
        return dataclasses.replace(self, **{name: getattr(self, name).to(device) for name in ERASER_TENSORS})


def edit_rank(proj_left: Tensor, proj_right: Tensor) -> int:
    """The numerical rank of proj_left (D, r) @ proj_right (r, D), computed on the r x r core of their QR factors
    (the same singular values) with torch's default tolerance for a D x D matrix."""
    if proj_left.shape[1] == 0:
        return 0
    left_core = torch.linalg.qr(proj_left.double())[1]
    right_core = torch.linalg.qr(proj_right.double().T)[1]
    size = max(proj_left.shape)
    return int(torch.linalg.matrix_rank(left_core @ right_core.T, rtol=size * torch.finfo(torch.float64).eps))


def low_variance_dims(features: Tensor, relative_threshold: float = LOW_VARIANCE_THRESHOLD) -> tuple[int, ...]:
    """The dimensions of (N, D) `features` whose standard deviation is at most `relative_threshold` times the
    largest one (constant ones always; all of them when every dimension is constant)."""
    return near_constant_dims(moments(features)[1], relative_threshold)


def near_constant_dims(std: Tensor, relative_threshold: float) -> tuple[int, ...]:
    """The dimensions whose standard deviation `std` (D,) is at most `relative_threshold` times the largest."""
    return tuple(torch.nonzero(std <= relative_threshold * std.max()).flatten().tolist())


def moments(rows: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and the standard deviation (D,) of (N, D) `rows`, in float64, a chunk of rows at a time. The rows
    are shifted by the first one before they are summed, so that a constant dimension's mean is its value and its
    deviation exactly zero (the mean of N equal values need not round to that value)."""
    first = rows[0].double()
    chunks = rows.split(chunk_rows(rows))
    mean = first + sum((chunk.double() - first).sum(dim=0) for chunk in chunks) / len(rows)
    variance = sum((chunk.double() - mean).square().sum(dim=0) for chunk in chunks) / len(rows)
    return mean, variance.sqrt()


def chunk_rows(rows: Tensor) -> int:
    """How many rows of (N, D) `rows` a pass over them takes at a time: about CHUNK_VALUES values on the CPU, all of
    them on a GPU (where a chunk costs kernel launches, not cache)."""
    return max(1, CHUNK_VALUES // rows.shape[1] if rows.device.type == "cpu" else len(rows))


@dataclasses.dataclass(frozen=True)
class CentredRows:
    """The training rows (N, D) as given, seen centred on their mean, in float64, on the kept dimensions: whole
    (`whole`: an (N, d) copy) or a chunk at a time (`chunks`: no (N, D) temporary, what LEACE's statistics use)."""

    rows: Tensor
    mean: Tensor
    kept: list[int] | None  # None: every dimension

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rows), self.rows.shape[1] if self.kept is None else len(self.kept)

    @property
    def device(self) -> torch.device:
        return self.rows.device

    @property
    def dtype(self) -> torch.dtype:
        """The rows' own type (LEACE's covariance follows it)."""
        return self.rows.dtype

    def of(self, values: Tensor) -> Tensor:
        """(n, D) `values` centred on the training mean, in float64, on the kept dimensions."""
        centred = values.to(device=self.mean.device, dtype=torch.float64) - self.mean
        return centred if self.kept is None else centred[:, self.kept]

    def whole(self) -> Tensor:
        return self.of(self.rows)

    def chunks(self, *aligned: Tensor) -> Iterator[tuple[Tensor, ...]]:
        """The centred rows a chunk at a time (`chunk_rows`), each with the same rows of the (N, ...) `aligned`."""
        step = chunk_rows(self.rows)
        for start in range(0, len(self.rows), step):
            rows = slice(start, start + step)
            yield self.of(self.rows[rows]), *(tensor[rows] for tensor in aligned)


class ConceptEraser:
    """A method of erasure with its settings, built by Hydra from `erase=<method>`; `fit` gives a FittedEraser.

    Subclasses fit on the kept (not near-constant) dimensions, centred (`CentredRows`), in `directions`; this class
    checks the data, drops dimensions and assembles the result."""

    method: str = ""

    def settings(self) -> dict[str, Any]:
        """The constructor's arguments, recorded in the fitted eraser's `about`."""
        return {}

    def fit(self, features: Tensor, labels: Tensor, num_classes: int,
            held_out: tuple[Tensor, Tensor] | None = None) -> FittedEraser:
        """Fit on (N, D) `features` and (N,) `labels` in [0, num_classes); `held_out` (features, labels) is used by
        INLP's stopping rule and ignored by the others."""
        rows, labels = features.detach(), checked_labels(features, labels, num_classes)
        present = int((torch.bincount(labels, minlength=num_classes) > 0).sum())
        if present < 2:
            raise ConfigError(f"erase ({self.method}): the concept has one label in the training split ({present} of "
                              f"{num_classes} classes present), there is nothing to erase. Fix: fit on a split with "
                              "rows of at least two classes")
        mean, std = moments(rows)
        fit_rows, feature_dim = rows.shape
        dropped = near_constant_dims(std, LOW_VARIANCE_THRESHOLD)
        kept = [dim for dim in range(feature_dim) if dim not in set(dropped)]
        if not kept:
            raise ConfigError(f"erase ({self.method}): every feature dimension is constant on the training split. "
                              "Fix: fit on features that vary")
        centred = CentredRows(rows, mean, kept if dropped else None)
        held = None
        if held_out is not None:
            held_x, held_labels = checked_data(*held_out, num_classes)
            held = centred.of(held_x), held_labels.to(rows.device)
        left, right, found = self.directions(centred, labels, num_classes, held)
        proj_left = mean.new_zeros(feature_dim, left.shape[1])
        proj_right = mean.new_zeros(right.shape[0], feature_dim)
        proj_left[kept], proj_right[:, kept] = left, right
        about = {"method": self.method, **self.settings(), "fit_rows": fit_rows, "feature_dim": feature_dim,
                 "num_classes": num_classes, "classes_present": present,
                 "low_variance_threshold": LOW_VARIANCE_THRESHOLD, "removed_rank": edit_rank(proj_left, proj_right),
                 **found}
        return FittedEraser(self.method, mean, proj_left, proj_right, dropped, about)

    def directions(self, centred: CentredRows, labels: Tensor, num_classes: int,
                   held_out: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor, dict[str, Any]]:
        """proj_left (d, r) and proj_right (r, d) on the kept dimensions of the centred training rows, and what the
        fit found (for `about`); `held_out`: (rows centred as the training rows, labels)."""
        raise NotImplementedError


def checked_data(features: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Features as float64 (N, D) and labels as int64 (N,) on the features' device (`checked_labels`)."""
    return features.detach().double(), checked_labels(features, labels, num_classes)


def checked_labels(features: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """Labels as int64 (N,) on the device of the (N, D) features; shapes and label range checked."""
    if features.ndim != 2 or labels.shape != features.shape[:1]:
        raise ValueError(f"features (N, D) and labels (N,) expected, got {tuple(features.shape)} and "
                         f"{tuple(labels.shape)}")
    labels = labels.long().to(features.device)
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got {labels.min()}..{labels.max()}")
    return labels


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def one_hot(labels: Tensor, num_classes: int) -> Tensor:
    return torch.nn.functional.one_hot(labels, num_classes).double()


def orthonormal_basis(vectors: Tensor) -> Tensor:
    """(d, k) orthonormal columns spanning the columns of (d, n) `vectors`, to DIRECTION_RTOL of the largest."""
    if vectors.shape[1] == 0:
        return vectors
    u, s, _ = torch.linalg.svd(vectors, full_matrices=False)
    return u[:, s > DIRECTION_RTOL * s.max()] if s.max() > 0 else u[:, :0]


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
                raise ConfigError(f"erase.eraser.{key}={value}: not a boolean. Fix: set erase.eraser.{key}=true or "
                                  "false")
        if isinstance(svd_tol, bool) or not isinstance(svd_tol, (int, float)) or not svd_tol > 0:
            raise ConfigError(f"erase.eraser.svd_tol={svd_tol}: LEACE needs a positive tolerance. Fix: set "
                              "erase.eraser.svd_tol above 0 (the package's default is 0.01)")
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
    (see the module docstring; on a GPU float32 products may run as TF32, and float64 costs little there)."""
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
            raise ConfigError(f"erase.eraser.max_iterations={max_iterations}: INLP needs at least one iteration. "
                              "Fix: set erase.eraser.max_iterations to 1 or more (20 by default)")
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
            raise ConfigError(f"erase.eraser.tolerance={tolerance}: not an accuracy margin in [0, 1). Fix: set "
                              "erase.eraser.tolerance to e.g. 0.01 (1 point over the majority rate)")
        if not is_integer(seed):
            raise ConfigError(f"erase.eraser.seed={seed}: not an integer. Fix: set erase.eraser.seed to an integer")
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


class MeanProjectionEraser(ConceptEraser):
    """Project out span{mu_c - mu} over the classes present (rank <= K - 1), orthogonally about the training mean."""

    method = "mean_projection"

    def directions(self, centred, labels, num_classes, held_out):
        counts = torch.bincount(labels, minlength=num_classes)
        rows = centred.whole()
        sums = rows.new_zeros(num_classes, centred.shape[1]).index_add_(0, labels, rows)
        class_means = sums[counts > 0] / counts[counts > 0, None]  # the centred data: mu_c - mu
        basis = orthonormal_basis(class_means.T)
        return basis, basis.T, {}


class RandomEraser(ConceptEraser):
    """The control: project out `rank` orthonormal directions drawn at random (QR of a seeded Gaussian (d, rank) on
    the kept dimensions), ignoring the labels. `rank` is that of the eraser it controls for, set by the caller."""

    method = "random"

    def __init__(self, rank: int | None = None, seed: int = 0):
        if rank is not None and (not is_integer(rank) or rank < 1):
            raise ConfigError(f"erase.eraser.rank={rank}: the random control removes at least one direction. Fix: set "
                              "erase.eraser.rank to the rank of the eraser it controls for (1 or more)")
        if not is_integer(seed):
            raise ConfigError(f"erase.eraser.seed={seed}: not an integer. Fix: set erase.eraser.seed to an integer")
        self.rank, self.seed = rank, seed

    def settings(self) -> dict[str, Any]:
        return {"rank": self.rank, "seed": self.seed}

    def directions(self, centred, labels, num_classes, held_out):
        if self.rank is None:
            raise ConfigError("erase.eraser.rank=null: the random control has no rank to match. Fix: set "
                              "erase.eraser.rank to the rank of the eraser it controls for")
        if self.rank > centred.shape[1]:
            raise ConfigError(f"erase.eraser.rank={self.rank}: more directions than the {centred.shape[1]} feature "
                              "dimensions that vary. Fix: set erase.eraser.rank to at most that")
        gaussian = torch.randn(centred.shape[1], self.rank, dtype=torch.float64,
                               generator=torch.Generator().manual_seed(self.seed))
        basis = torch.linalg.qr(gaussian)[0].to(centred.device)
        return basis, basis.T, {}


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


def save_eraser(fitted: FittedEraser, path: Path, about: Mapping[str, Any]) -> None:
    """Write `fitted` and `about` (what it was fitted on: model, layer, concept...) to a checked safetensors file
    (probing.features.tensor_files), atomically."""
    tensors = {name: getattr(fitted, name).detach().cpu().double().contiguous() for name in ERASER_TENSORS}
    text = json.dumps({"format": ERASER_FILE_FORMAT, "method": fitted.method, "dropped_dims": list(fitted.dropped_dims),
                       "fit": fitted.about, "about": dict(about)})
    write_tensor_file(path, tensors, hashed_metadata(ERASER_KEY, text, tensors))


def load_eraser(path: Path) -> tuple[FittedEraser, dict[str, Any]]:
    """The eraser of a file that `save_eraser` wrote, and the `about` saved with it; a file that is not one, whose
    tensors or metadata changed since, or whose tensors do not fit its description (as saved probes are checked) is
    one DataFormatError."""
    try:
        metadata, tensors = read_tensor_file(path)
        record = json.loads(metadata[ERASER_KEY]) if ERASER_KEY in metadata else None
    except (*READ_ERRORS, ValueError) as error:
        raise DataFormatError(path, None, f"not a readable eraser file ({type(error).__name__}: {error})",
                              REFIT_FIX) from error
    if record is None:
        raise DataFormatError(path, None, f"no `{ERASER_KEY}` description in its metadata: a safetensors file of "
                              "another kind, not a saved eraser", f"point to an eraser file, or {REFIT_FIX}")
    if not isinstance(record, dict) or record.get("format") != ERASER_FILE_FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise DataFormatError(path, None, f"eraser file format {found}, this version reads {ERASER_FILE_FORMAT}",
                              REFIT_FIX)
    if not hash_matches(metadata, tensors, ERASER_KEY):
        raise DataFormatError(path, None, "its metadata or tensors do not match the hash recorded when the file was "
                              "written (the file is damaged or was changed)", REFIT_FIX)
    problem = record_problem(record) or tensors_problem(record, tensors)
    if problem is not None:
        raise DataFormatError(path, None, problem, REFIT_FIX)
    fitted = FittedEraser(record["method"], *(tensors[name] for name in ERASER_TENSORS),
                          tuple(record["dropped_dims"]), record["fit"])
    return fitted, record["about"]


def record_problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with an eraser file's description (its method, dropped dimensions, fit and `about`), if
    anything: a valid hash says only that the file is as written, not that this version wrote it so."""
    wrong = [key for key, kind in ERASER_RECORD.items() if not isinstance(record.get(key), kind)]
    if wrong:
        return f"its `{ERASER_KEY}` description lacks {', '.join(wrong)} (or holds another kind of value there)"
    if record["method"] not in ERASURE_METHODS:
        return f"method {record['method']!r} is not an eraser's (one of {', '.join(ERASURE_METHODS)})"
    fit = record["fit"]
    sizes = [key for key in ("feature_dim", "removed_rank") if not is_integer(fit.get(key)) or fit[key] < 0]
    if sizes:
        return f"its fit records no {' or '.join(sizes)} (a count of 0 or more)"
    dropped, dim = record["dropped_dims"], fit["feature_dim"]
    if not all(is_integer(index) and 0 <= index < dim for index in dropped):
        return f"dropped_dims {dropped} are not dimensions of its {dim}-dimensional features"
    return None


def tensors_problem(record: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> str | None:
    """What is wrong with an eraser file's tensors, if anything: other names than every method's
    (ERASER_TENSORS), shapes that do not fit the features and removed rank of its fit, values that are not finite."""
    method, dim, rank = record["method"], record["fit"]["feature_dim"], record["fit"]["removed_rank"]
    if sorted(tensors) != sorted(ERASER_TENSORS):
        return (f"it holds the tensors {', '.join(sorted(tensors)) or 'none'}, where a fitted eraser ({method}) holds "
                f"{', '.join(ERASER_TENSORS)}")
    left = tensors["proj_left"]
    width = left.shape[1] if left.ndim == 2 else -1
    expected = {"mean": (dim,), "proj_left": (dim, width), "proj_right": (width, dim)}
    if width < rank or any(tuple(tensors[name].shape) != shape for name, shape in expected.items()):
        shapes = ", ".join(f"{name} {tuple(tensors[name].shape)}" for name in ERASER_TENSORS)
        return (f"its tensors ({shapes}) do not fit its {dim}-dimensional features and removed rank {rank} "
                f"(mean ({dim},), proj_left ({dim}, r), proj_right (r, {dim}) with r >= {rank})")
    broken = [name for name in ERASER_TENSORS if not torch.isfinite(tensors[name]).all()]
    if broken:
        return f"tensors {', '.join(broken)} hold values that are not finite"
    return None
