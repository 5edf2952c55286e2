"""Building blocks of the probe models."""

from probing.models.components.binary_mlps import BatchedBinaryMLPs
from probing.models.components.scalar_mix import ScalarMix

__all__ = ["BatchedBinaryMLPs", "ScalarMix"]
