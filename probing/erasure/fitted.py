"""A fitted eraser: one affine edit of rank r that keeps the training mean where it is (LEACE's own form),

    x' = x - ((x - mean) @ proj_right.T) @ proj_left.T        proj_left (D, r), proj_right (r, D),

applied a chunk of rows at a time, on a GPU in float32 with a refining pass, on the CPU and for float64 rows in
float64, and rounded once to the input's dtype (docs/erasure.md, "Numerical care", says why both are exact)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from probing.errors import ConfigError

# Values a pass over the rows takes at a time on the CPU: its temporaries (2 MB each in float64) stay in the cache
# (docs/erasure.md, "Numerical care").
CHUNK_VALUES = 2**18
# Values the edit takes at a time on a GPU (8 MB of float32): a chunk of probing.erasure.on_device's copies, large
# enough for a copy at the bus's speed; the edit of rows already there takes the same chunks, so both give the same
# bits (a GPU's matrix product may sum in another order for another number of rows).
DEVICE_CHUNK_VALUES = 2**21
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

    def __call__(self, x: Tensor, compute: torch.dtype | None = None) -> Tensor:
        """The erased features of `x` (..., D), computed on its device in `compute` (None: `edit_dtype`; float32 with
        a refining pass, `edited_rows`) and returned in its dtype."""
        self.check_dim(x.shape[-1])
        mean, left, right = self.operands(x.device, compute or edit_dtype(x.dtype, x.device))
        dropped = torch.tensor(self.dropped_dims, dtype=torch.long, device=x.device)
        rows = x.reshape(-1, self.feature_dim)
        erased = torch.empty_like(rows)
        step = edit_chunk_rows(rows.shape[1], rows.device)
        with exact_float32_matmul():
            for chunk, erased_chunk in zip(rows.split(step), erased.split(step)):
                erased_chunk.copy_(edited_rows(chunk, mean, left, right, dropped))  # rounded to x's dtype once
        return erased.reshape(x.shape)

    def check_dim(self, dim: int) -> None:
        if dim != self.feature_dim:
            raise ConfigError(f"{self.method} eraser: it was fitted on {self.feature_dim}-dimensional features and is "
                              f"applied to {dim}-dimensional ones. Fix: apply it to the features of the model and "
                              "layer it was fitted on")

    def operands(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """mean, proj_left and proj_right on `device` in `dtype` (rounded from the fitted float64 ones)."""
        return tuple(tensor.to(device=device, dtype=dtype) for tensor in (self.mean, self.proj_left, self.proj_right))

    def to(self, device: torch.device | str) -> FittedEraser:
        return dataclasses.replace(self, **{name: getattr(self, name).to(device) for name in ERASER_TENSORS})


def edit_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The type the edit of rows of `dtype` is computed in on `device`: float32 for float32, float16 and bfloat16 rows
    on a GPU (half the bytes of its passes); float64 for float64 rows (their own precision) and on the CPU, where the
    two float32 passes cost as much as one in float64 (docs/erasure.md, "Numerical care")."""
    return torch.float64 if dtype == torch.float64 or device.type == "cpu" else torch.float32


def edited_rows(rows: Tensor, mean: Tensor, left: Tensor, right: Tensor, dropped: Tensor) -> Tensor:
    """x' = x - ((x - mean) @ right.T) @ left.T of (n, D) `rows` in the operands' type (float32 or float64), the
    dropped dimensions set to the mean. In float32 a second pass removes what the first left along the erased
    directions: there the exact x' has no variance, and the first pass's round-off comes from the products of the
    unerased rows, whose size follows the concept (a converged linear probe reads it back); the second pass measures
    that residue on rows that no longer carry the concept, so what is left is the round-off of erased values, as when
    float64 is rounded to float32 once (docs/erasure.md, "Numerical care"; tests/erasure/test_on_device.py shows it)."""
    wide = rows.to(mean.dtype)
    edited = torch.addmm(wide, (wide - mean) @ right.T, left.T, alpha=-1)  # wide - (...) @ left.T
    if mean.dtype != torch.float64:
        edited.addmm_((edited - mean) @ right.T, left.T, alpha=-1)
    edited[:, dropped] = mean[dropped]
    return edited


@contextmanager
def exact_float32_matmul() -> Iterator[None]:
    """float32 products in full float32 within the block (not TF32 or bf16, which
    `torch.set_float32_matmul_precision("high")` allows): the edit's round-off must stay float32's."""
    precision = torch.get_float32_matmul_precision()
    if precision == "highest":
        yield
        return
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)


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


def edit_chunk_rows(dim: int, device: torch.device) -> int:
    """How many rows of `dim` values the edit takes at a time on `device`: CHUNK_VALUES values on the CPU,
    DEVICE_CHUNK_VALUES on a GPU."""
    return max(1, (CHUNK_VALUES if device.type == "cpu" else DEVICE_CHUNK_VALUES) // dim)
