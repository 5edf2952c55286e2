"""The control of every erasure: project out `rank` random orthonormal directions (seeded), `rank` being that of the
eraser it controls for; what a fitted eraser removes beyond it is the concept."""

from __future__ import annotations

from typing import Any

import torch

from probing.erasure.eraser import ConceptEraser, is_integer
from probing.erasure.fitted import FittedEraser
from probing.errors import ConfigError, setting


class RandomEraser(ConceptEraser):
    """The control: project out `rank` orthonormal directions drawn at random (QR of a seeded Gaussian (d, rank) on
    the kept dimensions), ignoring the labels. `rank` is that of the eraser it controls for, set by the caller."""

    method = "random"

    def __init__(self, rank: int | None = None, seed: int = 0):
        if rank is not None and (not is_integer(rank) or rank < 1):
            raise ConfigError(f"{setting('rank')}={rank}: the random control removes at least one direction. Fix: set "
                              f"{setting('rank')} to the rank of the eraser it controls for (1 or more)")
        if not is_integer(seed):
            raise ConfigError(f"{setting('seed')}={seed}: not an integer. Fix: set {setting('seed')} to an integer")
        self.rank, self.seed = rank, seed

    def settings(self) -> dict[str, Any]:
        return {"rank": self.rank, "seed": self.seed}

    def directions(self, centred, labels, num_classes, held_out):
        if self.rank is None:
            raise ConfigError(f"{setting('rank')}=null: the random control has no rank to match. Fix: set "
                              f"{setting('rank')} to the rank of the eraser it controls for")
        if self.rank > centred.shape[1]:
            raise ConfigError(f"{setting('rank')}={self.rank}: more directions than the {centred.shape[1]} feature "
                              f"dimensions that vary. Fix: set {setting('rank')} to at most that")
        gaussian = torch.randn(centred.shape[1], self.rank, dtype=torch.float64,
                               generator=torch.Generator().manual_seed(self.seed))
        basis = torch.linalg.qr(gaussian)[0].to(centred.device)
        return basis, basis.T, {}


def random_control(fitted: FittedEraser, seed: int) -> RandomEraser:
    """The control of `fitted`: as many random directions as it erases (at least one, so that an eraser that found
    nothing to erase still has a control that removes a direction)."""
    return RandomEraser(rank=max(fitted.rank, 1), seed=seed)
