"""What every erasure method shares: `ConceptEraser` checks the concept's data, drops the near-constant dimensions,
centres the rows (`CentredRows`) and assembles the `FittedEraser` from the directions a method finds on them. One
method a module beside it: leace, inlp, mean_projection, random_control."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from probing.erasure.fitted import FittedEraser, chunk_rows, edit_rank
from probing.errors import ConfigError

# Relative to the largest training standard deviation: a dimension below it is dropped (docs/erasure.md, "Numerical
# care"). MiniLM's near-constant dimensions sit at 1e-32 to 1e-9 of the largest, its ordinary ones above 0.05.
LOW_VARIANCE_THRESHOLD = 1e-6
# Singular values below this fraction of the largest count as zero when a set of directions is orthonormalized.
DIRECTION_RTOL = 1e-8


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
