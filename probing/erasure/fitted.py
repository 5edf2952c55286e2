"""A fitted eraser: one affine edit of rank r that keeps the training mean where it is (LEACE's own form),

    x' = x - ((x - mean) @ proj_right.T) @ proj_left.T        proj_left (D, r), proj_right (r, D),

applied in float64 and rounded once to the input's dtype, a chunk of rows at a time (docs/erasure.md, "Numerical
care", says why)."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from probing.errors import ConfigError

# Values a pass over the rows takes at a time on the CPU: its temporaries (2 MB each in float64) stay in the cache
# (docs/erasure.md, "Numerical care").
CHUNK_VALUES = 2**18
ERASER_TENSORS = ("mean", "proj_left", "proj_right")  # those of every method: one affine edit


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
        docs/erasure.md: computed in float32, the round-off would carry the erased concept)."""
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


def chunk_rows(rows: Tensor) -> int:
    """How many rows of (N, D) `rows` a pass over them takes at a time: about CHUNK_VALUES values on the CPU, all of
    them on a GPU (where a chunk costs kernel launches, not cache)."""
    return max(1, CHUNK_VALUES // rows.shape[1] if rows.device.type == "cpu" else len(rows))
